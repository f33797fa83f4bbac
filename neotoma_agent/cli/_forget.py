"""``neotoma-agent forget CONVERSATION``: soft-delete a conversation, as Neotoma deletes.

See :mod:`neotoma_agent._forget`: deletion observations on the conversation, its messages,
turn records and tool calls and every edge touching them, on any backend; nothing is
erased, and ``--save FILE`` keeps the record ``forget --restore FILE`` reads to undo it.
``--purge`` (the embedded store only) then erases the rows and the file's free pages.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import anyio

from .._forget import Forgotten, forget_conversation, restore_conversation
from ._common import CLIError, Command, db_path, open_transport, option, resolve_url

__all__ = ["register"]


def _read_record(path: str) -> Forgotten:
    try:
        return Forgotten.from_json(json.loads(Path(path).read_text(encoding="utf-8")))
    except OSError as exc:
        raise CLIError(f"cannot read {path}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError):
        raise CLIError(
            f"{path} is not a record `forget --save` wrote",
            "pass the file `neotoma-agent forget CONVERSATION --save FILE` wrote",
        ) from None


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


async def run(args: argparse.Namespace) -> int:
    """Forget (or restore) one conversation; print what was done."""
    if args.restore is not None:
        record = _read_record(args.restore)
        async with open_transport(args, must_exist=True) as transport:
            await restore_conversation(transport, record)
        print(f"restored conversation {record.conversation_id} ({len(record.entities)} entities)")
        return 0
    if args.conversation is None:
        raise CLIError("forget needs a CONVERSATION (or --restore FILE)")
    if args.purge and resolve_url(args):
        raise CLIError(
            "--purge erases rows of a store file; a server keeps its own",
            "drop --purge: the conversation is then soft-deleted on the server",
        )
    async with open_transport(args, must_exist=True) as transport:
        forgotten = await forget_conversation(transport, args.conversation)
    if not forgotten.entities:
        raise CLIError(
            f"no conversation {args.conversation!r} in this store (or it is forgotten already)",
            "`neotoma-agent show` lists the conversations",
        )
    if args.save:
        from .._private import write_private

        # 0600: the saved record holds the conversation's whole text.
        data = (json.dumps(forgotten.to_json()) + "\n").encode()
        await anyio.to_thread.run_sync(write_private, args.save, data)
    done = (
        f"forgot conversation {forgotten.conversation_id}: {len(forgotten.entities)} entities, "
        f"{len(forgotten.relationships)} edges (soft-deleted"
    )
    if args.purge:
        from ..transport.embedded import purge_forgotten

        stats = purge_forgotten(db_path(args), forgotten)
        print(
            f"{done}, then erased: {stats.observations} observations, "
            f"{stats.relationships} edges, free pages vacuumed)"
        )
        dropped = _purge_hook_state(args, forgotten.conversation_id)
        if dropped is not None:
            print(f"hook state: {dropped} turns dropped from {_hook_state_path(args)}")
    else:
        hint = f"; `forget --restore {args.save}` undoes it" if args.save else ""
        print(f"{done}: reversible{hint})", file=sys.stdout)
    return 0


COMMAND = Command(
    "forget",
    help="soft-delete a conversation (reversible); --purge also erases its bytes",
    description="""
        Forget a conversation the way Neotoma deletes: a deletion observation on the
        conversation, its messages, turn records and tool calls, and on every edge touching
        them (entities it only mentions stay). `show`, `export`, history, retrieval and the
        web view no longer see it. It is reversible: --save FILE keeps the record that
        `forget --restore FILE` reads. On a store file, --purge then erases the rows and
        VACUUMs the file (irreversible), for a user who asked to be forgotten, and drops
        the conversation from the coding-agent hooks' state file (--state).
    """,
    run=run,
    options=(
        option("conversation", nargs="?", metavar="CONVERSATION", help="conversation id"),
        option("--save", metavar="FILE", help="write the record `--restore` reads"),
        option("--restore", metavar="FILE", help="undo the forget that wrote FILE"),
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
