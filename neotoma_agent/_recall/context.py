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
- history newest first until the budget is spent, then shown oldest first; the oldest turn
  kept is cut to what is left of the budget (its messages end with the ``…[+N chars]``
  marker) rather than left out, when at least :data:`MIN_CUT_CHARS` of it fit;
- a turn is tagged ``turn N`` when it has a ``turn_number``, else ``#`` and six hex digits
  of a hash of its turn id (short, and the same in every block);
- every value and message longer than :data:`MAX_VALUE_CHARS` / :data:`MAX_MESSAGE_CHARS`
  is cut with a ``…[+N chars]`` marker; newlines in values are shown as ``\\n``;
- any other line that does not fit is left out whole, and what was left out is counted on
  a last line if that fits; the block never exceeds ``max_chars``, nor ``max_tokens``
  as the caller's ``count_tokens`` counts them, when given.

Only stored content goes in: the snapshot fields retrieval returned and the stored
messages. Never a token or setting.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any, Final

from .._records.checks import check_count
from ..transport._results import Entity
from .history import HistoryTurn

__all__ = ["MAX_FIELDS", "MAX_MESSAGE_CHARS", "MAX_VALUE_CHARS", "render_context"]

#: fields shown per entity
MAX_FIELDS: Final = 8
#: characters of one field value before it is cut
MAX_VALUE_CHARS: Final = 160
#: characters of one message before it is cut
MAX_MESSAGE_CHARS: Final = 600
#: the least of a message text worth keeping when the oldest kept turn is cut to fit
MIN_CUT_CHARS: Final = 40

_ENTITIES: Final = "Known entities (best match first):"
_HISTORY: Final = "Earlier in this conversation (oldest first):"


def _escaped(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _cut(text: str, limit: int) -> str:
    text = _escaped(text)
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


def turn_tag(turn: HistoryTurn) -> str:
    """``turn N``, or ``#`` + 6 hex digits of the turn id's hash: short, and stable."""
    if turn.turn_number is not None:
        return f"turn {turn.turn_number}"
    return "#" + hashlib.sha256(turn.turn_id.encode("utf-8")).hexdigest()[:6]


def turn_lines(turn: HistoryTurn, limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """A turn's two lines (one if nothing was replied), each message cut at ``limit``."""
    tag = f"[{turn_tag(turn)} · {turn.status}]"
    lines = [f"{tag} user: {_cut(turn.user, limit)}"]
    if turn.reply is not None:
        lines.append(f"{tag} assistant: {_cut(turn.reply, limit)}")
    return lines


class _Budget:
    # What a block may hold: characters, and tokens as the caller counts them. A plain
    # class: a coding-agent hook renders a block in a fresh process per prompt.
    __slots__ = ("chars", "count", "tokens")

    def __init__(
        self, chars: int, tokens: int | None = None, count: Callable[[str], int] | None = None
    ) -> None:
        self.chars = chars
        self.tokens = tokens
        self.count = count

    def fits(self, lines: Sequence[str]) -> bool:
        if sum(len(line) + 1 for line in lines) > self.chars:
            return False
        if self.tokens is None or self.count is None:
            return True
        return self.count("\n".join(lines)) <= self.tokens

    def less(self, line: str) -> _Budget:
        # Room kept for one more line (the note).
        tokens = None
        if self.tokens is not None and self.count is not None:
            tokens = self.tokens - self.count(line)
        return _Budget(self.chars - len(line) - 1, tokens, self.count)


def _note(limits: str, left_entities: int, left_turns: int) -> str:
    parts = []
    if left_entities:
        parts.append(f"{left_entities} entit{'y' if left_entities == 1 else 'ies'}")
    if left_turns:
        parts.append(f"{left_turns} turn{'' if left_turns == 1 else 's'}")
    return f"(context cut to {limits}: {' and '.join(parts)} left out)"


def _cut_turn(
    turn: HistoryTurn, head: list[str], tail: list[str], budget: _Budget
) -> list[str] | None:
    # The turn's lines cut to the widest message limit that still fits between ``head``
    # and ``tail`` (binary search: fitting only grows as the limit shrinks), or None if
    # not even MIN_CUT_CHARS of it would.
    longest = max(len(_escaped(turn.user)), len(_escaped(turn.reply or "")))
    low, high = MIN_CUT_CHARS, min(longest, MAX_MESSAGE_CHARS) - 1
    best: list[str] | None = None
    while low <= high:
        mid = (low + high) // 2
        lines = turn_lines(turn, mid)
        if budget.fits([*head, *lines, *tail]):
            best, low = lines, mid + 1
        else:
            high = mid - 1
    return best


def _select(
    entities: Sequence[Entity], history: Sequence[HistoryTurn], budget: _Budget
) -> tuple[list[str], int, int]:
    # Lines for what fits in ``budget`` (entities first, then the newest turns, the
    # oldest of them cut to fit), and how many entities and turns were left out.
    out: list[str] = []
    entity_block: list[str] = []
    for entity in entities:
        candidate = [*entity_block, entity_line(entity)]
        if not budget.fits([_ENTITIES, *candidate]):
            break
        entity_block = candidate
    if entity_block:
        out = [_ENTITIES, *entity_block]
    kept: list[list[str]] = []
    for turn in reversed(history):
        lines = turn_lines(turn)
        newer = [line for t in kept for line in t]
        if budget.fits([*out, _HISTORY, *lines, *newer]):
            kept.insert(0, lines)
            continue
        cut = _cut_turn(turn, [*out, _HISTORY], newer, budget)
        if cut is not None:
            kept.insert(0, cut)
        break
    if kept:
        out += [_HISTORY, *(line for t in kept for line in t)]
    return out, len(entities) - len(entity_block), len(history) - len(kept)


def render_context(
    entities: Sequence[Entity],
    history: Sequence[HistoryTurn],
    *,
    max_chars: int,
    max_tokens: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
) -> str:
    """The context block (see the module docstring for the format and the budget rules)."""
    check_count(max_chars, "max_chars")
    if max_tokens is not None:
        check_count(max_tokens, "max_tokens")
        if not callable(count_tokens):
            raise ValueError("max_tokens needs count_tokens, the function that counts them")
    elif count_tokens is not None:
        raise ValueError("count_tokens is used only with max_tokens")
    # The last line has no newline: one more character than the sum of line + newline.
    budget = _Budget(max_chars + 1, max_tokens, count_tokens)
    out, left_entities, left_turns = _select(entities, history, budget)
    if left_entities or left_turns:
        limits = f"{max_chars} chars" + ("" if max_tokens is None else f", {max_tokens} tokens")
        # Make room for the note that says what was left out (its longest form).
        room = budget.less(_note(limits, len(entities), len(history)))
        out, left_entities, left_turns = _select(entities, history, room)
        note = _note(limits, left_entities, left_turns)
        if budget.fits([*out, note]):
            out.append(note)
    return "\n".join(out)
