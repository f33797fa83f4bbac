"""``neotoma-agent forget CONVERSATION``: soft-delete a conversation, as Neotoma deletes.

See :mod:`neotoma_agent._neotoma.forget`: deletion observations on the conversation, its messages,
turn records and tool calls and every edge touching them, on any backend; nothing is
erased. The undo record (what ``forget --restore`` reads: ids only, never text) is written
before anything is deleted, so that a forget either has its record or did not happen: kept
in the data directory under ``forgotten/`` (one file per store and conversation, so that
``forget --restore CONVERSATION`` finds it), and also at ``--save FILE`` when given.
``--purge`` (the embedded store only) then erases the rows and the file's free pages.

``forget --entity ID`` deletes one entity as Neotoma's ``/delete_entity`` does (reversible
with ``--restore``; its id is the record); with ``--purge`` its observations are erased.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from .. import Forgotten
from ..exceptions import InvalidEntityIdError, NotFoundError
from ..files import private_dir, replace_private
from ..forget import (
    check_entity_id,
    forget_entity,
    forget_planned,
    plan_forget,
    restore_conversation,
    restore_entity,
)
from ._common import (
    USER_OPTION,
    CLIError,
    Command,
    db_path,
    given_user,
    open_transport,
    option,
    resolve_url,
)
from ._paths import data_dir

__all__ = ["register"]


def _read_record(path: Path) -> Forgotten:
    try:
        return Forgotten.from_json(json.loads(path.read_text(encoding="utf-8")))
    except OSError as exc:
        raise CLIError(f"cannot read {path}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError):
        raise CLIError(
            f"{path} is not a record `forget` wrote",
            "pass the file `neotoma-agent forget CONVERSATION --save FILE` wrote",
        ) from None


def _kept_path(args: argparse.Namespace, conversation_id: str) -> Path:
    """Where ``forget`` keeps the undo record of ``conversation_id`` in this store.

    Named by a digest of the store (its URL, or the store file's absolute path) and the
    conversation id: the same conversation id in two stores has two records.
    """
    url = resolve_url(args)
    store = url if url else str(db_path(args).resolve())
    user = given_user(args)
    # The default user's records keep the name they always had; another user's conversation
    # of the same id has its own.
    scope = "" if user is None else f"{user}\0"
    digest = hashlib.sha256(f"{store}\0{scope}{conversation_id}".encode()).hexdigest()[:32]
    return data_dir() / "forgotten" / f"{digest}.json"


def _keep(args: argparse.Namespace, record: Forgotten) -> Path:
    """Write the undo record before anything is forgotten: to ``--save``'s file, and
    (unless ``--purge`` will erase what it names) to the kept record, whose path is
    returned. A path that cannot be written stops the forget (a :class:`CLIError`
    saying nothing was)."""
    kept = _kept_path(args, record.conversation_id)
    paths = [Path(args.save).expanduser()] if args.save else []
    if not args.purge:
        paths.append(kept)
    text = json.dumps(record.to_json()) + "\n"
    for path in paths:
        try:
            if path == kept:
                private_dir(path.parent)
            replace_private(path, text.encode())
        except OSError as exc:
            raise CLIError(
                f"cannot write the undo record {path}: {exc.strerror or exc}; "
                "nothing was forgotten",
                f"make {path.parent} writable (the data directory: $XDG_DATA_HOME)"
                if path == kept
                else "pass --save a path in a directory you can write",
            ) from None
    return kept


def _hook_state_path(args: argparse.Namespace) -> Path:
    """The coding-agent hooks' state file ``forget --purge`` also clears (``--user``'s)."""
    from ._hook import hook_files

    return hook_files(args)[0]


def _purge_hook_state(args: argparse.Namespace, conversation_id: str) -> int | None:
    """Drop the conversation's turns from the hooks' state file; how many (``None``: no
    file). The file may hold its texts (a turn not delivered, an abandoned turn's reply),
    and a turn it still has to deliver would store the conversation again."""
    path = _hook_state_path(args)
    if not path.exists():
        return None
    from ..hooks import HookState

    with HookState(path) as state:
        return state.forget(conversation_id)


def _restore_source(args: argparse.Namespace) -> tuple[Path, bool]:
    """The record ``--restore`` names, and whether it is a kept one (removed once used).

    ``--restore FILE`` reads a record ``--save`` wrote; ``--restore CONVERSATION`` (or
    ``forget CONVERSATION --restore``) the one ``forget`` kept for it in this store.
    """
    named = args.restore or args.conversation
    if not named:
        raise CLIError("--restore needs the CONVERSATION to bring back (or the FILE --save wrote)")
    if args.restore and Path(args.restore).expanduser().is_file():
        return Path(args.restore).expanduser(), False
    kept = _kept_path(args, named)
    if not kept.is_file():
        raise CLIError(
            f"no record of a forgotten conversation {named!r} in this store (and no such file)",
            "pass the file `forget --save FILE` wrote, or the same --db / --url the forget used",
        )
    return kept, True


def _entity_arguments(args: argparse.Namespace) -> str:
    """The checked ``--entity`` id, and the options that go with it; a :class:`CLIError`
    before anything is opened or written otherwise."""
    try:
        entity_id = check_entity_id(args.entity)
    except InvalidEntityIdError as exc:
        raise CLIError(f"--entity: {exc}", "`neotoma-agent show --json` lists entity ids") from None
    if args.conversation is not None:
        raise CLIError("give a CONVERSATION or --entity ID, not both")
    if args.restore not in (None, ""):
        raise CLIError("with --entity, --restore takes no value: the entity id is the record")
    if args.save or args.state:
        raise CLIError("--save and --state go with a CONVERSATION, not --entity")
    if args.purge and args.restore is not None:
        raise CLIError("--purge erases for good: it cannot go with --restore")
    if args.purge and resolve_url(args):
        raise CLIError(
            "--purge erases rows of a store file; a server keeps its own",
            "drop --purge: the entity is then soft-deleted on the server",
        )
    return entity_id


def _no_entity(entity_id: str, deleted_too: bool) -> CLIError:
    return CLIError(
        f"no entity {entity_id} in this store"
        + (" (or it is deleted already)" if deleted_too else ""),
        "`neotoma-agent show --json` lists entity ids",
    )


async def _run_entity(args: argparse.Namespace) -> int:
    """``forget --entity ID`` (``--restore``, ``--purge``): one entity; one line said."""
    entity_id = _entity_arguments(args)
    async with open_transport(args, must_exist=True) as transport:
        if args.restore is not None:
            try:
                await restore_entity(transport, entity_id)
            except NotFoundError:
                raise _no_entity(entity_id, False) from None
            print(f"restored entity {entity_id}")
            return 0
        try:
            await forget_entity(transport, entity_id)
        except NotFoundError:
            # --purge also erases an entity deleted earlier (its observations remain)
            listed = await transport.list_observations(entity_id, limit=1)
            if not (args.purge and listed.observations):
                raise _no_entity(entity_id, True) from None
    if args.purge:
        from ..transport.embedded import purge_entities

        stats = purge_entities(db_path(args), [entity_id], user_id=_owner(args))
        print(
            f"erased entity {entity_id}: {stats.observations} observations, "
            f"{stats.relationships} edges, free pages vacuumed (irreversible)"
        )
    else:
        print(
            f"deleted entity {entity_id} (reversible: `neotoma-agent forget --entity "
            f"{entity_id} --restore` on this store undoes it)"
        )
    return 0


def _owner(args: argparse.Namespace) -> str:
    """Whose rows a ``--purge`` may erase: ``--user``'s, else the default user's (another
    user's entity of the same id is never erased by a command acting for someone else)."""
    from .. import LOCAL_USER_ID

    return given_user(args) or LOCAL_USER_ID


def _user_arguments(args: argparse.Namespace) -> str:
    """The user ``forget --user USER`` (no CONVERSATION, no --entity) forgets, and the
    options that go with it checked; a :class:`CLIError` before anything is opened."""
    user = given_user(args)
    assert user is not None
    if args.save:
        raise CLIError("--save goes with a CONVERSATION: a user's forget is undone by --restore")
    if args.restore not in (None, ""):
        raise CLIError("with --user alone, --restore takes no value: the user is the record")
    if args.purge and args.restore is not None:
        raise CLIError("--purge erases for good: it cannot go with --restore")
    if resolve_url(args):
        raise CLIError(
            "forget --user forgets a user of a store file; a server keeps its own users",
            "pass --db, or forget the user's conversations one by one with --url",
        )
    return user


def _erase_hook_files(args: argparse.Namespace) -> list[Path]:
    """Remove the user's own hook state and hook outbox files (and their WAL); the removed.

    ``hook --user`` keeps a user's prompts, replies, tool calls and queued closing stores in
    files of that user's alone, so erasing the user removes them whole."""
    from ._hook import hook_files

    removed: list[Path] = []
    for base in hook_files(args):
        for path in (base, *(base.with_name(base.name + end) for end in ("-wal", "-shm"))):
            if path.exists():
                path.unlink()
                removed.append(path)
    return removed


def _nothing_of_the_user(what: str) -> CLIError:
    # A mistyped user id must not read as done (the id itself is never quoted).
    return CLIError(
        f"nothing of that user {what} in this store",
        "check the user id (`neotoma-agent stats --user USER` shows a user's memory) and --db",
    )


async def _run_user(args: argparse.Namespace) -> int:
    """``forget --user USER`` (``--restore``, ``--purge``): every row of one user."""
    from ..transport.embedded import EmbeddedStore, purge_user

    user = _user_arguments(args)
    path = db_path(args)
    if not path.exists():
        raise CLIError(f"no store at {path}", "check --db (or NEOTOMA_AGENT_DB)")
    async with EmbeddedStore.open(path) as store:
        if args.restore is not None:
            restored = (await store.restore_user(user)).entity_ids
            if not restored:
                raise _nothing_of_the_user("to restore (never stored, or not forgotten)")
            print(f"restored the user's memory ({len(restored)} entities)")
            return 0
        forgotten = (await store.forget_user(user)).entity_ids
    if not args.purge:
        if not forgotten:
            raise _nothing_of_the_user("to forget (never stored, or forgotten already)")
        print(
            f"forgot the user's memory ({len(forgotten)} entities): reversible; "
            "`neotoma-agent forget --user USER --restore` on this store undoes it "
            "(--purge erases it)"
        )
        return 0
    stats = purge_user(path, user)
    removed = _erase_hook_files(args)
    erased = stats.entities + stats.observations + stats.relationships + stats.idempotency_keys
    if not erased and not removed:
        raise _nothing_of_the_user("to erase (never stored, or erased already)")
    print(
        f"erased the user's memory from the store file ({stats.entities} entities), "
        "free pages vacuumed (irreversible)"
    )
    if removed:
        print(f"hook files removed: {', '.join(str(p) for p in removed)}")
    return 0


async def run(args: argparse.Namespace) -> int:
    """Forget (or restore) one conversation, one entity or one user; print what was done."""
    if args.entity is not None:
        return await _run_entity(args)
    if args.conversation is None and given_user(args) is not None and not args.restore:
        return await _run_user(args)
    if args.restore is not None:
        source, from_kept = _restore_source(args)
        record = _read_record(source)
        async with open_transport(args, must_exist=True) as transport:
            await restore_conversation(transport, record)
        if from_kept:
            source.unlink(missing_ok=True)
        print(f"restored conversation {record.conversation_id} ({len(record.entities)} entities)")
        return 0
    if args.conversation is None:
        raise CLIError("forget needs a CONVERSATION (or --restore CONVERSATION)")
    if args.purge and resolve_url(args):
        raise CLIError(
            "--purge erases rows of a store file; a server keeps its own",
            "drop --purge: the conversation is then soft-deleted on the server",
        )
    async with open_transport(args, must_exist=True) as transport:
        forgotten = await plan_forget(transport, args.conversation)
        if not forgotten.entities:
            raise CLIError(
                f"no conversation {args.conversation!r} in this store (or it is forgotten already)",
                "`neotoma-agent show` lists the conversations",
            )
        # The record first: a forget whose record could not be written must not happen.
        kept = _keep(args, forgotten)
        await forget_planned(transport, forgotten)
    done = (
        f"forgot conversation {forgotten.conversation_id}: {len(forgotten.entities)} entities, "
        f"{len(forgotten.relationships)} edges (soft-deleted"
    )
    if args.purge:
        from ..transport.embedded import purge_forgotten

        stats = purge_forgotten(db_path(args), forgotten, user_id=_owner(args))
        kept.unlink(missing_ok=True)  # an earlier forget's record: nothing left to restore
        print(
            f"{done}, then erased: {stats.observations} observations, "
            f"{stats.relationships} edges, free pages vacuumed)"
        )
        dropped = _purge_hook_state(args, forgotten.conversation_id)
        if dropped is not None:
            print(f"hook state: {dropped} turns dropped from {_hook_state_path(args)}")
    else:
        print(
            f"{done}: reversible; `neotoma-agent forget --restore "
            f"{forgotten.conversation_id}` on this store undoes it)",
            file=sys.stdout,
        )
    return 0


COMMAND = Command(
    "forget",
    help="soft-delete a conversation or an entity (reversible); --purge also erases its bytes",
    description="""
        Forget a conversation the way Neotoma deletes: a deletion observation on the
        conversation, its messages, turn records and tool calls, and on every edge touching
        them (entities it only mentions stay). `show`, `export`, history, retrieval and the
        web view no longer see it. It is reversible: before anything is deleted, the undo
        record (entity ids, no text) is written to the data directory (and to --save FILE
        when given); if it cannot be written, nothing is forgotten. `forget --restore
        CONVERSATION` (same --db or --url) or `forget --restore FILE` undoes it. On a store
        file, --purge then erases the rows and VACUUMs the file (irreversible: no record is
        kept) and drops the conversation from the coding-agent hooks' state file (--state);
        the entities the conversation only mentions keep their text. `forget --entity ID`
        deletes one entity the way Neotoma's /delete_entity does (retrieval, search, show,
        the context block and the web view no longer see it; its edges stay), `--restore`
        brings it back, and --purge erases its observations, index entries and edges from
        the store file. `forget --user USER` (no CONVERSATION) forgets every row of one
        user of a store file (reversible with `--restore`); with --purge it erases them,
        VACUUMs the file and removes that user's coding-agent hook files (`hook --user`'s
        state and outbox). With a CONVERSATION or --entity, --user says whose it is.
    """,
    run=run,
    options=(
        USER_OPTION,
        option("conversation", nargs="?", metavar="CONVERSATION", help="conversation id"),
        option(
            "--entity",
            metavar="ID",
            help="forget one entity (ent_ + 24 hex digits) instead of a conversation",
        ),
        option("--save", metavar="FILE", help="also write the undo record to FILE (0600)"),
        option(
            "--restore",
            nargs="?",
            const="",
            metavar="CONVERSATION|FILE",
            help="undo a forget: the conversation's kept record, or the FILE --save wrote",
        ),
        option(
            "--purge",
            action="store_true",
            help="store file only: also erase the rows and free pages (irreversible), and "
            "the conversation's turns in the coding-agent hooks' state file",
        ),
        option(
            "--state",
            metavar="PATH",
            help="with --purge: the hooks' state file to clear (default: the one `hook` "
            "uses, $NEOTOMA_AGENT_HOOK_STATE or hooks-state.db in the data directory)",
        ),
    ),
)
register = COMMAND.register
