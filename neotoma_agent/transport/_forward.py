"""Forwarding: a transport that passes every Transport method on to an inner one.

The base of every wrapper the package ships (:class:`~neotoma_agent.OutboxTransport`, the
wrappers in :mod:`neotoma_agent.testing`). Each method is built from the protocol's own
signature, so a wrapper forwards every argument the protocol names, the ``store`` hints
(``lane``, ``deferrable``) included, by construction: a hint added to the protocol reaches
the transport that reads it through any stack of wrappers, and no wrapper can hide it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine, Mapping
from types import MappingProxyType
from typing import Any, Concatenate, ParamSpec, TypeVar

from .._records.user_id import identify, tenant_for
from ._base import AsyncClosing, ConversationReader, SearchReader, SummaryReader, Transport
from ._bodies import STORE_DEFAULTS, WINDOW_DEFAULTS

__all__ = ["Forwarding"]

P = ParamSpec("P")
T = TypeVar("T")

_NONE: Mapping[str, object] = MappingProxyType({})


def _forward(
    method: Callable[Concatenate[Any, P], Coroutine[Any, Any, T]],
    *,
    optional: bool = False,
    protocol: type[Any] = ConversationReader,
    defaults: Mapping[str, object] = _NONE,
) -> Callable[Concatenate[Forwarding, P], Coroutine[Any, Any, T]]:
    """A wrapper method with the signature of the protocol's ``method``, calling ``_call``.

    The call goes on as the protocol spells it: parameters before ``*`` positionally, the
    rest by keyword, defaults filled in. ``optional``: a method of the optional ``protocol``
    (:class:`ConversationReader`, :class:`SummaryReader`, :class:`SearchReader`),
    :class:`NotImplementedError` when the wrapped transport lacks it. ``defaults``: the
    keywords a ``**options: Unpack[...]`` parameter takes, filled in as the signature's own
    defaults are.
    """
    name = method.__name__
    signature = inspect.signature(method)

    @functools.wraps(method)
    async def forward(self: Forwarding, /, *args: P.args, **kwargs: P.kwargs) -> T:
        if optional and not isinstance(self.inner, protocol):
            raise NotImplementedError(f"the wrapped transport has no {name}")
        bound = signature.bind(self.inner, *args, **kwargs)
        bound.apply_defaults()
        result: T = await self._call(name, *bound.args[1:], **{**defaults, **bound.kwargs})
        return result

    forward.__doc__ = f"Delegates ``{name}``."
    return forward


class Forwarding(AsyncClosing):
    """Delegates every Transport method (and the optional reads) through :meth:`_call`.

    A subclass overrides :meth:`_call` to act on every call, or one method to act on it.
    """

    def __init__(self, inner: Transport) -> None:
        self.inner = inner

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await getattr(self.inner, method)(*args, **kwargs)

    store = _forward(Transport.store, defaults=STORE_DEFAULTS)
    retrieve_entity_by_identifier = _forward(Transport.retrieve_entity_by_identifier)
    create_relationship = _forward(Transport.create_relationship)
    create_relationships = _forward(Transport.create_relationships)
    get_entity_snapshot = _forward(Transport.get_entity_snapshot)
    list_observations = _forward(Transport.list_observations)
    retrieve_related_entities = _forward(Transport.retrieve_related_entities)
    query_entities = _forward(Transport.query_entities)
    correct = _forward(Transport.correct)
    recent_conversation = _forward(
        ConversationReader.recent_conversation, optional=True, defaults=WINDOW_DEFAULTS
    )
    recent_conversations = _forward(ConversationReader.recent_conversations, optional=True)
    conversation_summaries = _forward(
        SummaryReader.conversation_summaries, optional=True, protocol=SummaryReader
    )
    search = _forward(SearchReader.search, optional=True, protocol=SearchReader)

    @property
    def tenant_id(self) -> str | None:
        """The wrapped transport's: the user its entity ids are scoped to (or None)."""
        return tenant_for(self.inner)

    async def _identify(self) -> None:
        """The wrapped transport's, if it has one: learn which user its token acts for
        (before ids are derived; see ``HttpTransport``)."""
        await identify(self.inner)

    async def aclose(self) -> None:
        """Closes the wrapped transport."""
        await self.inner.aclose()
