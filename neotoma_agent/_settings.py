"""``MemorySettings``: one conversation's settings, declared once, checked when made.

:class:`~neotoma_agent.NeotomaMemory` is this record plus its turns (it subclasses it, so
the constructor, ``help()`` and the checks come from these fields alone), and the store
phases (``_phases.Phases``) read it. What each setting means is documented on
``NeotomaMemory``.
"""

from __future__ import annotations

import attrs

from ._recall.history import DEFAULT_HISTORY_TURNS
from ._recall.retrieval import (
    DEFAULT_LINK_THRESHOLD,
    DEFAULT_LOOKUP_LIMIT,
    DEFAULT_MAX_IDENTIFIERS,
    DEFAULT_RETRIEVAL_LIMIT,
    Extractor,
    Retriever,
)
from ._records.checks import (
    check_count,
    check_fraction,
    check_positive_int,
    check_seconds,
    checked_by,
    validator,
)
from ._records.keys import validate_conversation_id
from ._records.tool_payload import DEFAULT_TOOL_PAYLOAD_CHARS, ToolPayloadMode, ToolRedactor
from .transport._base import Transport

__all__ = ["DEFAULT_HISTORY_TURNS", "MemorySettings"]


@attrs.frozen
class MemorySettings:
    """The settings of one conversation's memory (the fields of ``NeotomaMemory``)."""

    transport: Transport
    conversation_id: str = attrs.field(kw_only=True, validator=checked_by(validate_conversation_id))
    platform: str | None = attrs.field(default=None, kw_only=True)
    conversation_title: str | None = attrs.field(default=None, kw_only=True)
    retrieval_limit: int = attrs.field(
        default=DEFAULT_RETRIEVAL_LIMIT, kw_only=True, validator=validator(check_positive_int)
    )
    max_identifiers: int = attrs.field(
        default=DEFAULT_MAX_IDENTIFIERS, kw_only=True, validator=validator(check_positive_int)
    )
    # As many as identifiers by default: over a network, all lookups then share one round
    # trip with the user store (the 2-round-trip turn); lower it to spare a busy server.
    max_concurrency: int = attrs.field(
        default=16, kw_only=True, validator=validator(check_positive_int)
    )
    retrieval_timeout: float | None = attrs.field(
        default=3.0, kw_only=True, validator=validator(check_seconds, optional=True)
    )
    lookup_limit: int = attrs.field(
        default=DEFAULT_LOOKUP_LIMIT, kw_only=True, validator=validator(check_positive_int)
    )
    # Finite: the closing store runs shielded; without a deadline it could hang shutdown.
    close_timeout: float = attrs.field(
        default=10.0, kw_only=True, validator=validator(check_seconds, finite=True)
    )
    extractor: Extractor | None = attrs.field(default=None, kw_only=True)
    refers_to_on_enter: bool = attrs.field(default=False, kw_only=True)
    include_bookkeeping: bool = attrs.field(default=False, kw_only=True)
    history_turns: int = attrs.field(
        default=DEFAULT_HISTORY_TURNS, kw_only=True, validator=validator(check_count)
    )
    link_threshold: float = attrs.field(
        default=DEFAULT_LINK_THRESHOLD, kw_only=True, validator=validator(check_fraction)
    )
    retriever: Retriever | None = attrs.field(default=None, kw_only=True)
    # Checked by ToolPayloads, which the phases build from these three when the memory is made.
    tool_payloads: ToolPayloadMode = attrs.field(default="full", kw_only=True)
    tool_payload_chars: int = attrs.field(default=DEFAULT_TOOL_PAYLOAD_CHARS, kw_only=True)
    redact_tool: ToolRedactor | None = attrs.field(default=None, kw_only=True, repr=False)
