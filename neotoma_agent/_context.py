"""Prompt context: one deterministic, budgeted text block of what a turn knows.

``t.context(max_chars=...)`` renders the retrieved entities and the conversation's earlier
turns for the caller to put into any LLM prompt. The format (stable; tests pin it)::

    Known entities (best match first):
    - company "Acme Corp" [ent_4d1c…]: website=acme.com; status=customer
    Earlier in this conversation (oldest first):
    [turn 3 · completed] user: What do we know about Acme Corp?
    [turn 3 · completed] assistant: Acme Corp is a customer.
    (context cut to 400 chars: 2 entities and 5 turns left out)

Rules, applied in this order so the same inputs always give the same text:

- entities in rank order (the order retrieval found them), each with its type, display
  name, id and up to :data:`MAX_FIELDS` fields in snapshot order, leaving out empty values
  and the fields already shown as the name; non-text values as compact JSON;
- history newest first until the budget is spent, then shown oldest first;
- every value and message longer than :data:`MAX_VALUE_CHARS` / :data:`MAX_MESSAGE_CHARS`
  is cut with a ``…[+N chars]`` marker; newlines in values are shown as ``\\n``;
- a line that does not fit is left out whole (never cut mid-line), and what was left out is
  counted on a last line if that fits; the block never exceeds ``max_chars``.

Only stored content goes in: the snapshot fields retrieval returned and the stored
messages. Never a token or setting.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Final

from ._checks import check_count
from ._history import HistoryTurn
from .transport._base import Entity

__all__ = ["MAX_FIELDS", "MAX_MESSAGE_CHARS", "MAX_VALUE_CHARS", "render_context"]

#: fields shown per entity
MAX_FIELDS: Final = 8
#: characters of one field value before it is cut
MAX_VALUE_CHARS: Final = 160
#: characters of one message before it is cut
MAX_MESSAGE_CHARS: Final = 600

_ENTITIES: Final = "Known entities (best match first):"
_HISTORY: Final = "Earlier in this conversation (oldest first):"


def _cut(text: str, limit: int) -> str:
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[+{len(text) - limit} chars]"


def _value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def entity_line(entity: Entity) -> str:
    """One entity: ``- type "name" [id]: k=v; k=v``."""
    shown: list[str] = []
    name_field = entity.name_field
    for key, value in entity.snapshot.items():
        if key == name_field or value is None or value == "" or value == [] or value == {}:
            continue
        shown.append(f"{key}={_cut(_value(value), MAX_VALUE_CHARS)}")
        if len(shown) == MAX_FIELDS:
            break
    head = f'- {entity.entity_type} "{_cut(entity.name, MAX_VALUE_CHARS)}" [{entity.id}]'
    return f"{head}: {'; '.join(shown)}" if shown else head


def turn_lines(turn: HistoryTurn) -> list[str]:
    """A turn's two lines (one if nothing was replied)."""
    number = f"turn {turn.turn_number}" if turn.turn_number is not None else turn.turn_id
    tag = f"[{number} · {turn.status}]"
    lines = [f"{tag} user: {_cut(turn.user, MAX_MESSAGE_CHARS)}"]
    if turn.reply is not None:
        lines.append(f"{tag} assistant: {_cut(turn.reply, MAX_MESSAGE_CHARS)}")
    return lines


def _fits(lines: Iterable[str], budget: int) -> bool:
    return sum(len(line) + 1 for line in lines) <= budget


def _note(max_chars: int, left_entities: int, left_turns: int) -> str:
    parts = []
    if left_entities:
        parts.append(f"{left_entities} entit{'y' if left_entities == 1 else 'ies'}")
    if left_turns:
        parts.append(f"{left_turns} turn{'' if left_turns == 1 else 's'}")
    return f"(context cut to {max_chars} chars: {' and '.join(parts)} left out)"


def _select(
    entities: Sequence[Entity], history: Sequence[HistoryTurn], budget: int
) -> tuple[list[str], int, int]:
    # Lines for what fits in ``budget`` (entities first, then the newest turns), and how
    # many entities and turns were left out.
    out: list[str] = []
    entity_block: list[str] = []
    for entity in entities:
        candidate = [*entity_block, entity_line(entity)]
        if not _fits([_ENTITIES, *candidate], budget):
            break
        entity_block = candidate
    if entity_block:
        out = [_ENTITIES, *entity_block]
    kept: list[list[str]] = []
    for turn in reversed(history):
        lines = turn_lines(turn)
        trial = [*out, _HISTORY, *(line for t in [lines, *kept] for line in t)]
        if not _fits(trial, budget):
            break
        kept.insert(0, lines)
    if kept:
        out += [_HISTORY, *(line for t in kept for line in t)]
    return out, len(entities) - len(entity_block), len(history) - len(kept)


def render_context(
    entities: Sequence[Entity], history: Sequence[HistoryTurn], *, max_chars: int
) -> str:
    """The context block (see the module docstring for the format and the budget rules)."""
    check_count(max_chars, "max_chars")
    budget = max_chars + 1  # the last line has no newline
    out, left_entities, left_turns = _select(entities, history, budget)
    if left_entities or left_turns:
        # Make room for the note that says what was left out (its longest form).
        room = len(_note(max_chars, len(entities), len(history))) + 1
        out, left_entities, left_turns = _select(entities, history, budget - room)
        note = _note(max_chars, left_entities, left_turns)
        if _fits([*out, note], budget):
            out.append(note)
    return "\n".join(out)
