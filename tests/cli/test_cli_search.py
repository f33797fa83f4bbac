"""``neotoma-agent search``: hits best first, stored text made safe for a terminal, exact in
``--json``; one conversation, a limit; a bad query a one-line error; a store file and a
server alike."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
from cli_support import assert_one_line_error, cli, ok, serving

from neotoma_agent import EmbeddedStore, NeotomaMemory

#: a title change, a screen clear, a C1 CSI, a bidi override: never printed raw
HOSTILE = "certificates \x1b]0;PWNED\x07 \x1b[2J \x9b31m \u202eevil"
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


async def _seed(db: Path) -> None:
    async with EmbeddedStore.open(db) as store:
        deal = NeotomaMemory(store, conversation_id="deal-room")
        await deal.record_turn("Rotate the TLS certificates", "Done by Friday.", turn_id="t1")
        await deal.record_turn(HOSTILE, "Noted.", turn_id="t2")
        ops = NeotomaMemory(store, conversation_id="ops-room")
        await ops.record_turn("Who owns certificates?", "The platform team.", turn_id="t1")
        await ops.remember("company", name="Halcyon Bio Inc", website="halcyonbio.com")


def _db(tmp_path: Path) -> Path:
    db = tmp_path / "memory.db"
    anyio.run(_seed, db)
    return db


def test_search_prints_where_each_hit_was_said_best_first(tmp_path: Path) -> None:
    db = _db(tmp_path)

    out = ok(cli("search", "certificates", "--db", str(db), home=tmp_path))

    assert UNSAFE.search(out) is None, repr(out)
    assert out.startswith("3 found for 'certificates' in ")
    assert "[1] " in out
    assert "deal-room  turn t1  user" in out
    assert "ops-room  turn t1  user" in out
    assert "    Rotate the TLS certificates\n" in out
    assert "\\x1b]0;PWNED\\x07" in out  # the hostile text, escaped
    company = ok(cli("search", "halcyonbio", "--db", str(db), home=tmp_path))
    assert "company " in company
    assert "    Halcyon Bio Inc\n    halcyonbio.com\n" in company
    nothing = ok(cli("search", "zeppelin", "--db", str(db), home=tmp_path))
    assert nothing.startswith("nothing found for 'zeppelin' in ")


def test_search_json_keeps_the_exact_text_and_takes_a_conversation_and_limit(
    tmp_path: Path,
) -> None:
    db = _db(tmp_path)

    out = ok(
        cli(
            "search",
            "certificates",
            "--conversation",
            "deal-room",
            "--limit",
            "1",
            "--json",
            "--db",
            str(db),
            home=tmp_path,
        )
    )

    answer = json.loads(out)
    assert answer["query"] == "certificates"
    assert answer["partial"] is False
    [hit] = answer["hits"]
    assert hit["conversation_id"] == "deal-room"
    assert hit["text"] in ("Rotate the TLS certificates", HOSTILE)  # exact, control bytes kept
    everything = json.loads(
        ok(cli("search", '"tls certificates"', "--json", "--db", str(db), home=tmp_path))
    )
    assert [h["text"] for h in everything["hits"]] == ["Rotate the TLS certificates"]


def test_a_bad_query_or_limit_is_a_one_line_error(tmp_path: Path) -> None:
    db = _db(tmp_path)

    assert_one_line_error(cli("search", "  ", "--db", str(db), home=tmp_path), "empty")
    assert_one_line_error(
        cli("search", "x", "--limit", "0", "--db", str(db), home=tmp_path), "limit"
    )
    # Any other text is a query: operators of a query language are plain characters.
    ok(cli("search", 'NEAR("x" -y*) AND :', "--db", str(db), home=tmp_path))


def test_search_runs_against_a_server_with_url(tmp_path: Path) -> None:
    db = _db(tmp_path)
    token = "s3cret-token-for-tests"
    with serving(db, tmp_path, token=token) as url:
        over_http = json.loads(
            ok(
                cli(
                    "search",
                    "certificates",
                    "--json",
                    "--url",
                    url,
                    "--token",
                    token,
                    home=tmp_path,
                )
            )
        )
    local = json.loads(ok(cli("search", "certificates", "--json", "--db", str(db), home=tmp_path)))
    assert over_http["hits"] == local["hits"]
