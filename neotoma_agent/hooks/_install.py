"""``hooks install | uninstall | status``: our entries in a harness's settings file.

Claude Code (``settings.json``) and Codex (``hooks.json``) share one shape::

    {"hooks": {"Stop": [{"matcher": "...", "hooks": [{"type": "command", "command": "..."}]}]}}

and Cursor has its own (``{"version": 1, "hooks": {"stop": [{"command": "..."}]}}``). An
entry is ours when its command runs ``neotoma_agent hook`` / ``neotoma-agent hook``; nothing
else in the file is touched, its key order included. A change is written atomically
(a temporary file renamed over the old one) after a backup of the old file beside it
(``*.neotoma-agent.bak``, then ``*.neotoma-agent.1.bak``, ...: none is overwritten, each
0600: a settings file may hold secrets); an install that would change nothing writes nothing.
A backup is the old file byte for byte, except that ``--token VALUE`` in our own commands
(an older version's install put it there) is left out of it.

A project's settings file is refused when it, or a directory between the project and it,
is a symbolic link, or when it resolves outside the project: a cloned repository could
otherwise point ``.codex/hooks.json`` at ``~/.codex/auth.json`` and have the secret copied
into the project (and its backup), ready to be committed. A user's settings file that is a
symbolic link (dotfiles kept elsewhere) is written through, at its target.
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from ..files import write_private
from ._event import json_object
from ._run import harness_module

__all__ = ["Change", "InstallError", "hook_command", "install", "installed", "uninstall"]

#: Claude Code's per-hook time limit, seconds (the hook bounds itself well below it)
_CLAUDE_TIMEOUT: Final = 30
BACKUP_SUFFIX: Final = ".neotoma-agent.bak"


class InstallError(Exception):
    """The settings file cannot be changed safely (it is not the JSON we expect)."""


@attrs.frozen
class Change:
    """What an install or uninstall did to one settings file."""

    path: Path
    #: ``(event, "added" | "updated" | "removed")``, in the harness's event order
    events: tuple[tuple[str, str], ...]
    backup: Path | None

    @property
    def changed(self) -> bool:
        """Whether the file was written."""
        return bool(self.events)


def hook_command(harness: str, event: str, store_args: Sequence[str], python: str) -> str:
    """The shell command a harness runs for ``event``: this interpreter, our module."""
    argv = [python, "-m", "neotoma_agent", "hook", harness, event, *store_args]
    return " ".join(shlex.quote(a) for a in argv)


def _is_ours(command: object) -> bool:
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    for i, word in enumerate(words[:-1]):
        if words[i + 1] == "hook" and (
            word == "neotoma_agent" or os.path.basename(word) == "neotoma-agent"
        ):
            return True
    return False


def _load(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        return {}
    try:
        data = json_object(text)
    except ValueError as exc:
        raise InstallError(f"{path} is {exc}; fix or move it, then run this again") from None
    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict) or any(not isinstance(v, list) for v in hooks.values()):
        raise InstallError(f"{path}: 'hooks' is not an object of lists; not changing it")
    return data


def _ours_by_event(harness: str, data: dict[str, Any]) -> dict[str, str]:
    """``{event: our command}`` as the file has them."""
    found: dict[str, str] = {}
    for event, entries in data.get("hooks", {}).items():
        for entry in entries:
            for handler in _handlers(harness, entry):
                if _is_ours(handler.get("command")):
                    found[event] = str(handler["command"])
    return found


def _handlers(harness: str, entry: object) -> list[dict[str, Any]]:
    if not isinstance(entry, dict):
        return []
    if harness == "cursor":
        return [entry]
    inner = entry.get("hooks")
    return [h for h in inner if isinstance(h, dict)] if isinstance(inner, list) else []


def _without_ours(harness: str, data: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(data)
    hooks = data.get("hooks")
    if not isinstance(hooks, dict):
        return data
    for event in list(hooks):
        kept = []
        for entry in hooks[event]:
            if harness == "cursor":
                if not (isinstance(entry, dict) and _is_ours(entry.get("command"))):
                    kept.append(entry)
                continue
            if isinstance(entry, dict) and isinstance(entry.get("hooks"), list):
                inner = [
                    h
                    for h in entry["hooks"]
                    if not (isinstance(h, dict) and _is_ours(h.get("command")))
                ]
                if not inner and entry["hooks"]:
                    continue  # the group held only our hook
                entry = {**entry, "hooks": inner}
            kept.append(entry)
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    if not hooks:
        del data["hooks"]
    return data


def _entry(harness: str, command: str) -> dict[str, Any]:
    if harness == "cursor":
        return {"command": command}
    handler: dict[str, Any] = {"type": "command", "command": command}
    if harness == "claude-code":
        handler["timeout"] = _CLAUDE_TIMEOUT
    return {"hooks": [handler]}


def _free_backup(path: Path) -> Path:
    """Where the backup of ``path`` goes: ``*.neotoma-agent.bak``, or when that exists the
    next ``*.neotoma-agent.N.bak``, so the file as it was before our first change is kept
    (an uninstall must not overwrite the backup its install made)."""
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    n = 0
    while os.path.lexists(backup):  # a dangling symbolic link is taken too
        n += 1
        backup = path.with_name(f"{path.name}{BACKUP_SUFFIX.removesuffix('.bak')}.{n}.bak")
    return backup


def _writable(path: Path, project: Path | None) -> Path:
    """The file to read and write for ``path``: checked against ``project`` when it is a
    project's, else through a symbolic link to its target."""
    if project is None:
        return Path(os.path.realpath(path)) if path.is_symlink() else path
    root = Path(os.path.realpath(project))
    absolute = Path(os.path.abspath(path))
    try:
        parts = absolute.relative_to(os.path.abspath(project)).parts
    except ValueError:
        raise InstallError(f"{path} is not inside the project {project}") from None
    step = Path(os.path.abspath(project))
    for part in parts:
        step = step / part
        if step.is_symlink():
            raise InstallError(
                f"{step} is a symbolic link: refusing to follow it out of a project's settings "
                "(remove the link, or install with --scope user)"
            )
    resolved = Path(os.path.realpath(absolute))
    if resolved != root and root not in resolved.parents:
        raise InstallError(f"{path} resolves to {resolved}, outside the project {root}")
    if absolute.exists() and not absolute.is_file():
        raise InstallError(f"{path} is not a regular file; not changing it")
    return absolute


def _without_tokens(harness: str, data: dict[str, Any]) -> dict[str, Any] | None:
    """``data`` with ``--token VALUE`` taken out of our commands (an older version put it
    there); None when none held one. A backup is written from this: the token must not
    outlive its command in a file beside the settings (a project's would be committed)."""
    data = copy.deepcopy(data)
    found = False
    for entries in data.get("hooks", {}).values():
        for entry in entries:
            for handler in _handlers(harness, entry):
                command = handler.get("command")
                if not _is_ours(command):
                    continue
                words = shlex.split(str(command))
                kept = _drop_token(words)
                if kept != words:
                    handler["command"] = shlex.join(kept)
                    found = True
    return data if found else None


def _drop_token(words: list[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word == "--token":
            skip = True
        elif not word.startswith("--token="):
            kept.append(word)
    return kept


def _write(
    harness: str, path: Path, old: dict[str, Any] | None, new: dict[str, Any]
) -> Path | None:
    path.parent.mkdir(parents=True, exist_ok=True)
    backup = None
    if old is not None and path.exists():
        backup = _free_backup(path)
        scrubbed = _without_tokens(harness, old)
        kept = path.read_bytes() if scrubbed is None else _dumps(scrubbed).encode()
        # Exclusive: never through a link planted at the backup's name, never over a backup.
        write_private(backup, kept, exclusive=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(_dumps(new))
        if path.exists():
            shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return backup


def _dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def install(
    harness: str,
    path: Path,
    store_args: Sequence[str],
    *,
    python: str,
    project: Path | None = None,
) -> Change:
    """Add (or update) our hook for every event the harness handles, in ``path``.

    With ``project`` (a project's settings), ``path`` must be a plain file (or missing)
    inside it, reached through no symbolic link: else :class:`InstallError`. Without it,
    a symbolic link at ``path`` is written through, at its target.
    """
    module = harness_module(harness)
    path = _writable(path, project)
    existed = path.exists()
    old = _load(path)
    before = _ours_by_event(harness, old)
    new = _without_ours(harness, old)
    if harness == "cursor":
        new.setdefault("version", 1)
    hooks = new.setdefault("hooks", {})
    commands = {e: hook_command(harness, e, store_args, python) for e in module.EVENTS}
    for event in module.EVENTS:
        hooks.setdefault(event, []).append(_entry(harness, commands[event]))
    events = tuple(
        (e, "added" if e not in before else "updated")
        for e in module.EVENTS
        if before.get(e) != commands[e]
    )
    events += tuple((e, "removed") for e in before if e not in module.EVENTS)
    if new == old:
        return Change(path, (), None)
    backup = _write(harness, path, old if existed else None, new)
    return Change(path, events, backup)


def uninstall(harness: str, path: Path, *, project: Path | None = None) -> Change:
    """Remove our hooks from ``path`` (other hooks and settings kept); ``project`` as for
    :func:`install`."""
    path = _writable(path, project)
    old = _load(path)
    before = _ours_by_event(harness, old)
    if not before:
        return Change(path, (), None)
    new = _without_ours(harness, old)
    backup = _write(harness, path, old, new)
    return Change(path, tuple((e, "removed") for e in before), backup)


def installed(harness: str, path: Path) -> dict[str, str]:
    """``{event: command}`` for our hooks in ``path`` (empty when none or no file)."""
    return _ours_by_event(harness, _load(path))
