"""Rendering a page: one Jinja environment with autoescaping, and the filters stored text
goes through.

Every stored string is untrusted (a user's message, a model's reply, a tool's result, an
entity field another client wrote). Jinja escapes all of it for HTML (``autoescape`` on
every template, never ``|safe``); :func:`visible` also shows control characters, bidi
overrides and lone surrogates as visible escapes (the terminal's rule, plus what UTF-8
cannot encode), so a text can neither hide itself nor break the page's encoding; and
:func:`href` makes a link only of an ``http`` / ``https`` URL, never ``javascript:`` or
``data:``.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, Final

from ..reads import printable, short_class

try:
    import jinja2
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError(
        "the web view needs Jinja2: pip install 'neotoma-agent[ui]'", name=exc.name
    ) from exc

__all__ = ["href", "pretty_json", "render", "visible"]

_SURROGATE: Final = re.compile(r"[\ud800-\udfff]")
_LINK_SCHEMES: Final = frozenset({"http", "https"})


def visible(value: object) -> str:
    """``value`` as text with every control, bidi and surrogate character shown as an escape."""
    text = value if isinstance(value, str) else str(value)
    text = printable(text)
    if not text.isascii():
        text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


def href(value: object) -> str | None:
    """``value`` if it is an absolute ``http``/``https`` URL that is safe as a link, else None."""
    if not isinstance(value, str) or value != value.strip() or not value.isprintable():
        return None
    try:
        parts = urllib.parse.urlsplit(value)
    except ValueError:
        return None
    if parts.scheme.lower() not in _LINK_SCHEMES or not parts.netloc:
        return None
    return value


def pretty_json(value: object) -> str:
    """A JSON value indented for reading (the text is then escaped like any other)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


def _linker(base: str) -> Callable[..., str]:
    def link(to: str, /, **params: object) -> str:
        # ``to`` is positional-only: a page may well have a parameter called ``page``.
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        return f"{base}/{to}" + (f"?{query}" if query else "")

    return link


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("neotoma_agent.ui", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["visible"] = visible
    env.filters["href"] = href
    env.filters["pretty_json"] = pretty_json
    env.filters["short_class"] = short_class
    env.filters["short_time"] = lambda s: visible(s)[:19].replace("T", " ") if s else ""
    return env


_ENV: Final = _environment()


def render(template: str, base: str, context: Mapping[str, Any]) -> str:
    """The page ``template`` rendered with ``context``; ``link(to, **params)`` builds URLs."""
    return _ENV.get_template(template).render(
        **context,
        base=base,
        link=_linker(base),
    )
