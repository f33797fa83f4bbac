"""``neotoma-agent hook HARNESS EVENT`` and ``neotoma-agent hooks install|uninstall|status``.

Only the command wrappers: what a hook does lives in :mod:`neotoma_agent.hooks`. ``hook``
always exits 0 (a coding agent must never be blocked by its memory): its answer goes to
stdout, a problem to stderr as one line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ._common import (
    USER_OPTION,
    CLIError,
    Command,
    db_path,
    given_user,
    option,
    resolve_token,
    resolve_url,
)
from ._core import printable
from ._paths import private_parent

if TYPE_CHECKING:
    from ..hooks import Change

__all__ = ["HOOK", "HOOKS", "default_state_path", "hook_files", "register"]

_HARNESSES = ("claude-code", "codex", "cursor")


def default_state_path() -> Path:
    """``$NEOTOMA_AGENT_HOOK_STATE``, else ``neotoma-agent/hooks-state.db`` in the data dir."""
    env = os.environ.get("NEOTOMA_AGENT_HOOK_STATE")
    if env:
        return Path(env).expanduser()
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "neotoma-agent" / "hooks-state.db"


def _user_tag(user: str | None) -> str:
    """The part of a hook file's name that says whose it is: a digest of the user id (a
    file name never holds the id itself), or nothing for the default user."""
    if user is None:
        return ""
    import hashlib

    return ".user-" + hashlib.sha256(user.encode()).hexdigest()[:16]


def _state_path(args: argparse.Namespace) -> Path:
    """The hooks' state file: ``--state`` (else :func:`default_state_path`), or with
    ``--user`` that user's own file beside it, so that one user's prompts, replies and tool
    calls never share a file with another's (``forget --user --purge`` removes it)."""
    state = getattr(args, "state", None)
    path = Path(state).expanduser() if state else default_state_path()
    tag = _user_tag(given_user(args))
    return path.with_name(f"{path.stem}{tag}{path.suffix}") if tag else path


def hook_files(args: argparse.Namespace) -> tuple[Path, Path]:
    """The hooks' state file and outbox file for ``args`` (``--state``, ``--user``)."""
    state = _state_path(args)
    return state, state.with_name(f"hooks-outbox{_user_tag(given_user(args))}.db")


def run_hook_command(args: argparse.Namespace) -> int:
    """One hook event: stdin in, the harness's answer out; exit status 0 whatever happens."""
    # A fresh process per event: only the module that runs one (not install, backfill);
    # the hooks package resolves these three from it on first use.
    from ..hooks import HARNESSES, StoreSpec, run_hook

    label = f"neotoma-agent hook {printable(args.harness)} {printable(args.event)}"
    try:
        # No stdin at all (its descriptor closed: ``sys.stdin`` is None) reads as empty.
        raw = b"" if sys.stdin is None else sys.stdin.buffer.read(32 * 1024 * 1024 + 1)
    except (OSError, ValueError):
        raw = b""
    if args.harness not in HARNESSES:
        print(f"{label}: unknown harness (known: {', '.join(HARNESSES)})", file=sys.stderr)
        return 0
    try:
        url = resolve_url(args)
        state, outbox = hook_files(args)
        user = given_user(args)
        spec = (
            StoreSpec(url=url, token=resolve_token(args, url=url), outbox=outbox, user=user)
            if url
            else StoreSpec(db=db_path(args), user=user)
        )
    except CLIError as exc:
        print(f"{label}: {exc.message}", file=sys.stderr)
        return 0
    # The state holds prompts and replies: the data directory it is in is owner-only.
    with contextlib.suppress(OSError):
        private_parent(state)
    outcome = run_hook(
        args.harness,
        args.event,
        raw,
        store=spec,
        state_path=state,
        context_chars=args.context_chars,
        timeout=args.timeout,
    )
    if outcome.stdout is not None:
        sys.stdout.write(outcome.stdout + "\n")
        sys.stdout.flush()
    if outcome.problem:
        print(f"{label}: {printable(outcome.problem)}", file=sys.stderr)
    return 0


HOOK = Command(
    "hook",
    help="handle one coding-agent hook event (what `hooks install` registers)",
    description="""
        Read one hook input (JSON) on stdin from Claude Code, Codex or Cursor, store what it
        says in the store (--db, or --url/--token), and print the answer the harness
        honours (the turn's context on a submitted prompt). Always exits 0; a problem is
        one line on stderr. Installed by `neotoma-agent hooks install HARNESS`.
    """,
    run=run_hook_command,
    default_log_level="critical",
    options=(
        USER_OPTION,
        option("harness", metavar="HARNESS", help="claude-code, codex or cursor"),
        option("event", metavar="EVENT", help="the harness's event name, e.g. Stop"),
        option(
            "--state",
            metavar="PATH",
            help="the hooks' shared state file (default: $NEOTOMA_AGENT_HOOK_STATE, else "
            "hooks-state.db in the per-user data directory)",
        ),
        option(
            "--context-chars",
            type=int,
            default=4000,
            metavar="N",
            help="budget of the context block given with a prompt (0: none; default 4000)",
        ),
        option(
            "--timeout",
            type=float,
            default=10.0,
            metavar="SECONDS",
            help="answer within this long whatever the store does (default 10)",
        ),
    ),
)


def _project(args: argparse.Namespace) -> Path:
    return Path(args.project).expanduser().resolve() if args.project else Path.cwd()


def run_hooks_command(args: argparse.Namespace) -> int:
    """``hooks install|uninstall|status HARNESS``."""
    from ..hooks import HookState, InstallError, harness_module, install, installed, uninstall

    module = harness_module(args.harness)
    path = module.settings_path(args.scope, _project(args))
    # A project's file must stay in the project (a clone may hold planted symbolic links).
    project = _project(args) if args.scope == "project" else None
    try:
        if args.action == "install":
            # An older install's --token is moved out of the user's file (never a project's:
            # it is not read through links there).
            existing = installed(args.harness, path) if args.scope == "user" else {}
            store_args = _store_args(args, existing)
            change = install(args.harness, path, store_args, python=sys.executable, project=project)
            if _print_change(args.harness, change, "hooks already installed in"):
                print(f"store: {_store_label(store_args)}")
                if args.harness == "codex":
                    # Codex skips a hook from hooks.json until the person trusts it.
                    print("codex: review and trust these hooks in Codex (/hooks) to turn them on")
                    if args.scope == "project":
                        # And a project's .codex/hooks.json is read at all only in a
                        # project Codex trusts: else the hooks never run, silently.
                        print(
                            "codex: Codex reads .codex/hooks.json only in a trusted project "
                            '(trust_level = "trusted" for it in ~/.codex/config.toml; Codex '
                            "asks when it first opens the folder)"
                        )
            return 0
        if args.action == "uninstall":
            change = uninstall(args.harness, path, project=project)
            _print_change(args.harness, change, "no neotoma-agent hooks in")
            return 0
        ours = installed(args.harness, path)
    except InstallError as exc:
        raise CLIError(str(exc)) from None
    state = _state_path(args)
    fired: dict[str, tuple[float, int, int]] = {}
    counts = {"open": 0, "undelivered": 0, "done": 0}
    if state.exists():
        with HookState(state) as s:
            fired, counts = s.last_fired(args.harness), s.counts(args.harness)
    report = {
        "harness": args.harness,
        "settings": str(path),
        "installed": [e for e in module.EVENTS if e in ours],
        "missing": [e for e in module.EVENTS if e not in ours],
        "state": str(state),
        "events": {
            e: {"last_fired": _iso(fired[e][0]), "runs": fired[e][1], "problems": fired[e][2]}
            for e in module.EVENTS
            if e in fired
        },
        "turns": counts,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    word = "installed" if not report["missing"] else "partly installed" if ours else "not installed"
    print(f"{args.harness}: hooks {word} in {path}")
    for event in module.EVENTS:
        mark = "yes" if event in ours else "no "
        seen = report["events"].get(event)
        last = f"last fired {seen['last_fired']} ({seen['runs']} runs" if seen else "never fired"
        if seen:
            last += f", {seen['problems']} with a problem)" if seen["problems"] else ")"
        print(f"  {mark} {event:<20} {last}")
    print(
        f"turns: {counts['open']} open, {counts['undelivered']} waiting for the store, "
        f"{counts['done']} stored"
    )
    if args.harness == "codex" and ours and not fired:
        print("never fired: Codex skips hooks until they are trusted in its /hooks")
    return 0


def _iso(unix: float) -> str:
    import datetime as _dt

    return _dt.datetime.fromtimestamp(unix, tz=_dt.timezone.utc).isoformat(timespec="seconds")


def _print_change(harness: str, change: Change, unchanged: str) -> bool:
    """Print what an install or uninstall did; whether it wrote the file."""
    if not change.changed:
        print(f"{harness}: {unchanged} {change.path}; nothing changed")
        return False
    for event, what in change.events:
        print(f"{what} {event}")
    backup = f" (backup: {change.backup})" if change.backup else ""
    print(f"{harness}: wrote {change.path}{backup}")
    return True


def _store_args(args: argparse.Namespace, existing: dict[str, str]) -> list[str]:
    """The store the installed hooks name, fixed now (the harness's environment may differ).

    A token never goes into the command (argv is readable by every account, the settings
    file may be shared): ``--token`` is kept in a 0600 token file the command names, a
    ``--token-file`` is named as it is; else the hook reads ``$NEOTOMA_TOKEN`` or the
    token file of a server this account started on loopback. Run again at user scope with
    neither, for the same ``--url``: the token file the installed commands name stays
    named, and a ``--token`` still in them (an older version's install) moves to a file.
    """
    url = resolve_url(args)
    extra: list[str] = []
    user = given_user(args)
    if user is not None:
        extra += ["--user", user]
    if args.state:
        extra += ["--state", str(Path(args.state).expanduser().resolve())]
    if args.context_chars is not None:
        extra += ["--context-chars", str(args.context_chars)]
    if not url:
        return ["--db", str(db_path(args).resolve()), *extra]
    token = getattr(args, "token", None)
    token_file = getattr(args, "token_file", None)
    if token and args.scope == "project":
        raise CLIError(
            "refusing to write a token into the project's hook settings: they are shared "
            "(committed, read by everyone who clones the project)",
            "drop --token: set $NEOTOMA_TOKEN where the agent runs, or pass --token-file",
        )
    if not token and not token_file and args.scope == "user":
        # What the install being replaced used for this url: its token file stays named,
        # an older version's --token moves out of the command.
        kept = _kept_token(existing.values(), url)
        if kept and kept[0] == "--token-file":
            token_file = kept[1]
        elif kept:
            token = kept[1]
    if token_file:
        return ["--url", url, "--token-file", str(Path(token_file).expanduser().resolve()), *extra]
    if token:
        from ._tokens import TokenFileError, token_dir, write_token_file

        try:
            path = write_token_file(token_dir() / f"hooks-{args.harness}", token)
        except (OSError, TokenFileError) as exc:
            raise CLIError(f"cannot keep the token in a file: {exc}") from None
        return ["--url", url, "--token-file", str(path), *extra]
    return ["--url", url, *extra]


def _kept_token(commands: Iterable[str], url: str) -> tuple[str, str] | None:
    """``("--token-file", PATH)`` or ``("--token", VALUE)``, as the first of ``commands``
    that names one for ``url`` has it (a token is never carried over to another server)."""
    import itertools
    import shlex

    for command in commands:
        try:
            words = shlex.split(command)
        except ValueError:
            continue
        found = dict(itertools.pairwise(words))
        if found.get("--url") != url:
            continue
        for name in ("--token-file", "--token"):
            if found.get(name):
                return name, found[name]
    return None


def _store_label(store_args: list[str]) -> str:
    if "--url" in store_args:
        url = store_args[store_args.index("--url") + 1]
        if "--token-file" in store_args:
            where = f"token in {store_args[store_args.index('--token-file') + 1]}"
        else:
            where = "token from $NEOTOMA_TOKEN or the local server's token file"
        return f"{url} ({where})"
    return store_args[store_args.index("--db") + 1]


def run_backfill(args: argparse.Namespace) -> int:
    """``import --from HARNESS PATH``: a harness's session files as turns; 0 when all stored."""
    from ..hooks import backfill
    from ._common import open_transport, run_async

    path = Path(args.file).expanduser()
    if not path.exists():
        raise CLIError(f"cannot read {path}: not found", "pass a session file or a folder of them")

    async def go() -> int:
        async with open_transport(args) as transport:
            report = await backfill(transport, args.source, path)
        skipped = ", ".join(f"{n} {kind}" for kind, n in sorted(report.skipped.items()))
        print(
            f"{args.source}: {report.files} session files: {report.stored} turns stored, "
            f"{report.abandoned} stored as abandoned (no reply), {report.already} already "
            f"stored, {report.in_progress} still running (not stored)"
        )
        if report.partials:
            print(f"{report.partials} abandoned turns given the partial reply the file holds")
        if report.refused or report.bad_lines:
            print(
                f"{report.refused} turns refused by the store, {report.bad_lines} unreadable lines"
            )
        print(f"line kinds skipped: {skipped or 'none'}")
        return 1 if report.bad_lines or report.refused else 0

    return int(run_async(go))


HOOKS = Command(
    "hooks",
    help="install, remove or check the coding-agent hooks (Claude Code, Codex, Cursor)",
    description="""
        install: add `neotoma-agent hook` for every event the harness needs to its settings
        (other hooks kept, a backup of the old file made, a second install changes
        nothing), naming the store (--db, or --url; a --token is kept in a 0600 file the
        command names, never in the command; refused with --scope project). uninstall:
        remove them.
        status: whether they are installed and when each last fired.
    """,
    run=run_hooks_command,
    options=(
        USER_OPTION,
        option("action", choices=("install", "uninstall", "status")),
        option("harness", choices=_HARNESSES),
        option(
            "--scope",
            choices=("user", "project"),
            default="user",
            help="the user's settings (default) or the project's",
        ),
        option("--project", metavar="DIR", help="the project for --scope project (default: .)"),
        option("--state", metavar="PATH", help="the hooks' state file (written in the command)"),
        option(
            "--context-chars",
            type=int,
            default=None,
            metavar="N",
            help="context budget the hooks give a prompt (default 4000)",
        ),
        option("--json", action="store_true", help="status as JSON"),
    ),
)
register = HOOK.register
