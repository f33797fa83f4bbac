"""Answers decoded in two parts: what a turn reads now, and a tail only when it is read.

Two answers end in a part that a turn sends on but seldom reads, and that grows with the
number of tool calls:

- a ``store`` answer's ``relationships_created``, ``store_warnings`` (a real server, and
  so the dev server, warns twice about every tool call: its arguments and result are
  undeclared fields), ``unknown_fields`` and ``hint``: more than half of a closing store's
  answer, where the turn reads ``entities`` alone;
- a history page's ``tool_calls``, read only when a turn's ``tools`` are.

:func:`decode_object` decodes the object up to such a key (the *head*) and keeps the rest
as text: :class:`PartlyDecoded` is the ``dict`` ``json.loads`` would give, with the
tail's keys decoded the first time anything asks for a key the head lacks, or for the
whole (iteration, ``len``, ``==``, ``json.dumps``, a copy). Read key by key in the head, it
costs nothing more; read whole, the same as ``json.loads``.

The split is checked, not guessed: the head with a ``}`` added must decode as one object,
which holds only when the key found sits in the top-level object, outside any string (a
nested key of the same name, or the name inside a string, fails that and the next one is
tried). An answer without the key, or of another shape, is decoded whole as before.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, Final, TypeVar

from ..exceptions import ServerError
from ._limits import too_deep

T = TypeVar("T")

__all__ = ["STORE_TAIL", "TOOL_CALLS_TAIL", "PartlyDecoded", "decode_object"]

#: where a store answer's unread part begins (the server's own key order)
STORE_TAIL: Final = "relationships_created"
#: where a history page's tool calls begin (the dev server's and embedded store's last key)
TOOL_CALLS_TAIL: Final = "tool_calls"

# An answer smaller than this is decoded whole: the split would save little.
_MIN_SPLIT: Final = 4096
# Occurrences of the key tried before giving up and decoding whole.
_TRIES: Final = 3

_loads: Final = json.loads


def _whole(method: Callable[..., T]) -> Callable[..., T]:
    """``dict``'s ``method`` run once the tail is decoded: for what reads or writes the whole."""

    @functools.wraps(method)
    def loaded(self: PartlyDecoded, *args: Any, **kwargs: Any) -> T:
        self._load()
        return method(self, *args, **kwargs)

    return loaded


class PartlyDecoded(dict[str, Any]):
    """The ``dict`` an answer decodes to, its tail decoded when first needed.

    Keys of the head read as in any ``dict`` (``raw["entities"]``, ``raw.get(...)``); a key
    the head lacks, or any view of the whole, first decodes the tail (once). Equal to,
    and serialised as, the ``dict`` ``json.loads`` gives for the whole text. A tail that
    turns out not to be JSON raises :class:`~neotoma_agent.ServerError` when decoded.
    """

    __slots__ = ("_status", "_tail")

    def __init__(self, head: dict[str, Any], tail: str, status: int = 200) -> None:
        super().__init__(head)
        self._tail: str | None = tail
        self._status = status  # the answer's, for the error a bad tail raises

    @property
    def tail_pending(self) -> bool:
        """Whether the tail is still undecoded text."""
        return self._tail is not None

    def pending(self, key: str) -> str | None:
        """The undecoded text of ``key``'s value and what follows it, when the tail (still
        undecoded) begins at ``key``; else ``None``. Lets a reader tell what the tail holds
        without decoding it."""
        tail = self._tail
        prefix = f'{{"{key}":'
        return tail[len(prefix) :] if tail is not None and tail.startswith(prefix) else None

    def _load(self) -> None:
        tail = self._tail
        if tail is None:
            return
        self._tail = None
        try:
            rest = _loads(tail)
        except RecursionError:
            raise too_deep("the end of the server's answer", self._status) from None
        except ValueError as exc:
            raise ServerError(
                f"the end of the server's answer is not JSON: {exc}", status=self._status
            ) from None
        for key, value in rest.items():
            dict.__setitem__(self, key, value)

    # --- reads: the head's keys at dict speed, the rest after loading -----------------

    def __missing__(self, key: str) -> Any:
        if self._tail is None:
            raise KeyError(key)
        self._load()
        return dict.__getitem__(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        if self._tail is not None and not dict.__contains__(self, key):
            self._load()
        return dict.get(self, key, default)

    def __contains__(self, key: object) -> bool:
        if dict.__contains__(self, key):
            return True
        if self._tail is None:
            return False
        self._load()
        return dict.__contains__(self, key)

    __iter__ = _whole(dict.__iter__)
    __reversed__ = _whole(dict.__reversed__)
    __len__ = _whole(dict.__len__)
    keys = _whole(dict.keys)
    values = _whole(dict.values)
    items = _whole(dict.items)
    __repr__ = _whole(dict.__repr__)

    def __eq__(self, other: object) -> bool:
        self._load()
        if isinstance(other, PartlyDecoded):
            other._load()
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None

    def copy(self) -> dict[str, Any]:
        """A plain ``dict`` of every key."""
        self._load()
        return dict(dict.items(self))

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles and deep-copies as the plain dict it stands for.
        return (dict, (self.copy(),))

    def __or__(self, other: Any) -> Any:
        return self.copy() | other

    def __ror__(self, other: Any) -> Any:
        return other | self.copy()

    # --- writes: the tail first, so that it cannot overwrite them later ----------------

    __setitem__ = _whole(dict.__setitem__)
    __delitem__ = _whole(dict.__delitem__)
    pop = _whole(dict.pop)
    popitem = _whole(dict.popitem)
    setdefault = _whole(dict.setdefault)
    update = _whole(dict.update)

    def __ior__(self, other: Any) -> PartlyDecoded:  # type: ignore[override]
        self._load()
        dict.update(self, other)
        return self

    def clear(self) -> None:
        self._tail = None
        dict.clear(self)


def decode_object(text: str, tail_key: str, status: int = 200) -> Any:
    """``json.loads(text)``, as a :class:`PartlyDecoded` whose tail begins at top-level key
    ``tail_key`` when the text is a large enough compact object that has it; raises what
    ``json.loads`` raises when the head (or, without a split, the whole) is not JSON."""
    if len(text) >= _MIN_SPLIT and text[:1] == "{" and text.rstrip()[-1:] == "}":
        needle = f',"{tail_key}":'
        at = text.find(needle)
        for _ in range(_TRIES):
            if at < 0:
                break
            try:
                head = _loads(text[:at] + "}")
            except ValueError:
                # Not the top level (inside a string, or a nested object's key).
                at = text.find(needle, at + 1)
                continue
            if type(head) is dict:
                return PartlyDecoded(head, "{" + text[at + 1 :], status)
            break
    return _loads(text)
