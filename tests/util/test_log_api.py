"""``neotoma_agent.log``: a tool built on the library logs through the library's one logger."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

from cli_support import clean_env

import neotoma_agent.log
from neotoma_agent.log import LOGGER_NAME, EventLogger, get_logger


def test_an_event_reaches_the_standard_logger_named_logger_name(tmp_path: Path) -> None:
    # A fresh interpreter: in this one an earlier test may have configured structlog (the
    # command line does, run in process), which then receives the events instead.
    program = (
        "import json, logging\n"
        "from neotoma_agent.log import LOGGER_NAME, get_logger\n"
        "seen = []\n"
        "class Keep(logging.Handler):\n"
        "    def emit(self, record):\n"
        "        seen.append([record.name, record.levelno, record.getMessage(),\n"
        "                     record.neotoma_event, record.neotoma_fields])\n"
        "logger = logging.getLogger(LOGGER_NAME)\n"
        "logger.addHandler(Keep())\n"
        "logger.setLevel(logging.INFO)\n"
        "get_logger().info('import.batch_done', turns=256, source='claude')\n"
        "print(json.dumps(seen))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        env=clean_env(tmp_path),
        timeout=60,
        check=True,
    )
    assert LOGGER_NAME == "neotoma_agent"
    assert json.loads(done.stdout) == [
        [
            "neotoma_agent",
            logging.INFO,
            "import.batch_done turns=256 source='claude'",
            "import.batch_done",
            {"turns": 256, "source": "claude"},
        ]
    ]


def test_it_is_the_logger_the_library_logs_its_own_events_with() -> None:
    from neotoma_agent._util import log as _log

    assert isinstance(get_logger(), EventLogger)
    assert get_logger() is _log.get_logger()
    assert LOGGER_NAME == _log.LOGGER_NAME


def test_an_unconfigured_program_prints_nothing_below_warning(tmp_path: Path) -> None:
    program = (
        "from neotoma_agent.log import get_logger\n"
        "log = get_logger()\n"
        "log.debug('tool.debug', n=1)\n"
        "log.info('tool.info', n=2)\n"
        "log.warning('tool.warning', n=3)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        env=clean_env(tmp_path),
        timeout=60,
        check=True,
    )
    assert done.stdout == ""
    assert done.stderr == "tool.warning n=3\n"


def test_help_names_the_public_module() -> None:
    assert EventLogger.__module__ == neotoma_agent.log.__name__
    assert get_logger.__module__ == neotoma_agent.log.__name__
