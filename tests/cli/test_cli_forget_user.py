"""``forget --user USER``: one user's memory forgotten (reversible), or erased (``--purge``).

Alice's memory holds her marker everywhere it can be: a turn through her view of the store
(prompt, reply, tool call arguments, remembered fields), turns of her coding agent through
real ``hook --user`` runs (one still open in her hook state file), and closing stores
queued in her hook outbox. After ``forget --user ALICE --purge`` no byte of the store file,
its WAL, the hook state or the outbox (nor any file of the data directory) holds her marker,
and Bob's ``show --json`` and ``stats --json`` are byte-identical to what they were.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from cli_support import assert_one_line_error, cli, ok
from two_users_support import ALICE, BOB, MARKERS, seed

from neotoma_agent import EmbeddedStore, NeotomaMemory, OutboxTransport
from neotoma_agent._records.keys import key_phase
from neotoma_agent.exceptions import ConnectionLost
from neotoma_agent.testing import FaultyTransport

pytestmark = pytest.mark.one_backend

MARK = MARKERS[ALICE]


def _event(session: str, prompt_id: str, **fields: Any) -> str:
    return json.dumps({"session_id": session, "prompt_id": prompt_id, "cwd": "/tmp", **fields})


def _hook_turns(db: Path, home: Path) -> None:
    """Alice's coding agent: a completed turn with a tool call, and one still open."""
    args = ("--db", str(db), "--user", ALICE)
    session = "sess-alice"
    for event, payload in (
        ("UserPromptSubmit", _event(session, "p1", prompt=f"hook {MARK} prompt")),
        (
            "PostToolUse",
            _event(
                session,
                "p1",
                tool_name="Bash",
                tool_input={"command": f"echo {MARK} args"},
                tool_response={"stdout": f"{MARK} out"},
                tool_use_id="toolu_1",
            ),
        ),
        ("Stop", _event(session, "p1", last_assistant_message=f"hook {MARK} reply")),
        ("UserPromptSubmit", _event(session, "p2", prompt=f"still {MARK} open")),
    ):
        run = cli("hook", "claude-code", event, *args, home=home, stdin=payload)
        assert run.returncode == 0
        assert run.stderr == "", run.stderr


def _hook_outbox(home: Path) -> Path:
    return home / "data" / "neotoma-agent"


async def _queued_turn(db: Path, outbox: Path) -> None:
    """A turn of Alice's whose closing store could not be delivered: queued in ``outbox``."""
    async with EmbeddedStore.open(db) as store:
        down = FaultyTransport(store.for_user(ALICE)).fail(
            "store",
            ConnectionLost("down"),
            when=lambda m, a, kw: key_phase(kw["idempotency_key"]) == "assistant",
        )
        async with OutboxTransport(down, outbox, background=False) as queued:
            memory = NeotomaMemory(queued, conversation_id="queued-chat", close_timeout=5.0)
            async with memory.turn(f"queued {MARK} prompt", turn_id="q1") as t:
                t.reply = f"queued {MARK} reply"
            assert t.result.queued


def _alice_everywhere(tmp: Path) -> Path:
    db = tmp / "m.db"

    async def write() -> None:
        async with EmbeddedStore.open(db) as store:
            await seed(store.for_user(ALICE), ALICE)
            await seed(store.for_user(BOB), BOB)

    anyio.run(write)
    _hook_turns(db, tmp)
    outbox = next(_hook_outbox(tmp).glob("hooks-state.user-*.db")).name.replace(
        "hooks-state", "hooks-outbox"
    )
    anyio.run(_queued_turn, db, _hook_outbox(tmp) / outbox)
    return db


def _files_holding(marker: str, *roots: Path) -> list[Path]:
    found = []
    for root in roots:
        for path in [root] if root.is_file() else root.rglob("*"):
            if path.is_file() and marker.encode() in path.read_bytes():
                found.append(path)
    return found


def _views(db: Path, home: Path, user: str) -> tuple[str, str, str]:
    def run(*args: str) -> str:
        return ok(cli(*args, "--db", str(db), "--user", user, home=home))

    conversation = "chat-a" if user == ALICE else "chat-b"
    return run("show", "--json"), run("show", conversation, "--json"), run("stats", "--json")


def test_purge_erases_every_byte_of_the_user_and_nothing_of_another(tmp_path: Path) -> None:
    db = _alice_everywhere(tmp_path)
    data = tmp_path / "data"
    # Everywhere before: the store (or its WAL), the hook state, the outbox.
    holding = {p.name for p in _files_holding(MARK, tmp_path)}
    assert any(name.startswith("m.db") for name in holding), holding
    assert any(name.startswith("hooks-state.user-") for name in holding), holding
    assert any(name.startswith("hooks-outbox.user-") for name in holding), holding
    bob_before = _views(db, tmp_path, BOB)

    out = ok(cli("forget", "--user", ALICE, "--purge", "--db", str(db), home=tmp_path))
    assert ALICE not in out

    assert _files_holding(MARK, tmp_path) == []
    assert _files_holding(MARK, data) == []
    assert _views(db, tmp_path, BOB) == bob_before
    assert MARKERS[BOB].encode() in db.read_bytes()
    listing = json.loads(ok(cli("show", "--json", "--db", str(db), "--user", ALICE, home=tmp_path)))
    assert MARK not in json.dumps(listing)


def test_forget_without_purge_is_reversible(tmp_path: Path) -> None:
    db = _alice_everywhere(tmp_path)
    alice_before = _views(db, tmp_path, ALICE)
    bob_before = _views(db, tmp_path, BOB)
    assert MARK in alice_before[1]

    ok(cli("forget", "--user", ALICE, "--db", str(db), home=tmp_path))
    hidden = ok(cli("show", "--json", "--db", str(db), "--user", ALICE, home=tmp_path))
    assert "chat-a" not in hidden
    assert MARK not in ok(cli("export", "--db", str(db), "--user", ALICE, home=tmp_path))
    assert _views(db, tmp_path, BOB) == bob_before

    ok(cli("forget", "--user", ALICE, "--restore", "--db", str(db), home=tmp_path))
    assert "chat-a" in ok(cli("show", "--json", "--db", str(db), "--user", ALICE, home=tmp_path))
    assert _views(db, tmp_path, BOB) == bob_before


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--save", "x.json"], "--save goes with a CONVERSATION"),
        (["--purge", "--restore"], "cannot go with --restore"),
        (["--url", "http://127.0.0.1:9"], "a server keeps its own users"),
    ],
)
def test_forget_user_refuses_options_that_do_not_apply(
    tmp_path: Path, extra: list[str], needle: str
) -> None:
    db = tmp_path / "m.db"
    store_args = [] if "--url" in extra else ["--db", str(db)]
    run = cli("forget", "--user", ALICE, *extra, *store_args, home=tmp_path)
    assert_one_line_error(run, needle)
    assert ALICE not in run.stderr


def test_a_user_the_store_does_not_hold_is_an_error_not_a_success(tmp_path: Path) -> None:
    """A mistyped user id must not read as forgotten or erased: each form says nothing of
    that user was found (exit 1, the id never quoted), and another user's memory stays."""
    db = tmp_path / "m.db"

    async def write() -> None:
        async with EmbeddedStore.open(db) as store:
            await seed(store.for_user(BOB), BOB)

    anyio.run(write)
    bob_before = _views(db, tmp_path, BOB)
    typo = "bob@exmaple.com"
    for extra, needle in (
        ([], "nothing of that user to forget"),
        (["--restore"], "nothing of that user to restore"),
        (["--purge"], "nothing of that user to erase"),
    ):
        run = cli("forget", "--user", typo, *extra, "--db", str(db), home=tmp_path)
        assert_one_line_error(run, needle)
        assert typo not in run.stderr + run.stdout
    assert _views(db, tmp_path, BOB) == bob_before

    # A user it holds: the counts say what was done.
    out = ok(cli("forget", "--user", BOB, "--db", str(db), home=tmp_path))
    assert "entities)" in out
    assert (
        "nothing of that user to forget"
        in cli("forget", "--user", BOB, "--db", str(db), home=tmp_path).stderr
    )  # forgotten already
    out = ok(cli("forget", "--user", BOB, "--purge", "--db", str(db), home=tmp_path))
    assert "erased the user's memory" in out
    again = cli("forget", "--user", BOB, "--purge", "--db", str(db), home=tmp_path)
    assert_one_line_error(again, "nothing of that user to erase")
