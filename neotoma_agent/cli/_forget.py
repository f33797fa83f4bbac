"""``neotoma-agent forget CONVERSATION``: soft-delete a conversation, as Neotoma deletes.

See :mod:`neotoma_agent._forget`: deletion observations on the conversation, its messages,
turn records and tool calls and every edge touching them, on any backend; nothing is
erased. The undo record (what ``forget --restore`` reads: ids only, never text) is written
before anything is deleted, so that a forget either has its record or did not happen: kept
in the data directory under ``forgotten/`` (one file per store and conversation, so that
``forget --restore CONVERSATION`` finds it), and also at ``--save FILE`` when given.
``--purge`` (the embedded store only) then erases the rows and the file's free pages.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from .._forget import Forgotten, forget_planned, plan_forget, restore_conversation
from .._private import private_dir, replace_private
from ._common import CLIError, Command, db_path, open_transport, option, resolve_url
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
    digest = hashlib.sha256(f"{store}\0{conversation_id}".encode()).hexdigest()[:32]
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
    """The coding-agent hooks' state file ``forget --purge`` also clears."""
    from ._hook import default_state_path

    return Path(args.state).expanduser() if args.state else default_state_path()


def _purge_hook_state(args: argparse.Namespace, conversation_id: str) -> int | None:
    """Drop the conversation's turns from the hooks' state file; how many (``None``: no
    file). The file may hold its texts (a turn not delivered, an abandoned turn's reply),
    and a turn it still has to deliver would store the conversation again."""
    path = _hook_state_path(args)
    if not path.exists():
        return None
    from ..hooks._state import HookState

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


async def run(args: argparse.Namespace) -> int:
    """Forget (or restore) one conversation; print what was done."""
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

        stats = purge_forgotten(db_path(args), forgotten)
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
    help="soft-delete a conversation (reversible); --purge also erases its bytes",
    description="""
        Forget a conversation the way Neotoma deletes: a deletion observation on the
        conversation, its messages, turn records and tool calls, and on every edge touching
        them (entities it only mentions stay). `show`, `export`, history, retrieval and the
        web view no longer see it. It is reversible: before anything is deleted, the undo
        record (entity ids, no text) is written to the data directory (and to --save FILE
        when given); if it cannot be written, nothing is forgotten. `forget --restore
        CONVERSATION` (same --db or --url) or `forget --restore FILE` undoes it. On a store
        file, --purge then erases the rows and VACUUMs the file (irreversible: no record is
        kept), for a user who asked to be forgotten, and drops the conversation from the
        coding-agent hooks' state file (--state).
    """,
    run=run,
    options=(
        option("conversation", nargs="?", metavar="CONVERSATION", help="conversation id"),
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
