"""The qa wing's only door to private core modules: four names, each kept for a reason.

Everything else the audit reads goes through the public API (:mod:`neotoma_agent.reads`
and the package's names). What stays here is not a read, and is not a promise the library
makes to its users (CONTRIBUTING names the same four):

- ``get_logger`` (``_log``): the audit logs as the rest of the library does, one event
  format under the ``neotoma_agent`` logger, silent below WARNING;
- ``error_label`` (``_error_label``): a failed repair is logged by its error's class and
  status, never its message (which may quote stored content);
- ``TurnKeys`` / ``turn_keys`` (``_keys``) and the record builders (``_payloads``): a repair
  writes the turn protocol's own records under the protocol's own idempotency keys, so a
  repaired turn is stored exactly as the turn engine would have stored it, and replays.
"""

from __future__ import annotations

from .._error_label import error_label as error_label
from .._keys import TurnKeys as TurnKeys
from .._keys import turn_keys as turn_keys
from .._log import get_logger as get_logger
from .._payloads import NO_SETTINGS as NO_SETTINGS
from .._payloads import StorePayload as StorePayload
from .._payloads import closing_payload as closing_payload
from .._payloads import conversation_entity as conversation_entity
from .._payloads import message_entity as message_entity
from .._payloads import turn_record as turn_record

__all__ = [
    "NO_SETTINGS",
    "StorePayload",
    "TurnKeys",
    "closing_payload",
    "conversation_entity",
    "error_label",
    "get_logger",
    "message_entity",
    "turn_keys",
    "turn_record",
]
