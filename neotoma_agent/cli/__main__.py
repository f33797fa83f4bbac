"""``python -m neotoma_agent.cli``: the same as the ``neotoma-agent`` console script."""

from __future__ import annotations

import sys

from ._main import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
