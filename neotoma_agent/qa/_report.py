"""``render_turn_report``: the markdown "🧠 Neotoma" section an agent appends to a reply.

Layout (each group only when it has entries)::

    ---

    ## 🧠 Neotoma — [chat-42](<link to the conversation>)

    Retrieved (1)
    - 🏢 Acme ([company](<link to the entity>))

    Created (n) / Updated (n)             or "No durable facts read or written this turn."

    Issues (n)                            non-ok diagnoses, with meaning, risk and fix
    Repairs (n)                           what apply_repairs did, linked to neotoma_repair

Links point only where a page answers: this package's web view (``ui_url``, else
``$NEOTOMA_AGENT_UI_URL``: ``neotoma-agent ui``'s address, or ``serve``'s ``/ui``), else a
Neotoma Inspector (``inspector_base_url``, else ``$NEOTOMA_INSPECTOR_URL``: a real Neotoma
server serves its Inspector at its own address). With neither configured the report names
entities without links. A finished turn (``t`` or ``t.result``) renders with no assembly:
its conversation, retrieved, cited, created and updated entities and its diagnoses come
from the result.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

import attrs

from .. import Entity, EntitySnapshot
from ..reads import printable
from ._diagnose import Diagnosis, diagnose_turn
from ._repair import RepairResult, RepairStatus
from ._severity import Severity, as_severity

if TYPE_CHECKING:
    from .. import Turn, TurnResult

__all__ = [
    "ReportEntity",
    "ReportRepair",
    "TurnReportInput",
    "render_turn_report",
    "resolve_inspector_base_url",
    "resolve_ui_url",
]

#: where the web view's address is read from when the caller does not pass one
UI_URL_ENV: Final = "NEOTOMA_AGENT_UI_URL"
#: where a Neotoma Inspector's address is read from when the caller does not pass one
INSPECTOR_URL_ENV: Final = "NEOTOMA_INSPECTOR_URL"

_EMOJI: Final[dict[str, str]] = {
    "conversation": "🧵",
    "conversation_message": "💬",
    "conversation_turn": "🔁",
    "neotoma_repair": "🛠️",
    "person": "👤",
    "contact": "👤",
    "company": "🏢",
    "task": "✅",
    "event": "📅",
    "note": "📝",
    "file_asset": "📎",
    "email_message": "✉️",
    "invoice": "🧾",
    "receipt": "🧾",
    "transaction": "💸",
    "location": "📍",
    "place": "📍",
    "research": "🔍",
    "report": "🔍",
}
_DEFAULT_EMOJI: Final = "🗂️"
# A line's mark by severity (an ``info`` repair line is one that was applied).
_MARK: Final = {Severity.INFO: "🛠️", Severity.WARN: "🟡", Severity.ERROR: "🔴"}
_MAX_LABEL: Final = 120


def emoji_for(entity_type: str) -> str:
    """The emoji a report shows for ``entity_type`` (a folder for unknown types)."""
    return _EMOJI.get(entity_type, _DEFAULT_EMOJI)


@attrs.frozen
class ReportEntity:
    """One entity line of a report: its type, a short label and (ideally) its id."""

    entity_type: str
    label: str
    entity_id: str | None = None
    #: overrides the type's default emoji
    emoji: str | None = None

    @classmethod
    def from_entity(cls, entity: Entity | EntitySnapshot) -> ReportEntity:
        """From a lookup result or a snapshot."""
        if isinstance(entity, Entity):
            return cls(entity.entity_type, entity.name, entity.id)
        label = _label_of(entity.snapshot, entity.canonical_name or entity.entity_id)
        return cls(entity.entity_type, label, entity.entity_id)


def _label_of(fields: Mapping[str, Any], default: str) -> str:
    """The field a person reads an entity by (name, title, full name, email), else ``default``."""
    return next(
        (
            v
            for k in ("name", "title", "full_name", "email")
            if isinstance(v := fields.get(k), str) and v
        ),
        default,
    )


@attrs.frozen
class ReportRepair:
    """One line of the Repairs group."""

    label: str
    #: the ``neotoma_repair`` entity that records it, linked when known
    repair_entity_id: str | None = None
    #: ``info`` (applied), ``warn`` or ``error`` (failed)
    severity: Severity = attrs.field(default=Severity.INFO, converter=as_severity)


def _tuple(value: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(value)


@attrs.frozen
class TurnReportInput:
    """Everything a report shows; build it by hand or with :meth:`from_result`."""

    #: the conversation, for the heading (linked when its entity id is known)
    conversation: ReportEntity | None = None
    retrieved: tuple[ReportEntity, ...] = attrs.field(default=(), converter=_tuple)
    created: tuple[ReportEntity, ...] = attrs.field(default=(), converter=_tuple)
    updated: tuple[ReportEntity, ...] = attrs.field(default=(), converter=_tuple)
    diagnoses: tuple[Diagnosis, ...] = attrs.field(default=(), converter=_tuple)
    repairs: tuple[ReportRepair, ...] = attrs.field(default=(), converter=_tuple)

    @classmethod
    def from_result(
        cls,
        result: TurnResult,
        *,
        retrieved: Sequence[Entity] | None = None,
        diagnoses: Sequence[Diagnosis] | None = None,
        repairs: RepairResult | Sequence[ReportRepair] = (),
        produced: Mapping[str, ReportEntity] | None = None,
    ) -> TurnReportInput:
        """The report of a finished turn.

        The turn's own writes (messages, turn record) are bookkeeping, not facts, so they
        appear only in the heading. Retrieved lists what retrieval returned and what the
        reply cited, with type and name when the entities are at hand (``retrieved``, or a
        result that carries them), else by id. Created and Updated list what the reply
        produced (``t.remember``), split by the closing store's answer (``created_ids``),
        named from ``produced`` (entity id -> line) where given, else by id. Diagnoses
        default to ``diagnose_turn`` of the result.
        """
        conversation = ReportEntity(
            "conversation", result.conversation_id, result.conversation_entity_id
        )
        entities = retrieved if retrieved is not None else getattr(result, "retrieved", None)
        known = {e.id: e for e in entities or () if isinstance(e, Entity)}
        ids = dict.fromkeys([*result.retrieved_ids, *known, *result.cited_ids])
        lines = tuple(
            ReportEntity.from_entity(known[i]) if i in known else ReportEntity("entity", i, i)
            for i in ids
        )
        found = diagnoses if diagnoses is not None else diagnose_turn(result)
        made = produced or {}
        created = set(result.created_ids)

        def line(entity_id: str) -> ReportEntity:
            entity = made.get(entity_id)
            return entity if entity is not None else ReportEntity("entity", entity_id, entity_id)

        return cls(
            conversation=conversation,
            retrieved=lines,
            created=tuple(line(i) for i in result.produced_ids if i in created),
            updated=tuple(line(i) for i in result.produced_ids if i not in created),
            diagnoses=tuple(found),
            repairs=_repair_lines(repairs),
        )

    @classmethod
    def from_turn(
        cls,
        turn: Turn,
        *,
        diagnoses: Sequence[Diagnosis] | None = None,
        repairs: RepairResult | Sequence[ReportRepair] = (),
    ) -> TurnReportInput:
        """The report of a finished ``async with memory.turn(...) as t`` block."""
        found = diagnoses if diagnoses is not None else diagnose_turn(turn)
        return cls.from_result(
            turn.result,
            retrieved=turn.retrieved,
            diagnoses=found,
            repairs=repairs,
            # the package's own turn: what it produced is at hand, with types and names
            produced={i: _produced_line(i, p.entity) for i, p in turn._produced.items()},
        )


def _repair_lines(repairs: RepairResult | Sequence[ReportRepair]) -> tuple[ReportRepair, ...]:
    if not isinstance(repairs, RepairResult):
        return tuple(repairs)
    lines: list[ReportRepair] = []
    for outcome in repairs.outcomes:
        if outcome.action is None:
            continue
        label = outcome.action.describe()
        if outcome.status is RepairStatus.FAILED:
            failed = f"{label}: failed ({outcome.error})"
            lines.append(ReportRepair(failed, repairs.repair_entity_id, Severity.ERROR))
        else:
            lines.append(ReportRepair(label, repairs.repair_entity_id))
    return tuple(lines)


def _clean(value: str | None) -> str | None:
    # An address as given, empty meaning unset, without its trailing "/".
    return value.strip().rstrip("/") if value and value.strip() else None


def _configured(explicit: str | None, variable: str) -> str | None:
    return _clean(explicit) or _clean(os.environ.get(variable))


def resolve_ui_url(explicit: str | None = None) -> str | None:
    """The web view's address: ``explicit``, else ``$NEOTOMA_AGENT_UI_URL``, else ``None``.

    Empty values are skipped; a trailing ``/`` is dropped. The address is what
    ``neotoma-agent ui`` prints, or a ``serve`` address with ``/ui`` appended.
    """
    return _configured(explicit, UI_URL_ENV)


def resolve_inspector_base_url(explicit: str | None = None) -> str | None:
    """A Neotoma Inspector's address: ``explicit``, else ``$NEOTOMA_INSPECTOR_URL``, else
    ``None`` (no guess: a link must lead to a page that answers).

    Empty values are skipped; a trailing ``/`` is dropped.
    """
    return _configured(explicit, INSPECTOR_URL_ENV)


@attrs.frozen
class _Links:
    """Where a report's links lead: the web view's routes, or the Inspector's."""

    base: str
    web_view: bool

    def conversation(self, conversation: ReportEntity) -> str | None:
        if self.web_view:  # the web view finds a conversation by its conversation id
            return f"{self.base}/conversation?id={quote(conversation.label, safe='')}"
        if conversation.entity_id:
            return f"{self.base}/conversations/{conversation.entity_id}"
        return None

    def entity(self, entity_id: str) -> str:
        if self.web_view:
            return f"{self.base}/entity?id={quote(entity_id, safe='')}"
        return f"{self.base}/entities/{entity_id}"


def _links(ui_url: str | None, inspector_base_url: str | None) -> _Links | None:
    # An explicit argument wins over either variable; the web view over the Inspector.
    for base, web_view in (
        (_clean(ui_url), True),
        (_clean(inspector_base_url), False),
        (resolve_ui_url(), True),
        (resolve_inspector_base_url(), False),
    ):
        if base is not None:
            return _Links(base, web_view=web_view)
    return None


def _produced_line(entity_id: str, fields: Mapping[str, Any]) -> ReportEntity:
    entity_type = fields.get("entity_type")
    kind = entity_type if isinstance(entity_type, str) else "entity"
    return ReportEntity(kind, _label_of(fields, entity_id), entity_id)


def _label(text: str) -> str:
    # A label is free text (a name, a title): one line, bounded, and unable to close the
    # markdown link it sits in.
    flat = " ".join(text.split())
    if len(flat) > _MAX_LABEL:
        flat = flat[: _MAX_LABEL - 1] + "…"
    return flat.replace("[", "\\[").replace("]", "\\]")


def _heading(conversation: ReportEntity | None, links: _Links | None) -> str:
    if conversation is None or not conversation.label:
        return "## 🧠 Neotoma"
    label = _label(conversation.label)
    url = links.conversation(conversation) if links is not None else None
    return f"## 🧠 Neotoma — [{label}]({url})" if url else f"## 🧠 Neotoma — {label}"


def _entity_line(entity: ReportEntity, links: _Links | None) -> str:
    emoji = entity.emoji or emoji_for(entity.entity_type)
    label = _label(entity.label)
    if not entity.entity_id:
        return f"- {emoji} {label} (no id: see Issues)"
    kind = _label(entity.entity_type)
    if links is None:
        return f"- {emoji} {label} ({kind})"
    return f"- {emoji} {label} ([{kind}]({links.entity(entity.entity_id)}))"


def _issue_line(d: Diagnosis) -> str:
    parts = [f"{_MARK[d.severity]} {d.message} (`{d.id}`)"]
    if d.meaning:
        parts.append(f"Now: {d.meaning}")
    if d.risk:
        parts.append(f"If left: {d.risk}")
    if d.resolution:
        parts.append(f"Fix: {d.resolution}")
    return "- " + " — ".join(parts)


def _repair_line(r: ReportRepair, links: _Links | None) -> str:
    prefix = _MARK[r.severity]
    link = ""
    if r.repair_entity_id and links is not None:
        link = f" ([neotoma_repair]({links.entity(r.repair_entity_id)}))"
    return f"- {prefix} {r.label}{link}"


def render_turn_report(
    source: TurnReportInput | TurnResult | Turn,
    *,
    diagnoses: Sequence[Diagnosis] | None = None,
    repairs: RepairResult | Sequence[ReportRepair] | None = None,
    ui_url: str | None = None,
    inspector_base_url: str | None = None,
) -> str:
    """The markdown turn report (ends with one newline).

    ``source`` is a :class:`TurnReportInput`, or a finished turn (``t.result`` or ``t``),
    whose report input is built with :meth:`TurnReportInput.from_result`. ``diagnoses``
    replace the source's; ``repairs`` (an :func:`apply_repairs` result or lines) replace its
    repairs. Links lead to the web view at ``ui_url`` (else ``$NEOTOMA_AGENT_UI_URL``), else
    to a Neotoma Inspector at ``inspector_base_url`` (else ``$NEOTOMA_INSPECTOR_URL``); with
    neither, the report has no links.
    """
    report = _as_input(source, diagnoses)
    if repairs is not None:
        report = attrs.evolve(report, repairs=_repair_lines(repairs))
    elif diagnoses is not None:
        report = attrs.evolve(report, diagnoses=tuple(diagnoses))
    links = _links(ui_url, inspector_base_url)

    lines = ["---", "", _heading(report.conversation, links), ""]
    groups = (
        ("Retrieved", report.retrieved),
        ("Created", report.created),
        ("Updated", report.updated),
    )
    if any(entries for _, entries in groups):
        for title, entries in groups:
            if entries:
                lines.append(f"{title} ({len(entries)})")
                lines.extend(_entity_line(e, links) for e in entries)
                lines.append("")
    else:
        lines += ["No durable facts read or written this turn.", ""]

    issues = [d for d in report.diagnoses if not d.ok]
    if issues:
        lines.append(f"Issues ({len(issues)})")
        lines.extend(_issue_line(d) for d in issues)
        lines.append("")
    if report.repairs:
        lines.append(f"Repairs ({len(report.repairs)})")
        lines.extend(_repair_line(r, links) for r in report.repairs)
        lines.append("")
    # Labels, ids and messages come from the store; the report is shown to a human (in a
    # terminal, or a chat UI): no raw control sequences or bidi overrides.
    return printable("\n".join(lines).rstrip("\n") + "\n")


def _as_input(
    source: TurnReportInput | TurnResult | Turn, diagnoses: Sequence[Diagnosis] | None
) -> TurnReportInput:
    if isinstance(source, TurnReportInput):
        return source
    from .. import Turn, TurnResult

    if isinstance(source, Turn):
        return TurnReportInput.from_turn(source, diagnoses=diagnoses)
    if isinstance(source, TurnResult):
        return TurnReportInput.from_result(source, diagnoses=diagnoses)
    raise TypeError(f"cannot render a report from a {type(source).__name__}")
