"""Public names imported on first use (PEP 562), listed once as ordinary imports.

``neotoma_agent/__init__.py`` lists every public name as ``from .module import Name as
Name`` inside ``with lazy_exports(globals()):``. Type checkers, editors and readers see plain
imports; at run time the block records each name's module instead of importing it, and the
package's ``__getattr__`` imports that module the first time the name is used. So
``import neotoma_agent`` costs only what is used: no aiohttp without ``HttpTransport``, no
audit without ``audit()``, no structlog unless the application loaded it.

Names that moved to another public module stay importable from here for a while:
``moved={"audit": "neotoma_agent.qa", ...}`` resolves each from its new home with a
``DeprecationWarning`` (outside ``__all__`` and ``dir()``).

A wing's private door to the core (``cli/_core.py``) uses it the same way, with imports from
the package above (``from .._backup import ...``): a name costs nothing until it is used, so
a hook process that never uses it never loads it.

The recording replaces ``builtins.__import__`` for the block's duration and records only the
block's own relative imports (its globals); any other import, in any thread, goes to the
original unchanged. No source file is read, so it works where only bytecode ships.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = ["lazy_exports"]


class _Recorded:
    """What a recorded ``from .module import a, b`` gets instead of the module."""

    def __getattr__(self, name: str) -> object:
        return self


_RECORDED = _Recorded()


@contextlib.contextmanager
def lazy_exports(
    namespace: dict[str, Any], *, moved: Mapping[str, str] | None = None
) -> Iterator[None]:
    """Record the block's ``from .module import Name`` lines as the package's lazy names.

    After the block, ``namespace`` (the package's globals) gets ``__all__`` (the names,
    sorted), ``__getattr__`` and ``__dir__``; a name resolved once is cached in it.
    ``moved`` maps deprecated names to the public module that now has them.
    """
    package = str(namespace["__name__"])
    # what a relative import starts from: the package itself, or a module's package
    here = str(namespace.get("__package__") or package).split(".")
    table: dict[str, str] = {}
    original = builtins.__import__

    def record(
        name: str,
        globals: Mapping[str, object] | None = None,
        locals: Mapping[str, object] | None = None,
        fromlist: Sequence[str] | None = (),
        level: int = 0,
    ) -> Any:
        if globals is not namespace or level < 1 or level > len(here) or not name or not fromlist:
            return original(name, globals, locals, fromlist or (), level)
        home = ".".join(here[: len(here) - level + 1])
        for item in fromlist:
            table[item] = f"{home}.{name}"
        return _RECORDED

    builtins.__import__ = record
    try:
        yield
    finally:
        builtins.__import__ = original
    for item in table:
        namespace.pop(item, None)  # the placeholders the block bound
    _install(namespace, package, table, moved or {})


def _install(
    namespace: dict[str, Any],
    package: str,
    table: Mapping[str, str],
    moved: Mapping[str, str],
) -> None:
    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            new_home = moved.get(name)
            if new_home is None:
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
            # Not cached, so that every use still warns.
            warnings.warn(
                f"{package}.{name} is deprecated: import it from {new_home}",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(importlib.import_module(new_home), name)
        value = getattr(importlib.import_module(module), name)
        if getattr(value, "__module__", "").startswith(package + "."):
            # Public names report themselves as neotoma_agent.X, not their private module.
            value.__module__ = package
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *table})

    namespace["__all__"] = sorted(table)
    namespace["__getattr__"] = __getattr__
    namespace["__dir__"] = __dir__
