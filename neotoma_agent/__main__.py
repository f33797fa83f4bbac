"""``python -m neotoma_agent``: the ``neotoma-agent`` command line."""

from __future__ import annotations

from neotoma_agent.cli import console_main

if __name__ == "__main__":
    console_main()
