"""``python -m neotoma_agent``: the ``neotoma-agent`` command line."""

from __future__ import annotations

import sys

from neotoma_agent.cli import main

if __name__ == "__main__":
    sys.exit(main())
