"""How a turn ended, read back from its ``conversation_turn`` record.

A Neotoma server keeps only declared fields in snapshots. ``status`` and
``safety_net_used`` (set by a repair that closed the turn) are declared, so the snapshot
says them. No declared field means "the exception class of an abandoned turn" or "why a
repair closed it", so those stay on the observation that closed the turn and are read from
there: one ``list_observations`` per abandoned turn, and only when a detail is wanted.
Stores written by earlier versions also kept them in snapshots; those are read first, so
an old store reads as before, without the extra read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from .._records.payloads import ERROR_CLASS_FIELD, REASON_FIELD, REPAIRED_FIELD
from ..transport._base import EntitySnapshot, Transport

__all__ = ["AUDIT_REPAIR_REASON", "TurnEnding", "ending_of", "read_ending", "short_class"]

#: The ``reason`` an audit writes on the turn records of the orphans it closes.
AUDIT_REPAIR_REASON: Final = "orphan_found_by_audit"


def short_class(error_class: str | None) -> str | None:
    """The name an error class is shown by: ``DemoModelError`` for
    ``neotoma_agent.cli._demo_script.DemoModelError`` (``show`` and the web view alike; the JSON
    twins keep the qualified name a turn records)."""
    return error_class.rsplit(".", 1)[-1] if error_class else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


@attrs.frozen
class TurnEnding:
    """What a turn record says about its turn."""

    #: ``open``, ``completed``, ``abandoned``, or ``unknown`` (no status stored)
    status: str
    #: the exception class an abandoned turn ended with (``module.Class``), if any
    error_class: str | None = None
    #: why a repair closed the turn, if one did
    reason: str | None = None
    #: the turn was closed as abandoned by a repair (``audit --repair``, ``apply_repairs``)
    repaired: bool = False

    @property
    def why(self) -> str | None:
        """Why an abandoned turn was abandoned: the repair's reason, else the error class."""
        return self.reason or self.error_class


def ending_of(snapshot: Mapping[str, Any]) -> TurnEnding:
    """What the snapshot alone says (the details of a current store need :func:`read_ending`)."""
    status = _text(snapshot.get("status")) or "unknown"
    reason = _text(snapshot.get(REASON_FIELD))  # only in snapshots earlier versions wrote
    abandoned = status == "abandoned"
    return TurnEnding(
        status,
        _text(snapshot.get(ERROR_CLASS_FIELD)),
        reason,
        abandoned and (snapshot.get(REPAIRED_FIELD) is True or reason == AUDIT_REPAIR_REASON),
    )


async def read_ending(transport: Transport, record: EntitySnapshot) -> TurnEnding:
    """How the turn ended, with the details of an abandoned one read from its observations."""
    ending = ending_of(record.snapshot)
    if ending.status != "abandoned" or ending.why is not None:
        return ending
    observations = await transport.list_observations(record.entity_id)
    for observation in observations.observations:  # newest first: the latest close wins
        fields = observation.fields
        if fields.get("status") != "abandoned":
            continue
        error_class, reason = _text(fields.get(ERROR_CLASS_FIELD)), _text(fields.get(REASON_FIELD))
        if error_class or reason:
            return attrs.evolve(ending, error_class=error_class, reason=reason)
    return ending
