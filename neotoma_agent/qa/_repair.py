"""``apply_repairs``: run the suggested repairs of a turn's diagnoses, then record what was done.

Each repair is one store under a deterministic idempotency key, so a second run replays
instead of writing. The run ends with one ``neotoma_repair`` entity (keyed by the turn,
one observation per distinct summary) that lists the issues found and what became of each;
its fields are a pure function of the diagnoses and of which repairs succeeded, so an
identical second run replays that store too and writes nothing new.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from .. import Transport
from ..exceptions import error_label
from ..log import get_logger
from ..reads import is_entity_id, tenant_for
from ._actions import RepairAction, build_payload
from ._core import turn_keys
from ._diagnose import Diagnosis
from ._severity import Word

__all__ = ["RepairOutcome", "RepairResult", "RepairStatus", "apply_repairs"]

logger = get_logger()


class RepairStatus(Word):
    """What became of one repair (:attr:`RepairOutcome.status`).

    A ``str`` enum whose values are the words ``to_json()`` writes:
    ``RepairStatus.APPLIED == "applied"``.
    """

    #: the store wrote it now
    APPLIED = "applied"
    #: an identical repair was stored before: nothing new was written
    REPLAYED = "replayed"
    #: no automatic repair exists for the diagnosis
    SKIPPED = "skipped"
    #: the store raised (:attr:`RepairOutcome.error` says why)
    FAILED = "failed"


@attrs.frozen
class RepairOutcome:
    """What became of one diagnosis's repair: its :class:`RepairStatus`, the action run,
    the entities it touched, and why it failed (``error``) if it did."""

    diagnosis: Diagnosis
    status: RepairStatus = attrs.field(converter=RepairStatus)
    action: RepairAction | None = None
    #: the entities the repair's store touched (message, turn record, conversation, ...)
    entity_ids: tuple[str, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the repair is in the store (``applied`` now or ``replayed``)."""
        return self.status in (RepairStatus.APPLIED, RepairStatus.REPLAYED)

    def to_json(self) -> Mapping[str, Any]:
        """The outcome as plain JSON."""
        out: dict[str, Any] = {
            "diagnosis_id": self.diagnosis.id,
            "status": str(self.status),
            "entity_ids": list(self.entity_ids),
        }
        if self.action is not None:
            out["action"] = self.action.kind
            out["description"] = self.action.describe()
        if self.error is not None:
            out["error"] = self.error
        return out


@attrs.frozen
class RepairResult:
    """What :func:`apply_repairs` did: one :class:`RepairOutcome` per problem diagnosis, in
    order, and the ``neotoma_repair`` entity recording the run."""

    conversation_id: str
    turn_id: str
    outcomes: tuple[RepairOutcome, ...]
    #: the ``neotoma_repair`` entity recording this run (``None`` if nothing was wrong, or
    #: if recording it failed)
    repair_entity_id: str | None = None
    #: the ``neotoma_repair`` store replayed: this exact run was recorded before
    replayed: bool = False

    def __iter__(self) -> Iterator[RepairOutcome]:
        return iter(self.outcomes)

    def __len__(self) -> int:
        return len(self.outcomes)

    @property
    def ok(self) -> bool:
        """True when no repair failed (skipped ones have nothing to run)."""
        return all(o.status is not RepairStatus.FAILED for o in self.outcomes)

    @property
    def wrote(self) -> bool:
        """True when this run wrote anything (False for a repeat of an earlier run)."""
        return any(o.status is RepairStatus.APPLIED for o in self.outcomes) or (
            self.repair_entity_id is not None and not self.replayed
        )

    def to_json(self) -> Mapping[str, Any]:
        """The result as plain JSON."""
        out = attrs.asdict(self, recurse=False, filter=lambda a, _: a.name != "outcomes")
        return {**out, "outcomes": [dict(o.to_json()) for o in self.outcomes]}


def _warn_failed(event: str, exc: Exception, **ids: str) -> None:
    # Class, status and code: a server's message is its own text, never logged.
    logger.warning(event, **ids, error_class=type(exc).__name__, error=error_label(exc))


async def _run(transport: Transport, diagnosis: Diagnosis) -> RepairOutcome:
    action = diagnosis.repair
    if action is None:
        return RepairOutcome(diagnosis, RepairStatus.SKIPPED)
    try:
        payload = await build_payload(action, tenant_for(transport))
        stored = await transport.store(
            payload.entities,
            idempotency_key=payload.idempotency_key,
            relationships=payload.relationships,
        )
    except Exception as exc:
        _warn_failed("repair.failed", exc, diagnosis=diagnosis.id, action=action.kind)
        error = f"{type(exc).__name__}: {exc}"
        return RepairOutcome(diagnosis, RepairStatus.FAILED, action, error=error)
    ids = tuple(dict.fromkeys(e.entity_id for e in stored.entities if e.entity_id))
    status = RepairStatus.REPLAYED if stored.replayed else RepairStatus.APPLIED
    return RepairOutcome(diagnosis, status, action, entity_ids=ids)


def _summary_entity(
    conversation_id: str,
    turn_id: str,
    issues: Sequence[Diagnosis],
    outcomes: Sequence[RepairOutcome],
) -> dict[str, Any]:
    # Outcomes are recorded as applied / failed / skipped only: "replayed" would make a
    # repeat run's summary differ from the first and write a new observation.
    repairs: list[dict[str, Any]] = []
    for o in outcomes:
        entry: dict[str, Any] = {
            "diagnosis_id": o.diagnosis.id,
            "outcome": str(RepairStatus.APPLIED if o.ok else o.status),
        }
        if o.action is not None:
            entry["action"] = o.action.kind
        if o.status is RepairStatus.FAILED and o.error is not None:
            entry["error_class"] = o.error.split(":", 1)[0]
        repairs.append(entry)
    return {
        "entity_type": "neotoma_repair",
        "canonical_name": f"neotoma_repair:{conversation_id}:{turn_id}",
        "conversation_id": conversation_id,
        "turn_id": turn_id,
        "issues": [{"id": d.id, "severity": str(d.severity), "message": d.message} for d in issues],
        "repairs": repairs,
        "repair_count": sum(1 for o in outcomes if o.ok),
        "error_count": sum(1 for o in outcomes if o.status is RepairStatus.FAILED),
    }


async def apply_repairs(
    transport: Transport,
    diagnoses: Sequence[Diagnosis],
    *,
    conversation_id: str,
    turn_id: str,
) -> RepairResult:
    """Run the suggested repair of every problem in ``diagnoses``; record one summary.

    Repairs run in order, one store each, under deterministic idempotency keys: running the
    same repairs twice writes nothing new the second time (each store replays). A failing
    repair is reported (``status="failed"``) and does not stop the others. When anything was
    wrong, one ``neotoma_repair`` entity then records the issues and outcomes and
    ``REFERS_TO`` every entity the repairs touched; recording it is best effort (a failure
    is logged at WARNING and ``repair_entity_id`` is ``None``).

    ``conversation_id`` and ``turn_id`` are validated before any I/O.
    """
    keys = turn_keys(conversation_id, turn_id)
    issues = [d for d in diagnoses if not d.ok]
    outcomes = [await _run(transport, d) for d in issues]
    if not issues:
        return RepairResult(conversation_id, turn_id, ())

    entity = _summary_entity(keys.conversation_id, keys.turn_id, issues, outcomes)
    blob = json.dumps(entity, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]
    touched = dict.fromkeys(i for o in outcomes for i in o.entity_ids if is_entity_id(i))
    relationships = [
        {"relationship_type": "REFERS_TO", "source_index": 0, "target_entity_id": i}
        for i in touched
    ]
    repair_entity_id: str | None = None
    replayed = False
    try:
        stored = await transport.store(
            [entity],
            # One key per distinct summary: a later run that fixes more is recorded too.
            idempotency_key=f"neotoma-repair-{keys.conversation_id}-{keys.turn_id}-{digest}",
            relationships=relationships,
        )
        replayed = stored.replayed
        repair_entity_id = next(
            (e.entity_id for e in stored.entities if e.entity_type == "neotoma_repair"), None
        )
    except Exception as exc:
        _warn_failed(
            "repair.record_failed", exc, conversation_id=keys.conversation_id, turn_id=keys.turn_id
        )
    result = RepairResult(
        keys.conversation_id, keys.turn_id, tuple(outcomes), repair_entity_id, replayed
    )
    logger.info(
        "repair.done",
        conversation_id=keys.conversation_id,
        turn_id=keys.turn_id,
        issues=len(issues),
        applied=sum(1 for o in outcomes if o.status is RepairStatus.APPLIED),
        replayed=sum(1 for o in outcomes if o.status is RepairStatus.REPLAYED),
        failed=sum(1 for o in outcomes if o.status is RepairStatus.FAILED),
        skipped=sum(1 for o in outcomes if o.status is RepairStatus.SKIPPED),
        repair_entity_id=repair_entity_id,
    )
    return result
