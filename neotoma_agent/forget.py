"""Forgetting over any transport: a conversation, or one entity, soft-deleted and restorable.

The functions :meth:`NeotomaMemory.forget <neotoma_agent.NeotomaMemory.forget>`,
:meth:`~neotoma_agent.NeotomaMemory.restore`,
:meth:`~neotoma_agent.NeotomaMemory.forget_entity` and
:meth:`~neotoma_agent.NeotomaMemory.restore_entity` run, for a tool that holds a
:class:`~neotoma_agent.Transport` and no conversation (an erasure job, an admin command).
Each deletes as Neotoma does, by an observation that hides what it names from every read,
so each is undone by its restore, on every backend::

    from neotoma_agent import EmbeddedStore
    from neotoma_agent.forget import forget_planned, plan_forget, restore_conversation

    async with EmbeddedStore.open("memory.db") as store:
        plan = await plan_forget(store, "support-42")       # reads only
        keep_somewhere_safe(plan.to_json())                 # the map back, first
        await forget_planned(store, plan)                   # deletes exactly that
        ...
        await restore_conversation(store, plan)             # changed your mind

:func:`plan_forget` then :func:`forget_planned` is :func:`forget_conversation` in two steps,
so that the :class:`~neotoma_agent.Forgotten` record is kept before anything is deleted
(``neotoma-agent forget`` writes it to a 0600 file first). :func:`forget_entity` and
:func:`restore_entity` take an entity id, checked first by :func:`check_entity_id`.
Erasing the bytes of an embedded store is :func:`~neotoma_agent.purge_forgotten` and
:func:`~neotoma_agent.purge_entities`.
"""

from __future__ import annotations

import inspect

from ._neotoma.forget import check_entity_id as check_entity_id
from ._neotoma.forget import forget_conversation as forget_conversation
from ._neotoma.forget import forget_entity as forget_entity
from ._neotoma.forget import forget_planned as forget_planned
from ._neotoma.forget import plan_forget as plan_forget
from ._neotoma.forget import restore_conversation as restore_conversation
from ._neotoma.forget import restore_entity as restore_entity

__all__ = [
    "check_entity_id",
    "forget_conversation",
    "forget_entity",
    "forget_planned",
    "plan_forget",
    "restore_conversation",
    "restore_entity",
]

for _name in __all__:
    _value = globals()[_name]
    if inspect.isfunction(_value):
        # Reprs and help() name the namespace users import from, not the private module.
        _value.__module__ = __name__
del _name, _value
