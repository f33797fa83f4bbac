"""A store's source id and its elements' JSON (``_write``'s plan): each element's text is
serialised once, for the source id's hash and (sliced) for its observation's fields."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..._neotoma.identity import hash_uuid, js_json
from . import _scope
from ._errors import invalid_format
from ._rows import dumps

__all__ = ["element_jsons_of", "fields_json_of", "source_id_from", "source_id_of"]

#: A name whose JSON is itself in quotes (nothing to escape).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_:.-]*").fullmatch


def source_id_of(entities: Sequence[Mapping[str, Any]]) -> str:
    """The source id a store of ``entities`` gets (and its key keeps): a hash of content."""
    return source_id_from(element_jsons_of(entities))


def source_id_from(parts: Sequence[str]) -> str:
    # The JSON of the whole list is its elements' JSON joined: each element's text is
    # serialised once, for this hash and (sliced) for its observation's fields.
    text = "[" + ",".join(parts) + "]"
    content_hash = hashlib.sha256(text.encode()).hexdigest()
    return hash_uuid(f"source:{_scope.user_id()}:{content_hash}")


def element_jsons_of(entities: Sequence[Mapping[str, Any]]) -> list[str]:
    try:
        return [js_json(element) for element in entities]
    except ValueError as exc:
        raise invalid_format(
            f"entities hold a value JSON cannot carry: {exc}", ["entities"]
        ) from None


def fields_json_of(element: Mapping[str, Any], element_json: str, fields: dict[str, Any]) -> str:
    """The JSON of an element's observed ``fields``, cut from the element's own JSON when
    ``entity_type`` leads it and nothing else is left out (what every turn sends)."""
    if len(fields) == len(element) - 1:
        etype = element["entity_type"]
        quoted = f'"{etype}"' if _PLAIN_NAME(etype) else dumps(etype)
        prefix = '{"entity_type":' + quoted
        if element_json.startswith(prefix):
            rest = element_json[len(prefix) :]
            if rest == "}":
                return "{}"
            if rest[:1] == ",":
                return "{" + rest[1:]
    return js_json(fields)
