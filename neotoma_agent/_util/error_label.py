"""How a log event, an outbox entry or a hook's problem line names an error: the core's
import of :func:`neotoma_agent.exceptions.error_label` (its one home, public).
"""

from __future__ import annotations

from ..exceptions import error_label as error_label

__all__ = ["error_label"]
