"""Recording many finished turns at once: a transcript import.

:func:`record_batch` records each :class:`BatchTurn` exactly as
:meth:`NeotomaMemory.record_turn <neotoma_agent.NeotomaMemory.record_turn>` would (the same
records, under the same idempotency key, so running an import again writes nothing), and
says per turn whether it was written, replayed, or refused (a :class:`BatchOutcome`).
Turns of many conversations go in one batch, each with the memory of its conversation::

    from neotoma_agent import EmbeddedStore, NeotomaMemory
    from neotoma_agent.batch import BatchTurn, record_batch

    async with EmbeddedStore.open("memory.db") as store:
        chat = NeotomaMemory(store, conversation_id="support-42")
        turns = [
            BatchTurn(chat, "Is Acme on the new plan?", "Yes, since March.", "t1"),
            BatchTurn(chat, "And Globex?", "Not yet.", "t2"),
        ]
        for turn, outcome in zip(turns, await record_batch(store, turns)):
            if outcome.error is not None:
                print(turn.turn_id, "not stored:", type(outcome.error).__name__)

A store that runs many writes as one job (a :class:`BatchStore`: the
:class:`~neotoma_agent.EmbeddedStore`) records a batch in two jobs, one read and one
transaction, instead of one write per turn; any other transport records the turns one by
one, ``concurrency`` at a time. A turn's own failure (a key stored before with other text,
a refusal) is in its outcome, with the error ``record_turn`` raises; an error no turn could
survive (the store closed) is raised.
"""

from __future__ import annotations

from ._batch import BatchOutcome as BatchOutcome
from ._batch import BatchStore as BatchStore
from ._batch import BatchTurn as BatchTurn
from ._batch import record_batch as record_batch

__all__ = ["BatchOutcome", "BatchStore", "BatchTurn", "record_batch"]

for _value in (BatchOutcome, BatchStore, BatchTurn, record_batch):
    # Reprs and help() name the namespace users import from, not the private module.
    _value.__module__ = __name__
del _value
