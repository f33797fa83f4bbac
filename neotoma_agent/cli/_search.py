"""``neotoma-agent search``: what was said, found by its words, best match first.

Read through :meth:`NeotomaMemory.search <neotoma_agent.NeotomaMemory.search>`'s code, so
it works on a store file (its full-text index) and on a server alike (the dev server's
index; a real Neotoma server's own search, as far as it reaches: ``partial`` says when it
could not look at everything).
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from .. import SearchHit, SearchHitKind, SearchResult
from ..reads import printer
from ._common import USER_OPTION, CLIError, Command, open_transport, option, print_json, store_label

__all__ = ["register", "render_hits"]

#: the most characters of a hit's text the human-readable output shows (``--json``: all)
SHOWN = 300


def _head(hit: SearchHit) -> str:
    if hit.kind is SearchHitKind.ENTITY:
        return f"{hit.entity_type} {hit.name or hit.entity_id}"
    parts = [hit.conversation_id or "(no conversation)"]
    if hit.turn_id:
        parts.append(f"turn {hit.turn_id}")
    if hit.role:
        parts.append(hit.role)
    return "  ".join(parts)


def render_hits(result: SearchResult, out: TextIO, where: str, query: str) -> None:
    """The hits, best first: where each was said, then its text (cut at :data:`SHOWN`)."""
    write = printer(out)  # stored text: never raw control sequences
    note = " (the server could not look at everything: some may be missing)"
    partial = note if result.partial else ""
    if not result.hits:
        write(f"nothing found for {query!r} in {where}{partial}\n")
        return
    write(f"{len(result.hits)} found for {query!r} in {where}, best first{partial}:\n")
    for n, hit in enumerate(result.hits, 1):
        write(f"[{n}] {_head(hit)}  (score {hit.score:.3g})\n")
        text = hit.text if len(hit.text) <= SHOWN else hit.text[:SHOWN] + "…"
        for line in text.splitlines() or [""]:
            write(f"    {line}\n")


async def run(args: argparse.Namespace) -> int:
    """Print the hits."""
    from ..exceptions import EmptySearchQueryError
    from ..reads import search

    async with open_transport(args, must_exist=True, read_only=True) as transport:
        try:
            result = await search(
                transport, args.query, limit=args.limit, conversation_id=args.conversation
            )
        except EmptySearchQueryError:
            raise CLIError("the query is empty", "give at least one word to search for") from None
        except ValueError as exc:  # a --limit out of range (the message names the bounds)
            raise CLIError(str(exc)) from None
    if args.json:
        print_json({"store": store_label(args), "query": args.query, **result.to_json()})
    else:
        render_hits(result, sys.stdout, store_label(args), args.query)
    return 0


COMMAND = Command(
    "search",
    help="find what was said: messages (and entities) holding every word, best first",
    description="""
        Search every stored message, and the text fields of the entities, for QUERY:
        whole words, case and accents ignored, every word must be there; "double quotes"
        mark a phrase. QUERY is plain text: no character of it is an operator. Hits come
        best first (BM25), each with its conversation, turn and role.
    """,
    run=run,
    options=(
        USER_OPTION,
        option("query", metavar="QUERY", help="the words to find (quote a phrase)"),
        option("--conversation", metavar="ID", help="search this conversation's messages only"),
        option(
            "--limit", type=int, default=10, metavar="N", help="at most N hits (1-100, default 10)"
        ),
        option("--json", action="store_true", help="print JSON (exact text)"),
    ),
)
register = COMMAND.register
