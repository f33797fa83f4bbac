"""A network namespace of its own, holding only a loopback: where third-party programs run.

The real coding-agent programs (Claude Code, Codex) are run by the slow tests and the
recorders against a fake model API on 127.0.0.1. Settings can turn their own traffic off
only so far (Codex 0.171.0 resolves ``api.github.com`` at start-up whatever its config
says), so each runs inside a network namespace (``unshare -n``) whose only interface is
its own loopback: nothing it sends can leave the machine. The fake API serves from inside
the same namespace (its server thread enters it before it binds), so the program reaches
it on 127.0.0.1 as before, and nothing else::

    with NetworkNamespace() as ns:
        ns.enter()                      # this thread's sockets are the namespace's now
        subprocess.run(ns.command(["claude", "-p", "hi"]))   # runs inside it

A process (``unshare -n``, then a sleep) holds the namespace open; :meth:`enter` is
``setns(2)`` for the calling thread, :meth:`command` prefixes ``nsenter --net=``.
:func:`available` says whether this machine can make one (it needs user or network
namespaces the kernel lets us create, and ``unshare`` and ``nsenter`` from util-linux).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from typing import Final

__all__ = ["NetworkNamespace", "available"]

_CLONE_NEWNET: Final = 0x40000000

# The holder: brings its loopback up (SIOCSIFFLAGS, no `ip` needed), says so, then waits
# for its stdin to close (the test's end, or the test process dying).
_HOLDER: Final = """
import fcntl, socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, struct.pack("16sH", b"lo", 0)))[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", flags | 0x1))
print("up", flush=True)
sys.stdin.read()
"""


def available() -> str | None:
    """``None`` when a namespace can be made here; else why not (a skip reason)."""
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` (util-linux) to run the program in a network namespace"
    try:
        with NetworkNamespace():
            pass
    except (OSError, RuntimeError) as exc:
        return f"cannot make a network namespace here (`unshare -n`): {exc}"
    return None


class NetworkNamespace:
    """A fresh network namespace with its loopback up, until :meth:`close`."""

    def __init__(self) -> None:
        # `unshare -rn`: a user namespace too, so that it works without root where the
        # kernel allows unprivileged user namespaces; as root, `-n` alone.
        flags = ["-n"] if os.geteuid() == 0 else ["-r", "-n"]
        self._holder = subprocess.Popen(
            ["unshare", *flags, sys.executable, "-c", _HOLDER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self._holder.stdout is not None
        line = self._holder.stdout.readline()
        if line != b"up\n":
            self.close()
            raise RuntimeError("unshare -n did not start")
        self.path = f"/proc/{self._holder.pid}/ns/net"

    def enter(self) -> None:
        """Move the calling thread into the namespace (its new sockets are the
        namespace's; a listening socket made here serves the namespace's programs)."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setns(fd, _CLONE_NEWNET) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"setns: {os.strerror(errno)}")
        finally:
            os.close(fd)

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the namespace."""
        return ["nsenter", f"--net={self.path}", "--", *argv]

    def close(self) -> None:
        """Let the holder go (the namespace ends with its last process)."""
        holder = self._holder
        for stream in (holder.stdin, holder.stdout, holder.stderr):
            if stream is not None and not stream.closed:
                stream.close()
        try:
            holder.wait(10)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()

    def __enter__(self) -> NetworkNamespace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
