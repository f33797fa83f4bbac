"""Neotoma's REST API as this library speaks it: what a client and a server agree on.

:class:`~neotoma_agent.HttpTransport` sends these shapes to a Neotoma server, and the dev
server (:mod:`neotoma_agent.server`) answers with them over any
:class:`~neotoma_agent.Transport`: each is defined here once, so the two ends cannot drift.
A program that serves Neotoma's API itself (a proxy, a test double, another server) builds
its answers with the same names::

    from neotoma_agent.exceptions import NotFoundError
    from neotoma_agent.transport.rest import envelope_of, flat_envelope

    flat_envelope("VALIDATION_ERROR", "limit must be at most 100")
    # {"error_code": "VALIDATION_ERROR", "message": "...", "timestamp": "..."}
    envelope_of(NotFoundError("no such entity", status=404))
    # the flat envelope of a 404: {"error_code": "RESOURCE_NOT_FOUND", ...}

Four groups of names:

- **vocabularies**: :data:`OBSERVATION_SOURCES` and :data:`DIRECTIONS`, the closed sets a
  server validates; :data:`SEARCH_ACTION`, the route of the full-text search;
- **what a store accepts**: :data:`MAX_DEPTH`, how deep a value may nest,
  :func:`is_storable`, whether a text can be stored (no lone surrogate), and
  :func:`check_text`, the check a turn runs on its texts before any I/O;
- **error answers**: :func:`flat_envelope`, :func:`envelope_of` and
  :func:`html_error_page` build the bodies a Neotoma server answers errors with, and
  :func:`json_type` names a value's type in a validation issue as the server's validators
  do (``"string"``, ``"array"``, ...);
- **requests**: :func:`present` builds a request body of the fields given (``None`` means
  absent); :func:`store_body` is the body of ``POST /store`` that
  :meth:`Transport.store <neotoma_agent.Transport.store>` sends, and
  :func:`store_arguments` the keyword arguments that send a kept body again through any
  transport; :func:`rest_request` runs a REST action with its body as is on a transport
  that speaks them (the embedded store, the HTTP transport).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Final

from .._neotoma.json_type import json_type as json_type
from .._records.text import MAX_DEPTH as _MAX_DEPTH
from .._records.text import check_text as check_text
from .._records.text import is_storable as is_storable
from ._base import Transport
from ._bodies import present as present
from ._bodies import store_body as store_body
from ._rest import RestActions
from ._rest import store_arguments as store_arguments
from ._search_results import SEARCH_ACTION as _SEARCH_ACTION
from ._wire import DIRECTIONS as _DIRECTIONS
from ._wire import OBSERVATION_SOURCES as _OBSERVATION_SOURCES
from ._wire import envelope_of as envelope_of
from ._wire import flat_envelope as flat_envelope
from ._wire import html_error_page as html_error_page

__all__ = [
    "DIRECTIONS",
    "MAX_DEPTH",
    "OBSERVATION_SOURCES",
    "SEARCH_ACTION",
    "check_text",
    "envelope_of",
    "flat_envelope",
    "html_error_page",
    "is_storable",
    "json_type",
    "present",
    "rest_request",
    "store_arguments",
    "store_body",
]

#: The observation sources a store accepts (``observation_source`` of ``POST /store``), in
#: the order the server's schema lists them.
OBSERVATION_SOURCES: Final[tuple[str, ...]] = _OBSERVATION_SOURCES

#: The edges a related-entities read follows (``direction``): ``inbound``, ``outbound``,
#: ``both``.
DIRECTIONS: Final[tuple[str, ...]] = _DIRECTIONS

#: The REST action (``POST /text_search``) of a store's full-text search.
SEARCH_ACTION: Final[str] = _SEARCH_ACTION

#: How deep a stored value may nest: a server refuses a deeper body.
MAX_DEPTH: Final[int] = _MAX_DEPTH


async def rest_request(
    transport: Transport, action: str, body: Mapping[str, Any]
) -> Mapping[str, Any] | None:
    """Run the REST ``action`` (``"store"``, ``"entities/query"``, :data:`SEARCH_ACTION`)
    with ``body`` exactly as given, on a transport that speaks Neotoma's REST actions
    (:class:`~neotoma_agent.EmbeddedStore`, :class:`~neotoma_agent.HttpTransport`); the
    decoded answer.

    ``None`` for any other transport (a wrapper, a test double): call its typed method
    instead. A refusal raises as the typed method would (:class:`~neotoma_agent.APIError`).
    """
    if isinstance(transport, RestActions):
        return await transport.request(action, body)
    return None


for _name in __all__:
    _value = globals()[_name]
    if inspect.isfunction(_value):
        # Reprs and help() name the namespace users import from, not the private module.
        _value.__module__ = __name__
del _name, _value
