"""``neotoma-agent stats``: what the store holds (:func:`neotoma_agent.reads.collect_stats`)."""

from __future__ import annotations

import argparse
from typing import TextIO

from ..reads import StoreStats, collect_stats, printer
from ._common import USER_OPTION, Command, option, print_report

__all__ = ["register", "render_stats"]


def render_stats(stats: StoreStats, out: TextIO, where: str) -> None:
    """The human-readable counts."""
    write = printer(out)  # stored text: never raw control sequences
    write(f"store: {where}\n")
    seen = sum(stats.by_type.values())
    note = f" (counted {seen:,}: the server limits paging)" if stats.partial else ""
    write(f"entities: {stats.entities:,}{note}\n")
    if stats.by_type:
        width = max(len(t) for t in stats.by_type)
        for entity_type, count in sorted(stats.by_type.items()):
            write(f"  {entity_type:<{width}}  {count:>8,}\n")
    write(f"conversations: {stats.conversations:,}\n")
    statuses = ", ".join(
        f"{count:,} {status}" for status, count in sorted(stats.turn_status.items())
    )
    write(f"turns: {stats.turns:,}" + (f" ({statuses})" if statuses else "") + "\n")
    abandoned = stats.turn_status["abandoned"]
    repaired = f" ({stats.repaired:,} closed by audit --repair)" if stats.repaired else ""
    write(f"abandoned turns: {abandoned:,}{repaired}\n")
    if stats.turn_status["open"]:
        write(
            f"open turns: {stats.turn_status['open']:,} (in flight, or left open by a crash: "
            "see `neotoma-agent audit`)\n"
        )
    calls = stats.calls_by_tool()
    if calls:
        write(f"tool calls: {sum(stats.tool_calls.values()):,}\n")
        width = max(len(tool) for tool in calls)
        for tool, by_status in calls.items():
            counts = ", ".join(f"{n:,} {status}" for status, n in by_status.items())
            write(f"  {tool:<{width}}  {counts}\n")


async def run(args: argparse.Namespace) -> int:
    """Print the counts."""
    await print_report(args, collect_stats, render_stats)
    return 0


COMMAND = Command(
    "stats",
    help="count entities by type, conversations, turns, abandoned turns and tool calls",
    description="""
        Count what the store holds: entities by type, conversations, turns by status
        (completed, abandoned, open), abandoned turns, and tool calls by tool and status.
    """,
    run=run,
    options=(option("--json", action="store_true", help="print JSON"), USER_OPTION),
)
register = COMMAND.register
