"""A griffe extension for the API reference: signatures stated once, shown in full.

A signature the package states once and other methods take over (see
``neotoma_agent/_util/signature.py``) is, read from the source, ``**options:
Unpack[TurnOptions]``, a ``*args, **kwargs`` method under ``@args_of(ToolCall.create)``,
or a sync facade method made by a factory (``turn = _driven(NeotomaMemory.turn)``). Type
checkers and editors see through each; griffe reads the text. mkdocs.yml loads this file
as a griffe extension after griffe's own ``unpack_typeddict`` (which lists the keys of
``**options: Unpack[X]`` as keyword parameters, each with its docstring), so that the
reference shows each such method with the parameters a caller passes:

- ``@args_of(source)`` / ``@method_args_of(source)``: the parameters of ``source`` after
  its first (``self`` or ``cls``), after the method's own ``self``; on a module's function
  (``integrations._common.args_of``: an entry point taking another's arguments), every
  parameter of ``source`` (after its first, if it is a method);
- a class attribute ``name = factory(Class.method)`` whose factory returns
  ``Callable[Concatenate[..., P], R]``: a method with the parameters of ``Class.method``,
  returning ``R`` (``Class.method``'s own result if ``R`` is a type variable: awaited, if
  it was a coroutine), with the attribute's docstring (else ``Class.method``'s);
- a ``TypedDict`` that extends another holds its base's keys too, first (``unpack_typeddict``
  reads a class's own).

It runs when the package is loaded, before the load events in which ``unpack_typeddict``
expands ``**options``: so a copied ``**options`` is expanded where it is copied to.
"""

from __future__ import annotations

from typing import Any

import griffe

#: the decorators of ``neotoma_agent._util.signature`` (and the integrations' ``args_of``)
_DECORATORS = {"args_of", "method_args_of"}


class SharedSignatures(griffe.Extension):
    """Expands the signatures stated once into the parameters each method takes."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        collection = loader.modules_collection
        classes = list(_classes(pkg))
        for module in _modules(pkg):
            for member in list(module.members.values()):
                if isinstance(member, griffe.Function):
                    _copy_decorated(member, collection)
        for cls in classes:
            _inherit_keys(cls, collection)
        for cls in classes:
            for name, member in list(cls.members.items()):
                if isinstance(member, griffe.Function):
                    _copy_decorated(member, collection)
                elif isinstance(member, griffe.Attribute):
                    made = _made_method(member, collection)
                    if made is not None:
                        cls.set_member(name, made)


def _classes(obj: griffe.Object) -> Any:
    for member in obj.members.values():
        if member.is_alias:
            continue
        if isinstance(member, (griffe.Module, griffe.Class)):
            if isinstance(member, griffe.Class):
                yield member
            yield from _classes(member)


def _modules(obj: griffe.Object) -> Any:
    for member in obj.members.values():
        if not member.is_alias and isinstance(member, griffe.Module):
            yield member
            yield from _modules(member)


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
        if isinstance(function.parent, griffe.Class):
            own = list(function.parameters)[:1]
            function.parameters = griffe.Parameters(*own, *_tail(source))
        else:
            given = _tail(source) if isinstance(source.parent, griffe.Class) else source.parameters
            function.parameters = griffe.Parameters(*given)


def _inherit_keys(cls: griffe.Class, collection: griffe.ModulesCollection) -> None:
    # A TypedDict extending another (class TurnOptions(TurnIds)): its base's keys first.
    inherited: dict[str, griffe.Object | griffe.Alias] = {}
    for base in cls.bases:
        parent = _resolve(base, collection)
        if isinstance(parent, griffe.Class) and _is_typed_dict(parent, collection):
            _inherit_keys(parent, collection)
            inherited.update(
                (name, member)
                for name, member in parent.members.items()
                if isinstance(member, griffe.Attribute) and name not in cls.members
            )
    if inherited:
        own = dict(cls.members)
        for name in own:
            cls.del_member(name)
        for name, member in {**inherited, **own}.items():
            cls.set_member(name, member)


def _is_typed_dict(cls: griffe.Class, collection: griffe.ModulesCollection) -> bool:
    for base in cls.bases:
        if str(base) == "TypedDict":
            return True
        parent = _resolve(base, collection)
        if isinstance(parent, griffe.Class) and _is_typed_dict(parent, collection):
            return True
    return False


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
    function = griffe.Function(
        attribute.name,
        lineno=attribute.lineno,
        endlineno=attribute.endlineno,
        # A copy: unpack_typeddict adds its options' table to each method's own.
        docstring=attribute.docstring or _copy(source.docstring),
        parameters=griffe.Parameters(*source.parameters),
        returns=returns,
    )
    function.labels.add("method")
    return function


def _copy(docstring: griffe.Docstring | None) -> griffe.Docstring | None:
    if docstring is None:
        return None
    return griffe.Docstring(
        docstring.value,
        lineno=docstring.lineno,
        endlineno=docstring.endlineno,
        parser=docstring.parser,
        parser_options=docstring.parser_options,
    )


def _type_vars(factory: griffe.Function) -> set[str]:
    # The type variables a factory's result is written with: its module's TypeVar names.
    module = factory.module
    return {
        name
        for name, member in module.members.items()
        if isinstance(member, griffe.Attribute) and str(member.value or "").startswith("TypeVar(")
    }
