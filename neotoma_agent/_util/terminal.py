"""Stored text made safe to print on a terminal: the one helper every human-readable output uses.

Messages, names, ids and statuses come from the store, and so from whoever wrote it (an
imported transcript, a model's reply, another client of a shared server). Printed raw,
``\\x1b]0;...\\x07`` retitles the user's terminal, ``\\x1b[2J`` clears it, ``\\r`` overwrites
the line it is on, and a bidi override makes text read differently from what it is.
:func:`printable` shows each such character as a visible escape instead (``\\x1b``,
``\\u202e``), keeping newlines and tabs. ``--json`` outputs print the exact text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TextIO

__all__ = ["printable", "printer"]


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_UNSAFE: Final = (
    # C0 controls (ESC, BEL, CR, backspace, ...) but newline and tab, which only lay out text
    [c for c in range(0x20) if c not in (0x0A, 0x09)]
    + [0x7F]  # DEL
    + list(range(0x80, 0xA0))  # C1 controls: 0x9b is CSI and 0x9d OSC on some terminals
    + list(range(0x202A, 0x202F))  # bidi embeddings and overrides (LRE ... RLO)
    + list(range(0x2066, 0x206A))  # bidi isolates (LRI, RLI, FSI, PDI)
)
_TABLE: Final = {code: _escape(code) for code in _UNSAFE}


def printable(text: str) -> str:
    """``text`` with every control character but newline and tab shown as an escape.

    Also escapes DEL, the C1 controls (U+0080 to U+009F) and the bidi embedding, override
    and isolate characters (U+202A to U+202E, U+2066 to U+2069). Everything else, emoji
    and other scripts included, is left as it is.
    """
    if text.isascii() and text.isprintable():
        return text  # the common case: nothing to escape, no copy
    return text.translate(_TABLE)


def printer(out: TextIO) -> Callable[[str], None]:
    """A ``write`` for ``out`` that passes every text through :func:`printable`.

    For renderers that mix stored text into every line: escaping what is written, rather
    than each field, also covers the fields added later.
    """

    def write(text: str) -> None:
        out.write(printable(text))

    return write
