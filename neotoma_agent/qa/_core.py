"""The qa wing's only door to private core modules: one, kept for a reason.

Everything else the audit uses is public (:mod:`neotoma_agent.reads`,
:mod:`neotoma_agent.log`, :func:`neotoma_agent.exceptions.error_label` and the package's
names). What stays here is not a read, and is not a promise the library makes to its users
(CONTRIBUTING names the same one):

- ``_engine.repair``: the records a repair writes (a missing message, a turn closed, a
  message linked to its conversation, an attachment) are the turn protocol's own, under
  the protocol's own idempotency keys (validated by ``turn_keys``), built in the core
  beside the builders the turn engine uses: a repaired turn is stored exactly as the
  engine would have stored it, and replays.
"""

from __future__ import annotations

from .._engine.repair import StorePayload as StorePayload
from .._engine.repair import TurnKeys as TurnKeys
from .._engine.repair import repair_assistant_message as repair_assistant_message
from .._engine.repair import repair_attachment as repair_attachment
from .._engine.repair import repair_close as repair_close
from .._engine.repair import repair_link as repair_link
from .._engine.repair import repair_user_message as repair_user_message
from .._engine.repair import turn_keys as turn_keys
