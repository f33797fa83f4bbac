"""``neotoma-agent audit``: find the turns a crash left half-stored, and close them.

Exit status 0 when no problem remains, 1 when one does (after ``--repair``, if given), so
the command can gate a deploy or a CI job.
"""

from __future__ import annotations

import argparse
import functools
from typing import TextIO

from ..qa import (
    AUDIT_CLOSE_TIMEOUT,
    AUDIT_DEFAULT_MIN_AGE,
    AUDIT_REPLY_MARGIN,
    AuditReport,
    Finding,
    audit,
)
from ..reads import printer
from ._common import USER_OPTION, CLIError, Command, option, plural, print_report

__all__ = ["register", "render_audit", "run"]

_SEVERITY_LABEL = {"error": "ERROR", "warn": "WARN ", "info": "info "}


def _ids(finding: Finding) -> str:
    parts = []
    for label, value in (
        ("user", finding.user_message_id),
        ("reply", finding.assistant_message_id),
        ("record", finding.turn_record_id),
    ):
        if value:
            parts.append(f"{label} {value}")
    return f" [{', '.join(parts)}]" if parts else ""


def render_audit(report: AuditReport, out: TextIO, where: str) -> None:
    """The human-readable audit: what was read, each problem, the repairs, the verdict."""
    write = printer(out)  # stored text: never raw control sequences
    scope = f" (conversation {report.conversation_id})" if report.conversation_id else ""
    since = f", since {report.since}" if report.since else ""
    write(
        f"audited {where}{scope}{since}: {plural(report.conversations, 'conversation')}, "
        f"{plural(report.turns, 'turn')}, {plural(report.messages, 'message')} "
        f"in {report.duration_ms / 1000:.2f} s\n"
    )
    for f in report.problems:
        write(
            f"  {_SEVERITY_LABEL[f.severity]}  {f.kind.value}  {f.conversation_id} / "
            f"{f.turn_id}: {f.message}{_ids(f)}\n"
        )
    abandoned = report.abandoned
    if abandoned:
        repaired = sum(1 for f in abandoned if f.repaired)
        note = f" ({repaired:,} closed by audit --repair)" if repaired else ""
        write(f"  info   {plural(len(abandoned), 'abandoned turn')}{note}\n")
    if report.skipped_recent:
        write(
            f"  info   {plural(report.skipped_recent, 'open turn')} skipped: "
            f"{report.skipped_reason} (audit again later, or pass --min-age 0 if "
            "no agent is running)\n"
        )
    for result in report.repairs:
        for outcome in result.outcomes:
            if outcome.action is None:
                continue
            verdict = {"applied": "repaired", "replayed": "already repaired"}.get(
                outcome.status, outcome.status
            )
            detail = f": {outcome.error}" if outcome.error else ""
            record = (
                f" [neotoma_repair {result.repair_entity_id}]" if result.repair_entity_id else ""
            )
            write(
                f"  {verdict}  {result.conversation_id} / {result.turn_id}: "
                f"{outcome.action.describe()}{detail}{record}\n"
            )
    if report.partial:
        write(
            "partial: the server would not page through every entity, so some turns were "
            "not examined (audit one --conversation at a time, or the store file directly)\n"
        )
    if report.clean:
        # Skipped turns are not known to be broken, so they do not fail the audit.
        but = " but the skipped" if report.skipped_recent else ""
        write(f"clean: every turn{but} has both halves or is closed as abandoned\n")
        return
    n = len(report.remaining)
    if not n:
        return
    repairable = sum(1 for f in report.remaining if f.repair is not None)
    hint = ""
    if repairable and not report.repairs:
        hint = f" ({repairable:,} repairable: run again with --repair)"
    write(f"{plural(n, 'problem')} remain{'s' if n == 1 else ''}{hint}\n")


async def run(args: argparse.Namespace) -> int:
    """Audit the store; 0 when clean, 1 when problems remain."""
    if args.min_age < 0:
        raise CLIError("--min-age must be >= 0 seconds")
    read = functools.partial(
        audit,
        conversation_id=args.conversation,
        since=args.since,
        repair=args.repair,
        min_age=args.min_age,
        thorough=args.thorough,
    )
    report = await print_report(args, read, render_audit, read_only=not args.repair)
    return 0 if report.clean else 1


COMMAND = Command(
    "audit",
    help="find turns a crash left half-stored (orphans); --repair closes them",
    description="""
        Read the store back and find every turn that broke 'both halves or neither': user
        messages whose turn was never closed (orphans, as a crash or kill leaves), replies
        without their question, turn records without messages, messages outside any
        conversation. --repair records each orphan as abandoned (reason
        orphan_found_by_audit), idempotently; no reply is ever invented. Open turns younger
        than --min-age are left alone, and counted: they may still be running. The audit
        reads only the store: it knows nothing of an outbox, and a turn whose closing store
        is still queued in one looks open (an orphan) until `neotoma-agent outbox flush`
        delivers it. Exit status 1 when problems remain.
    """,
    run=run,
    options=(
        USER_OPTION,
        option("--conversation", metavar="ID", help="audit one conversation only"),
        option("--since", metavar="TIME", help="only turns written at or after this ISO 8601 time"),
        option("--repair", action="store_true", help="close what can be closed"),
        option(
            "--min-age",
            type=float,
            default=AUDIT_DEFAULT_MIN_AGE,
            metavar="SECONDS",
            help="leave open turns younger than this alone and report them as skipped: they "
            f"may still be running (default {AUDIT_DEFAULT_MIN_AGE:g}: the library's "
            f"{AUDIT_CLOSE_TIMEOUT:g} s close_timeout for the closing store, plus "
            f"{AUDIT_REPLY_MARGIN / 60:g} minutes for an agent still writing its reply, during "
            "which a turn writes nothing); 0 audits "
            "every turn, for a store no agent is writing to",
        ),
        option(
            "--thorough",
            action="store_true",
            help="also read every message (finds messages other clients wrote with no turn "
            "record and no conversation)",
        ),
        option("--json", action="store_true", help="print the report as JSON"),
    ),
)
register = COMMAND.register
