"""Importing an integration without its framework names the extra to install."""

from __future__ import annotations

import importlib
import sys

import pytest


@pytest.mark.parametrize(
    ("module", "framework_module", "extra"),
    [
        ("neotoma_agent.integrations.langgraph", "langchain_core.messages", "langchain"),
        ("neotoma_agent.integrations.claude_agent_sdk", "claude_agent_sdk", "claude-agent-sdk"),
    ],
)
def test_an_integration_without_its_framework_names_its_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, framework_module: str, extra: str
) -> None:
    # A None entry in sys.modules makes importing that module raise ImportError, as an
    # absent package does.
    monkeypatch.setitem(sys.modules, framework_module, None)
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ImportError, match=rf"pip install 'neotoma-agent\[{extra}\]'") as caught:
        importlib.import_module(module)
    assert caught.value.name == module
