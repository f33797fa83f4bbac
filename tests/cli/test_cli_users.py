"""``--user USER`` on the command line: each store command reads and writes one user's memory.

On a store file (``store.for_user``) and through ``serve --users`` in a real process
(``HttpTransport(user_id=)``, or a user's own token): ``show``, ``stats``, ``export``,
``search``, ``audit``, ``import`` and ``forget`` under Alice never print Bob's marker, and
under Bob never Alice's. A bad ``--user`` is a usage error (exit 2) that never quotes it.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from cli_support import assert_one_line_error, cli, ok, serving
from two_users_support import ALICE, BOB, MARKERS, Planted, seed

from neotoma_agent import EmbeddedStore, NeotomaMemory

pytestmark = pytest.mark.one_backend


def _seeded(db: Path) -> dict[str, Planted]:
    async def write() -> dict[str, Planted]:
        async with EmbeddedStore.open(db) as store:
            return {user: await seed(store.for_user(user), user) for user in (ALICE, BOB)}

    return anyio.run(write)


#: every reading command, with what it needs besides the store and the user
def _reads(planted: Planted) -> list[list[str]]:
    return [
        ["show", "--json"],
        ["show", planted.conversation_id, "--json"],
        ["stats", "--json"],
        ["export"],
        ["export", "--turns"],
        ["search", "Maria", "--json"],
        ["search", MARKERS[ALICE], "--json"],
        ["search", MARKERS[BOB], "--json"],
        ["audit", "--json", "--min-age", "0"],
    ]


def test_every_read_command_sees_the_user_s_memory_alone(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    planted = _seeded(db)
    for user, other in ((ALICE, BOB), (BOB, ALICE)):
        mine = planted[user]
        for command in _reads(mine):
            run = cli(*command, "--db", str(db), "--user", user, home=tmp_path)
            assert run.returncode in (0, 1), (command, run.stderr)  # audit: 1 = findings
            if MARKERS[other] in command:  # the search echoes its query: it finds nothing
                assert json.loads(run.stdout)["hits"] == []
                continue
            assert MARKERS[other] not in run.stdout + run.stderr, command
        own = ok(
            cli(
                "show",
                mine.conversation_id,
                "--json",
                "--db",
                str(db),
                "--user",
                user,
                home=tmp_path,
            )
        )
        assert MARKERS[user] in own
        stats = json.loads(
            ok(cli("stats", "--json", "--db", str(db), "--user", user, home=tmp_path))
        )
        assert stats["conversations"] == 1  # this user's own, not the other's
        # The other user's conversation is not this user's to show.
        theirs = cli(
            "show", planted[other].conversation_id, "--db", str(db), "--user", user, home=tmp_path
        )
        assert theirs.returncode != 0
        assert MARKERS[other] not in theirs.stdout + theirs.stderr
    # Without --user: the default user, who has neither.
    everything = ok(cli("show", "--json", "--db", str(db), home=tmp_path))
    assert MARKERS[ALICE] not in everything
    assert MARKERS[BOB] not in everything


def test_import_writes_for_the_user_given(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    _seeded(db)
    line = {"conversation_id": "imported", "user": "zqimportedqz hello", "assistant": "hi"}
    ok(
        cli(
            "import", "-", "--db", str(db), "--user", ALICE, home=tmp_path,
            stdin=json.dumps(line) + "\n",
        )
    )  # fmt: skip
    assert "zqimportedqz" in ok(cli("export", "--db", str(db), "--user", ALICE, home=tmp_path))
    assert "zqimportedqz" not in ok(cli("export", "--db", str(db), "--user", BOB, home=tmp_path))
    assert "zqimportedqz" not in ok(cli("export", "--db", str(db), home=tmp_path))


@pytest.mark.parametrize("bad", ["", " zqspaceqz", "zq\x01qz", "zq" + "x" * 10_000])
@pytest.mark.parametrize("command", ["show", "stats", "export", "search", "forget"])
def test_a_bad_user_is_a_usage_error_that_never_quotes_it(
    tmp_path: Path, bad: str, command: str
) -> None:
    db = tmp_path / "m.db"
    extra = ["Maria"] if command == "search" else []
    run = cli(command, *extra, "--db", str(db), "--user", bad, home=tmp_path)
    assert run.returncode == 2
    assert_one_line_error(run, "bad --user")
    assert "zq" not in run.stderr
    assert not db.exists()  # refused before the store was opened


def test_forget_a_conversation_of_one_user_leaves_the_other_s(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    planted = _seeded(db)
    alice, bob = planted[ALICE], planted[BOB]
    before = ok(cli("show", "--json", "--db", str(db), "--user", BOB, home=tmp_path))
    # Bob's conversation id named under Alice's user is not found.
    missing = cli("forget", bob.conversation_id, "--db", str(db), "--user", ALICE, home=tmp_path)
    assert missing.returncode != 0
    ok(cli("forget", alice.conversation_id, "--db", str(db), "--user", ALICE, home=tmp_path))
    listing = ok(cli("show", "--json", "--db", str(db), "--user", ALICE, home=tmp_path))
    assert alice.conversation_id not in listing
    assert ok(cli("show", "--json", "--db", str(db), "--user", BOB, home=tmp_path)) == before
    ok(
        cli(
            "forget", "--restore", alice.conversation_id, "--db", str(db), "--user", ALICE,
            home=tmp_path,
        )
    )  # fmt: skip
    listing = ok(cli("show", "--json", "--db", str(db), "--user", ALICE, home=tmp_path))
    assert alice.conversation_id in listing


def test_through_serve_users_each_token_and_user_sees_its_own(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    planted = _seeded(db)
    users = tmp_path / "users"
    users.write_text(f"tok-alice-SECRET {ALICE}\ntok-bob-SECRET {BOB}\n")
    users.chmod(0o600)
    admin = tmp_path / "admin.token"
    admin.write_text("tok-admin-SECRET\n")
    with serving(db, tmp_path, token="tok-admin-SECRET", extra=["--users", str(users)]) as url:
        for user, other in ((ALICE, BOB), (BOB, ALICE)):
            token = tmp_path / f"{user}.token"
            token.write_text(f"tok-{'alice' if user == ALICE else 'bob'}-SECRET\n")
            mine = planted[user]
            runs = [
                # The admin token acting for the user, as --user says.
                [
                    "show",
                    mine.conversation_id,
                    "--json",
                    "--user",
                    user,
                    "--token-file",
                    str(admin),
                ],
                ["stats", "--json", "--user", user, "--token-file", str(admin)],
                ["search", "Maria", "--json", "--user", user, "--token-file", str(admin)],
                # The user's own token, with --user (its own) and without.
                [
                    "show",
                    mine.conversation_id,
                    "--json",
                    "--user",
                    user,
                    "--token-file",
                    str(token),
                ],
                ["search", "Maria", "--json", "--token-file", str(token)],
                ["stats", "--json", "--token-file", str(token)],
            ]
            for command in runs:
                out = ok(cli(*command, "--url", url, home=tmp_path))
                assert MARKERS[other] not in out, command
            shown = ok(cli(*runs[0], "--url", url, home=tmp_path))
            assert MARKERS[user] in shown
            # A user's token naming the other user: refused by the server (403).
            refused = cli(
                "stats", "--json", "--user", other, "--token-file", str(token), "--url", url,
                home=tmp_path,
            )  # fmt: skip
            assert refused.returncode == 1
            assert "403" in refused.stderr
            assert MARKERS[other] not in refused.stdout + refused.stderr


def test_a_user_s_token_alone_shows_what_it_stored_through_serve_users(tmp_path: Path) -> None:
    """``chat`` and ``show`` with ``--url --token-file`` and no ``--user``: the token's
    user, on every command (the conversation's id derived under that user, as the server
    derives it), and never the other user's conversation of the same name."""
    db = tmp_path / "m.db"
    users = tmp_path / "users"
    users.write_text(f"tok-alice-SECRET {ALICE}\ntok-bob-SECRET {BOB}\n")
    users.chmod(0o600)
    with serving(db, tmp_path, token="tok-admin-SECRET", extra=["--users", str(users)]) as url:
        for user in (ALICE, BOB):
            token = tmp_path / f"{user}.token"
            token.write_text(f"tok-{'alice' if user == ALICE else 'bob'}-SECRET\n")
            alone = ("--url", url, "--token-file", str(token))
            for n in (1, 2):
                ok(cli("chat", *alone, "--conversation", "talk", home=tmp_path,
                       stdin=f"turn {n} {MARKERS[user]}\n"))  # fmt: skip
        for user, other in ((ALICE, BOB), (BOB, ALICE)):
            alone = ("--url", url, "--token-file", str(tmp_path / f"{user}.token"))
            shown = json.loads(ok(cli("show", "talk", "--json", *alone, home=tmp_path)))
            said = [
                m["content"] for t in shown["turns"] for m in t["messages"] if m["role"] == "user"
            ]
            assert said == [f"turn 1 {MARKERS[user]}", f"turn 2 {MARKERS[user]}"]
            assert MARKERS[other] not in json.dumps(shown)


def test_hook_with_user_stores_through_serve_users_as_that_user(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    _seeded(db)
    users = tmp_path / "users"
    users.write_text(f"tok-alice-SECRET {ALICE}\n")
    users.chmod(0o600)
    alice_token = tmp_path / "alice.token"
    alice_token.write_text("tok-alice-SECRET\n")
    admin = tmp_path / "admin.token"
    admin.write_text("tok-admin-SECRET\n")
    marker = "zqhookoverurlqz"
    with serving(db, tmp_path, token="tok-admin-SECRET", extra=["--users", str(users)]) as url:
        store = ("--url", url, "--token-file", str(alice_token), "--user", ALICE)
        for event, payload in (
            ("UserPromptSubmit", {"prompt": f"hook {marker} prompt"}),
            ("Stop", {"last_assistant_message": f"hook {marker} reply"}),
        ):
            body = {"session_id": "s1", "prompt_id": "p1", "cwd": "/tmp", **payload}
            run = cli("hook", "claude-code", event, *store, home=tmp_path, stdin=json.dumps(body))
            assert (run.returncode, run.stderr) == (0, "")
        as_admin = ("--url", url, "--token-file", str(admin))
        # Read back by its conversation id: derived under Alice, as the server derives it.
        shown = ok(
            cli("show", "claude-code-s1", "--json", *as_admin, "--user", ALICE, home=tmp_path)
        )
        assert f"hook {marker} reply" in shown
        for user in (BOB, None):
            who = ["--user", user] if user else []
            found = ok(cli("search", marker, "--json", *as_admin, *who, home=tmp_path))
            assert json.loads(found)["hits"] == [], user


def test_hook_with_user_reads_its_history_through_serve_users(tmp_path: Path) -> None:
    """The second prompt's context holds the turn before it: the history, read by the
    conversation's id, derived under the user as the server derives it."""
    db = tmp_path / "m.db"

    async def acme() -> str:
        async with EmbeddedStore.open(db) as store:
            memory = NeotomaMemory(store.for_user(ALICE), conversation_id="seed")
            return await memory.remember("company", name="Acme Corp", website="acme.example")

    acme_id = anyio.run(acme)
    users = tmp_path / "users"
    users.write_text(f"tok-alice-SECRET {ALICE}\n")
    users.chmod(0o600)
    token = tmp_path / "alice.token"
    token.write_text("tok-alice-SECRET\n")
    with serving(db, tmp_path, token="tok-admin-SECRET", extra=["--users", str(users)]) as url:
        store = ("--url", url, "--token-file", str(token), "--user", ALICE)
        answers = []
        for event, payload in (
            ("UserPromptSubmit", {"prompt_id": "p1", "prompt": "What about Acme Corp?"}),
            ("Stop", {"prompt_id": "p1", "last_assistant_message": "A customer."}),
            ("UserPromptSubmit", {"prompt_id": "p2", "prompt": "And since when?"}),
        ):
            body = {"session_id": "s1", "cwd": "/tmp", **payload}
            run = cli("hook", "claude-code", event, *store, home=tmp_path, stdin=json.dumps(body))
            assert (run.returncode, run.stderr) == (0, "")
            answers.append(run.stdout)
    assert acme_id in answers[0]  # named: found by retrieval
    assert "What about Acme Corp?" in answers[2]  # the turn before it, from the history


def test_a_user_s_hook_never_brings_another_user_s_entities_into_context(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    planted = _seeded(db)  # both remembered a Maria Gomez of their own
    answers = {}
    for user in (ALICE, BOB):
        body = {"session_id": f"s-{user}", "prompt_id": "p1", "cwd": "/tmp"}
        body["prompt"] = "Do you know Maria Gomez?"
        run = cli(
            "hook", "claude-code", "UserPromptSubmit", "--db", str(db), "--user", user,
            home=tmp_path, stdin=json.dumps(body),
        )  # fmt: skip
        assert (run.returncode, run.stderr) == (0, "")
        answers[user] = run.stdout
    for user, other in ((ALICE, BOB), (BOB, ALICE)):
        assert MARKERS[user] in answers[user]  # their own Maria's notes
        assert MARKERS[other] not in answers[user]
        assert not set(planted[other].entity_ids) & set(answers[user].split('"'))
    states = list((tmp_path / "data" / "neotoma-agent").glob("hooks-state*.db"))
    assert len(states) == 2  # one file per user, none shared
    assert all(".user-" in p.name for p in states)


def test_chat_with_user_stores_for_that_user(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    _seeded(db)
    ok(cli("chat", "--db", str(db), "--user", BOB, "--conversation", "talk", home=tmp_path,
           stdin="hello zqchattedqz\n"))  # fmt: skip
    assert "zqchattedqz" in ok(cli("export", "--db", str(db), "--user", BOB, home=tmp_path))
    assert "zqchattedqz" not in ok(cli("export", "--db", str(db), "--user", ALICE, home=tmp_path))
