"""``Severity``: how much a check or a finding matters, the one vocabulary of ``qa``.

A :class:`~neotoma_agent.qa.Diagnosis` (one check of one turn) and a
:class:`~neotoma_agent.qa.Finding` (what an audit found about a turn) both carry one, and a
report line shows one; ``info`` is "nothing to fix" in all three.
"""

from __future__ import annotations

import enum
import warnings

__all__ = ["Severity", "Word", "as_severity"]


class Word(str, enum.Enum):
    """A ``str`` enum that prints as its word: the base of ``qa``'s vocabularies."""

    def __str__(self) -> str:
        # The word itself, on every Python (3.12 changed what format() of a str enum gives).
        return str(self.value)


class Severity(Word):
    """How much a diagnosis or a finding matters.

    A ``str`` enum whose values are the words ``audit --json`` and ``to_json()`` write:
    ``Severity.ERROR == "error"``.
    """

    #: nothing to fix: a passed check, or a consistent turn worth knowing about (abandoned)
    INFO = "info"
    #: consistent, but likely to cause trouble (left open with both halves, a degraded read)
    WARN = "warn"
    #: the turn broke "both halves or neither", or lost part of what it stored
    ERROR = "error"


def as_severity(value: Severity | str) -> Severity:
    """``value`` as a :class:`Severity` (its word is taken too), else a ``ValueError``.

    ``"ok"``, the older word for a passed :class:`~neotoma_agent.qa.Diagnosis`, is still
    taken as ``INFO``, with a ``DeprecationWarning``.
    """
    if isinstance(value, Severity):
        return value
    if value == "ok":
        warnings.warn(
            'severity "ok" is deprecated: a passed check is Severity.INFO ("info")',
            DeprecationWarning,
            stacklevel=4,
        )
        return Severity.INFO
    try:
        return Severity(value)
    except ValueError:
        words = ", ".join(s.value for s in Severity)
        raise ValueError(f"severity must be one of {words}, got {value!r}") from None
