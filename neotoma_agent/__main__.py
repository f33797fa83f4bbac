"""``python -m neotoma_agent``: the ``neotoma-agent`` command line."""

from __future__ import annotations

import gc
import sys

if __name__ == "__main__" and sys.argv[1:2] == ["hook"]:
    # What `hooks install` registers: a coding agent starts `python -m neotoma_agent hook`
    # as a fresh process per event, and that process's work is mostly its imports. The
    # cyclic collector's passes over what they allocate free nothing (modules, classes and
    # functions live until the exit): off for the event, from before the first import
    # (refcounting still frees what the event drops; the process ends with the event).
    gc.disable()

from neotoma_agent.cli import console_main  # after the collector is set

if __name__ == "__main__":
    console_main()
