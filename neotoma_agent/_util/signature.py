"""Signatures stated once: a method taking another's arguments, and keyword options.

Some public methods take exactly the arguments of another (``OpenTurn.record_tool`` and
``Turn.record_tool`` are ``ToolCall.create`` for a turn; ``OpenTurn.context`` is
``Turn.context``). With :func:`args_of` / :func:`method_args_of` the parameter list is
stated once, on the source; the method takes ``*args, **kwargs`` and hands them on, keeps
its own name, docstring and return type, and is shown with the source's parameters
wherever a reader looks: mypy and editors (the decorator is typed with a ``ParamSpec``),
``inspect.signature`` and ``help()`` (it sets ``__signature__``) and the API reference
(``scripts/docs_signatures.py``)::

    @method_args_of(Turn.context)
    def context(self, *, history: bool = True, **budget: Any) -> str:
        \"\"\"The prompt block of what this turn knows.\"\"\"
        return render_context(self.retrieved, self.history if history else (), **budget)

Keyword options that several methods share, each ``None`` when left out (the options of a
turn), are one ``TypedDict`` the methods take as ``**options: Unpack[Options]`` (PEP 692:
mypy and editors show each option); :func:`check_options` refuses a keyword it does not
name, as Python would, and the API reference lists the options as keyword parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar

__all__ = ["args_of", "check_options", "method_args_of"]

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


def args_of(
    source: Callable[P, object],
) -> Callable[[Callable[Concatenate[S, ...], R]], Callable[Concatenate[S, P], R]]:
    """A method (after its ``self``) taking every parameter of ``source``: a function, or
    a method read from its class already bound (a classmethod such as ``ToolCall.create``)."""
    return lambda method: _takes(method, source, skip=0)


def method_args_of(
    source: Callable[Concatenate[Any, P], object],
) -> Callable[[Callable[Concatenate[S, ...], R]], Callable[Concatenate[S, P], R]]:
    """A method (after its ``self``) taking the parameters of the method ``source`` after
    its own ``self``."""
    return lambda method: _takes(method, source, skip=1)


def _takes(method: Callable[..., Any], source: Callable[..., object], *, skip: int) -> Any:
    import inspect  # here: a hook process checks options, and decorates nothing

    own = inspect.signature(method)
    this = next(iter(own.parameters.values()))
    given = list(inspect.signature(source).parameters.values())[skip:]
    method.__signature__ = own.replace(parameters=[this, *given])  # type: ignore[attr-defined]
    return method


def check_options(options: Mapping[str, object], allowed: type, function: str) -> None:
    """Refuse a keyword that ``**options: Unpack[allowed]`` (a ``TypedDict``) does not
    name, as Python refuses one a signature does not: ``TypeError``, before any I/O."""
    for name in options:
        if name not in allowed.__annotations__:  # a TypedDict's own keys and its bases'
            raise TypeError(f"{function}() got an unexpected keyword argument {name!r}")
