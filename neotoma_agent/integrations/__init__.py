"""Framework integrations: each module keeps the turn's guarantee inside one agent framework.

Each is imported only on use and needs its extra (an ``ImportError`` names it otherwise):

- ``neotoma_agent.integrations.pydantic_ai``: ``NeotomaCapability`` for Pydantic AI
  (``pip install 'neotoma-agent[pydantic-ai]'``, Python >= 3.11).
- ``neotoma_agent.integrations.openai_agents``: ``run`` / ``run_streamed`` around the OpenAI
  Agents SDK's ``Runner`` (``pip install 'neotoma-agent[openai-agents]'``).
- ``neotoma_agent.integrations.langgraph``: ``astream_turn`` / ``ainvoke_turn`` around any
  compiled LangGraph graph and ``NeotomaMiddleware`` for LangChain's ``create_agent``
  (``pip install 'neotoma-agent[langchain]'``, Python >= 3.11).
- ``neotoma_agent.integrations.claude_agent_sdk``: ``NeotomaClaude`` for the Claude Agent
  SDK (``pip install 'neotoma-agent[claude-agent-sdk]'``).

What they share lives here: :class:`NoFinalReply`, the error class a turn is abandoned with
when a run ends without a final reply.
"""

from __future__ import annotations

from ._common import NoFinalReply

__all__ = ["NoFinalReply"]
