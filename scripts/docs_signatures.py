"""A griffe extension for the API reference: signatures stated once, shown in full.

A signature the package states once and other methods take over (see
``neotoma_agent/_util/signature.py``) is, read from the source, ``**options:
Unpack[TurnOptions]``, a ``*args, **kwargs`` method under ``@args_of(ToolCall.create)``,
or a sync facade method made by a factory (``turn = _driven(NeotomaMemory.turn)``). Type
checkers and editors see through each; griffe reads the text. mkdocs.yml loads this file
as a griffe extension, so that the reference shows each such method with the parameters
a caller passes:

- ``**options: Unpack[X]`` (a ``TypedDict``): one keyword parameter per key of ``X`` (its
  bases' first), shown with the default ``...`` (an option left out takes the method's
  default, which its docstring states);
- ``@args_of(source)`` / ``@method_args_of(source)``: the parameters of ``source`` after
  its first (``self`` or ``cls``), after the method's own ``self``;
- a class attribute ``name = factory(Class.method)`` whose factory returns
  ``Callable[Concatenate[..., P], R]``: a method with the parameters of ``Class.method``,
  returning ``R`` (``Class.method``'s own result if ``R`` is a type variable: awaited, if
  it was a coroutine), with the attribute's docstring (else ``Class.method``'s).
"""

from __future__ import annotations

from typing import Any

import griffe

#: the decorators of ``neotoma_agent._util.signature``
_DECORATORS = {"args_of", "method_args_of"}


class SharedSignatures(griffe.Extension):
    """Expands the signatures stated once into the parameters each method takes."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        collection = loader.modules_collection
        classes = list(_classes(pkg))
        for cls in classes:  # the factories' methods first: their sources may use Unpack
            for name, member in list(cls.members.items()):
                if isinstance(member, griffe.Attribute):
                    made = _made_method(member, collection)
                    if made is not None:
                        cls.set_member(name, made)
        for cls in classes:
            for member in list(cls.members.values()):
                if isinstance(member, griffe.Function):
                    _copy_decorated(member, collection)
                    _expand_unpack(member, collection)


def _classes(obj: griffe.Object) -> Any:
    for member in obj.members.values():
        if member.is_alias:
            continue
        if isinstance(member, (griffe.Module, griffe.Class)):
            if isinstance(member, griffe.Class):
                yield member
            yield from _classes(member)


def _resolve(expr: object, collection: griffe.ModulesCollection) -> Any:
    path = getattr(expr, "canonical_path", None)
    if not path:
        return None
    try:
        found = collection.get_member(path)
    except (KeyError, ValueError):
        # A method a class inherits (``Turn.record_tool`` is ``TurnTools``'s).
        owner, _, name = path.rpartition(".")
        try:
            cls = collection.get_member(owner)
        except (KeyError, ValueError):
            return None
        cls = cls.final_target if cls.is_alias else cls
        found = cls.all_members.get(name) if isinstance(cls, griffe.Class) else None
        if found is None:
            return None
    return found.final_target if found.is_alias else found


def _tail(function: griffe.Function) -> list[griffe.Parameter]:
    # The parameters after the first (self / cls).
    return list(function.parameters)[1:]


def _copy_decorated(function: griffe.Function, collection: griffe.ModulesCollection) -> None:
    for decorator in function.decorators:
        call = decorator.value
        if not isinstance(call, griffe.ExprCall) or str(call.function) not in _DECORATORS:
            continue
        source = _resolve(call.arguments[0], collection)
        if not isinstance(source, griffe.Function):
            raise ValueError(f"{function.path}: cannot find the source of {call}")
        _expand_unpack(source, collection)
        own = list(function.parameters)[:1]
        function.parameters = griffe.Parameters(*own, *_tail(source))


def _expand_unpack(function: griffe.Function, collection: griffe.ModulesCollection) -> None:
    params = list(function.parameters)
    last = params[-1] if params else None
    annotation = last.annotation if last is not None else None
    if (
        last is None
        or last.kind is not griffe.ParameterKind.var_keyword
        or not isinstance(annotation, griffe.ExprSubscript)
        or str(annotation.left) != "Unpack"
    ):
        return
    options = _resolve(annotation.slice, collection)
    if not isinstance(options, griffe.Class):
        raise ValueError(f"{function.path}: cannot find the TypedDict {annotation.slice}")
    keywords = [
        griffe.Parameter(
            name,
            annotation=attribute.annotation,
            kind=griffe.ParameterKind.keyword_only,
            default="...",
        )
        for name, attribute in _keys(options, collection)
    ]
    function.parameters = griffe.Parameters(*params[:-1], *keywords)


def _keys(
    typed_dict: griffe.Class, collection: griffe.ModulesCollection
) -> list[tuple[str, griffe.Attribute]]:
    keys: dict[str, griffe.Attribute] = {}
    for base in typed_dict.bases:
        parent = _resolve(base, collection)
        if isinstance(parent, griffe.Class):
            keys.update(_keys(parent, collection))
    for name, member in typed_dict.members.items():
        if isinstance(member, griffe.Attribute) and member.annotation is not None:
            keys[name] = member
    return list(keys.items())


def _made_method(
    attribute: griffe.Attribute, collection: griffe.ModulesCollection
) -> griffe.Function | None:
    call = attribute.value
    if not isinstance(call, griffe.ExprCall) or len(call.arguments) != 1:
        return None
    factory = _resolve(call.function, collection)
    source = _resolve(call.arguments[0], collection)
    if not isinstance(factory, griffe.Function) or not isinstance(source, griffe.Function):
        return None
    made = factory.returns
    if not (isinstance(made, griffe.ExprSubscript) and str(made.left) == "Callable"):
        return None
    elements = getattr(made.slice, "elements", ())
    returns: Any = elements[-1] if elements else None
    if returns is None or str(returns) in _type_vars(factory):
        returns = source.returns
        if isinstance(returns, griffe.ExprSubscript) and str(returns.left) == "Coroutine":
            returns = returns.slice.elements[-1]  # type: ignore[union-attr]
    _copy_decorated(source, collection)
    _expand_unpack(source, collection)
    function = griffe.Function(
        attribute.name,
        lineno=attribute.lineno,
        endlineno=attribute.endlineno,
        docstring=attribute.docstring or source.docstring,
        parameters=griffe.Parameters(*source.parameters),
        returns=returns,
    )
    function.labels.add("method")
    return function


def _type_vars(factory: griffe.Function) -> set[str]:
    # The type variables a factory's result is written with: its module's TypeVar names.
    module = factory.module
    return {
        name
        for name, member in module.members.items()
        if isinstance(member, griffe.Attribute) and str(member.value or "").startswith("TypeVar(")
    }
