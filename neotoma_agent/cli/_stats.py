"""``neotoma-agent stats``: what the store holds, counted through the Transport."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any, TextIO

import attrs

from .._reads import scan_entities
from .._terminal import printer
from .._tools import TOOL_TYPE
from .._turn_record import ending_of
from ..transport._base import Transport
from ._common import USER_OPTION, Command, option, print_report

__all__ = ["StoreStats", "collect_stats", "register"]


@attrs.define
class StoreStats:
    """Entity counts by type and turn counts by status."""

    entities: int = 0
    by_type: Counter[str] = attrs.field(factory=Counter)
    turn_status: Counter[str] = attrs.field(factory=Counter)
    repaired: int = 0
    #: tool calls by (tool name, result status)
    tool_calls: Counter[tuple[str, str]] = attrs.field(factory=Counter)
    #: the server stopped paging before every entity was seen (counts are a lower bound)
    partial: bool = False

    @property
    def conversations(self) -> int:
        """Conversation entities."""
        return self.by_type["conversation"]

    @property
    def turns(self) -> int:
        """Turn records (one per turn the protocol stored)."""
        return self.by_type["conversation_turn"]

    def to_json(self) -> dict[str, Any]:
        """The JSON form ``stats --json`` prints."""
        return {
            "entities": self.entities,
            "entities_by_type": dict(sorted(self.by_type.items())),
            "conversations": self.conversations,
            "turns": self.turns,
            "turns_by_status": dict(sorted(self.turn_status.items())),
            "abandoned_turns": self.turn_status["abandoned"],
            "repaired_turns": self.repaired,
            "open_turns": self.turn_status["open"],
            "tool_calls": sum(self.tool_calls.values()),
            "tool_calls_by_tool": self.calls_by_tool(),
            "partial": self.partial,
        }

    def calls_by_tool(self) -> dict[str, dict[str, int]]:
        """``{tool: {status: count}}``, sorted by name."""
        by_tool: dict[str, dict[str, int]] = {}
        for (name, status), count in sorted(self.tool_calls.items()):
            by_tool.setdefault(name, {})[status] = count
        return by_tool


async def collect_stats(transport: Transport) -> StoreStats:
    """Page through every entity once and count.

    A server that caps how deep offsets go gets counts of what it gave, marked as partial.
    """
    scan = await scan_entities(transport)
    stats = StoreStats(entities=max(scan.total, len(scan.entities)), partial=scan.partial)
    for entity in scan.entities:
        stats.by_type[entity.entity_type] += 1
        if entity.entity_type == "conversation_turn":
            status = entity.snapshot.get("status")
            stats.turn_status[str(status) if status else "unknown"] += 1
            # Declared fields only: no observation read per turn (a count needs no detail).
            stats.repaired += ending_of(entity.snapshot).repaired
        elif entity.entity_type == TOOL_TYPE:
            name, status = entity.snapshot.get("tool_name"), entity.snapshot.get("result_status")
            stats.tool_calls[(str(name or ""), str(status or "unknown"))] += 1
    return stats


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
