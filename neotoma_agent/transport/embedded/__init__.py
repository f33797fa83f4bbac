"""EmbeddedStore: a Neotoma store in one SQLite file, the default transport.

It answers every Transport method the way a real Neotoma server does (same entity ids,
canonical names, observations, snapshots, relationships, idempotency replays and error
bodies), with three deliberate differences, all in the direction of losing less:

* a store is atomic: if any part fails nothing is written, not even the idempotency key,
  so a corrected retry under the same key succeeds (a server keeps a partial write);
* an unknown relationship type or an out-of-range index is refused with ValidationError
  (a server silently skips the edge);
* snapshots are maintained incrementally, so a write costs the same on the thousandth
  observation of an entity as on the first.

Opening a file that holds something else (an outbox file, another program's SQLite
database) raises :class:`WrongFileKind` and leaves the file as it was.
"""

from ..._util.lazy import lazy_exports

# Imported on first use (see neotoma_agent._util.lazy): a hook process that writes the file
# through ._write alone loads neither the store's event-loop machinery nor the purge.
with lazy_exports(globals()):
    from ..._util.file_kind import WrongFileKind as WrongFileKind
    from ._forget_user import ForgottenUser as ForgottenUser
    from ._purge import PurgeStats as PurgeStats
    from ._purge import purge_entities as purge_entities
    from ._purge import purge_forgotten as purge_forgotten
    from ._purge import purge_user as purge_user
    from ._store import EmbeddedStore as EmbeddedStore
    from ._store import UserStore as UserStore
