"""The token every dev server in the tests runs with: a server always requires one."""

from __future__ import annotations

#: what ``create_app`` / ``create_ui_app`` get and every client of them sends
TOKEN = "tok-tests"
