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

__all__ = ["EncodedEntity", "encode_spliced"]


class EncodedEntity(dict[str, Any]):
    """A request element and its compact JSON text (``None`` once the element changed).

    The text is what ``json.dumps(element, ensure_ascii=False, separators=(",", ":"))``
    writes for the element as built; its builder (``_tool_payload.tool_entity``) is the
    one place that makes one, and a property test holds it to that. The HTTP request
    splices it in; the embedded store's hash of the element reuses it too, where its
    JavaScript form is the same (``_js.js_json``).
    """

    __slots__ = ("json",)

    json: str | None

    def __init__(self, fields: Mapping[str, Any], text: str | None) -> None:
        dict.__init__(self, fields)
        self.json = text

    def _drop(self) -> None:
        self.json = None

    def copy(self) -> EncodedEntity:
        """A copy with the same text (``dict.copy`` would drop the type)."""
        return EncodedEntity(self, self.json)

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


_ENTITIES: Final = "entities"


def encode_spliced(body: Mapping[str, Any], encode: Callable[[Any], str]) -> str | None:
    """``encode(body)``'s text, with each :class:`EncodedEntity` of ``body["entities"]``
    written as its kept text; ``None`` when the body has none to splice (or is not the
    plain shape this writes: a ``dict`` with ``str`` keys and an ``entities`` list).

    ``encode`` is a compact encoder (``_js.compact_encoder``: ``ensure_ascii=False``,
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
