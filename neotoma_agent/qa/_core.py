"""The qa wing's only door to private core modules: two, each kept for a reason.

Everything else the audit uses is public (:mod:`neotoma_agent.reads`,
:mod:`neotoma_agent.log`, :func:`neotoma_agent.exceptions.error_label` and the package's
names). What stays here is not a read, and is not a promise the library makes to its users
(CONTRIBUTING names the same two):

- ``TurnKeys`` / ``turn_keys`` (``_keys``) and the record builders (``_payloads``): a repair
  writes the turn protocol's own records under the protocol's own idempotency keys, so a
  repaired turn is stored exactly as the turn engine would have stored it, and replays.
"""

from __future__ import annotations

from .._keys import TurnKeys as TurnKeys
from .._keys import turn_keys as turn_keys
from .._payloads import ConversationSettings as ConversationSettings
from .._payloads import StorePayload as StorePayload
from .._payloads import closing_payload as closing_payload
from .._payloads import conversation_entity as conversation_entity
from .._payloads import message_entity as message_entity
from .._payloads import turn_record as turn_record

__all__ = [
    "ConversationSettings",
    "StorePayload",
    "TurnKeys",
    "closing_payload",
    "conversation_entity",
    "message_entity",
    "turn_keys",
    "turn_record",
]
