"""Request elements that carry their own JSON text, spliced into a request body unchanged.

A closing store with many tool calls sends one ``tool_invocation`` element per call, and
building each element already serialises its arguments and result (to measure them against
the cap). :class:`EncodedEntity` keeps that text: a ``dict`` like any request element (the
embedded store, the outbox and every reader see the same keys and values), plus
:attr:`~EncodedEntity.json`, its compact JSON. :func:`encode_spliced` writes a body whose
``entities`` hold such elements with their texts in place, so the request encodes each call
once, not twice.

The text is a cache of the element's content: any change to the element through its own
methods drops it, and the body is then encoded as usual. Its values cannot change behind
its back: a recorded call holds copies of the arguments and result the caller gave
(``check_plain`` copies them), not the caller's own objects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

__all__ = ["EncodedEntity", "encode_spliced", "encoded"]


class EncodedEntity(dict[str, Any]):
    """A request element and its compact JSON text (``None`` once the element changed).

    The text is what ``json.dumps(element, ensure_ascii=False, separators=(",", ":"))``
    writes for the element as built; its builder (``_records.tool_payload.tool_entity``) is the
    one place that makes one (with :func:`encoded`), and a property test holds it to that.
    It is written when first read, from what building the element kept (its values'
    texts), by whoever reads it: the HTTP request (spliced into the body), or the embedded
    store's hash of the element on its own thread (``_neotoma.js.js_json``); never by the turn
    that records the call.
    """

    # Set by encoded(); an instance made otherwise (EncodedEntity(fields)) has no text.
    __slots__ = ("_make", "_text")

    _text: str | None
    _make: tuple[Callable[[Mapping[str, Any], Any], str], Any] | None

    @property
    def json(self) -> str | None:
        """The element's compact JSON, or ``None`` if it changed since it was built."""
        try:
            text, make = self._text, self._make
        except AttributeError:
            return None
        if text is None and make is not None:
            write, kept = make
            text = self._text = write(self, kept)
            self._make = None
        return text

    def _drop(self) -> None:
        self._text = None
        self._make = None

    def copy(self) -> EncodedEntity:
        """A copy with the same text, still unwritten if it is (``dict.copy`` would drop
        the type): ``store_body`` copies each element on the turn's side."""
        element = EncodedEntity(self)
        try:
            element._text, element._make = self._text, self._make
        except AttributeError:  # not built by encoded(): no text
            element._text = element._make = None
        return element

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles and deep-copies as the plain dict it stands for.
        return (dict, (dict(self),))

    # Every mutator drops the text first: it no longer describes the element.

    def __setitem__(self, key: str, value: Any) -> None:
        self._drop()
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self._drop()
        super().__delitem__(key)

    def __ior__(self, other: Any) -> EncodedEntity:  # type: ignore[override,misc]
        self._drop()
        super().__ior__(other)
        return self

    def clear(self) -> None:
        self._drop()
        super().clear()

    def pop(self, *args: Any) -> Any:
        self._drop()
        return super().pop(*args)

    def popitem(self) -> tuple[str, Any]:
        self._drop()
        return super().popitem()

    def setdefault(self, key: str, default: Any = None) -> Any:
        self._drop()
        return super().setdefault(key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._drop()
        super().update(*args, **kwargs)


def encoded(
    fields: Mapping[str, Any],
    *,
    text: str | None = None,
    write: Callable[[Mapping[str, Any], Any], str] | None = None,
    kept: Any = None,
) -> EncodedEntity:
    """An :class:`EncodedEntity` of ``fields`` (copied) whose JSON is ``text``, or
    ``write(element, kept)`` when first read (``kept``: what building it already made)."""
    element = EncodedEntity(fields)  # dict's own copy, no Python __init__: built per call
    element._text = text
    element._make = None if write is None else (write, kept)
    return element


_ENTITIES: Final = "entities"


def encode_spliced(body: Mapping[str, Any], encode: Callable[[Any], str]) -> str | None:
    """``encode(body)``'s text, with each :class:`EncodedEntity` of ``body["entities"]``
    written as its kept text; ``None`` when the body has none to splice (or is not the
    plain shape this writes: a ``dict`` with ``str`` keys and an ``entities`` list).

    ``encode`` is a compact encoder (``_neotoma.js.compact_encoder``: ``ensure_ascii=False``,
    ``","`` and ``":"``): it writes an object as ``{`` + ``"key":value`` items joined by
    ``,`` + ``}`` and a list as ``[`` + items joined by ``,`` + ``]``, which is how the
    pieces are put together here; the kept texts were written by the same encoder.
    """
    entities = body.get(_ENTITIES) if type(body) is dict else None
    if type(entities) is not list or not any(
        type(e) is EncodedEntity and e.json is not None for e in entities
    ):
        return None
    items: list[str] = []
    for key, value in body.items():  # in the body's order, so errors come in json's order
        if type(key) is not str:
            return None  # the encoder's own key conversions: not redone here
        if key == _ENTITIES:
            texts = [
                text
                if type(element) is EncodedEntity and (text := element.json) is not None
                else encode(element)
                for element in entities
            ]
            value_text = "[" + ",".join(texts) + "]"
        else:
            value_text = encode(value)
        items.append(f"{encode(key)}:{value_text}")
    return "{" + ",".join(items) + "}"
