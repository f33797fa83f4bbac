"""``python -m neotoma_agent.cli``: the same as the ``neotoma-agent`` console script."""

from __future__ import annotations

from ._main import console_main

if __name__ == "__main__":  # pragma: no cover
    console_main()
