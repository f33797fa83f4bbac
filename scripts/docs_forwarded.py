"""A griffe extension for the API reference: forwarded attributes shown as properties.

The sync facade declares an attribute it forwards to the async object it wraps as
``state: TurnState = forward("_turn", Turn)`` followed by its docstring (see
``neotoma_agent/sync/_forward.py``). At run time it is a read-only property; griffe reads
it as a class attribute with a value. mkdocs.yml loads this file as a griffe extension,
so the reference shows each such attribute as a property: its name, type and docstring,
without the ``forward(...)`` plumbing.
"""

from __future__ import annotations

from typing import Any

import griffe


class ForwardedAsProperties(griffe.Extension):
    """Relabels every ``name: T = forward(...)`` class attribute as a read-only property."""

    def on_attribute_instance(self, *, attr: griffe.Attribute, **kwargs: Any) -> None:
        if str(attr.value or "").startswith("forward("):
            attr.labels.difference_update({"class-attribute", "instance-attribute"})
            attr.labels.add("property")
            attr.value = None
