"""Where the hooks wing found :func:`neotoma_agent.exceptions.error_label` before it was
public: the one definition is there; import it from :mod:`neotoma_agent.exceptions`."""

from __future__ import annotations

from .exceptions import error_label

__all__ = ["error_label"]
