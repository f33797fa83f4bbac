"""How the dev server refuses: the JSON envelopes, Express's HTML pages and Zod-shaped issues.

A refusal found anywhere (body decoding, per-route validation, auth) is raised as a
:class:`Reply` carrying the finished response; the app's outermost middleware sends it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from aiohttp import web

from neotoma_agent.transport.rest import flat_envelope, html_error_page, json_type

_dumps = functools.partial(json.dumps, ensure_ascii=False, separators=(",", ":"))

#: a key absent from the request body (``None`` is the JSON value ``null``)
MISSING: Any = object()


class Reply(Exception):
    """Stop handling a request and send ``response`` (a refusal found while validating)."""

    def __init__(self, response: web.StreamResponse) -> None:
        super().__init__(response.status)
        self.response = response


def json_response(body: Mapping[str, Any], status: int = 200) -> web.Response:
    return web.json_response(dict(body), status=status, dumps=_dumps)


def refusal(
    status: int, code: str, message: str, details: Mapping[str, Any] | None = None
) -> Reply:
    return Reply(json_response(flat_envelope(code, message, details), status))


def html_response(status: int, message: str) -> web.Response:
    return web.Response(
        status=status, text=html_error_page(message), content_type="text/html", charset="utf-8"
    )


def too_large() -> web.Response:
    response = html_response(413, "PayloadTooLargeError: request entity too large")
    # The rest of the body is left unread, so this connection cannot carry another request.
    response.force_close()
    return response


@attrs.define
class Issues:
    """Collects Zod-style issues; :meth:`raise_if_any` sends them as the server would."""

    issues: list[dict[str, Any]] = attrs.Factory(list)

    def type_error(self, path: Sequence[str | int], expected: str, value: object) -> None:
        received = "undefined" if value is MISSING else json_type(value)
        message = "Required" if value is MISSING else f"Expected {expected}, received {received}"
        self.issues.append(
            {
                "code": "invalid_type",
                "expected": expected,
                "received": received,
                "path": list(path),
                "message": message,
            }
        )

    def enum_error(self, path: Sequence[str | int], options: Sequence[str], value: object) -> None:
        expected = " | ".join(f"'{o}'" for o in options)
        self.issues.append(
            {
                "received": value,
                "code": "invalid_enum_value",
                "options": list(options),
                "path": list(path),
                "message": f"Invalid enum value. Expected {expected}, received '{value}'",
            }
        )

    def custom(self, path: Sequence[str | int], message: str) -> None:
        self.issues.append({"code": "custom", "message": message, "path": list(path)})

    def too_small(self, path: Sequence[str | int], minimum: int) -> None:
        self.issues.append(
            {
                "code": "too_small",
                "minimum": minimum,
                "type": "array",
                "inclusive": True,
                "exact": False,
                "message": f"Array must contain at least {minimum} element(s)",
                "path": list(path),
            }
        )

    def not_positive(self, path: Sequence[str | int]) -> None:
        self.issues.append(
            {
                "code": "too_small",
                "minimum": 0,
                "type": "number",
                "inclusive": False,
                "exact": False,
                "message": "Number must be greater than 0",
                "path": list(path),
            }
        )

    def out_of_range(
        self, path: Sequence[str | int], minimum: int, maximum: int, value: int
    ) -> None:
        big = value > maximum
        bound = maximum if big else minimum
        relation = "less" if big else "greater"
        self.issues.append(
            {
                "code": "too_big" if big else "too_small",
                ("maximum" if big else "minimum"): bound,
                "type": "number",
                "inclusive": True,
                "exact": False,
                "message": f"Number must be {relation} than or equal to {bound}",
                "path": list(path),
            }
        )

    def raise_if_any(self) -> None:
        if self.issues:
            raise refusal(
                400,
                "VALIDATION_INVALID_FORMAT",
                "Invalid request payload.",
                {"issues": self.issues},
            )
