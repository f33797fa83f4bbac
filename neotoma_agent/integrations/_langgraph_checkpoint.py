"""LangGraph's side of a turn that waits at ``interrupt()``: what rides in the checkpoint.

A checkpointed thread carries the turn it left open in its checkpoints' metadata (its id,
conversation id and user text; LangChain copies a run's metadata into every checkpoint it
writes), and the tool calls that turn made before the interrupt, so that a resumed run
finds them wherever it runs (another process, after a restart). ``langgraph.TurnStream``
reads and writes these through the functions here; the graph side stays in ``langgraph``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Final

from langgraph.checkpoint.base import BaseCheckpointSaver

from neotoma_agent import NeotomaMemory, ToolCall, Turn

__all__ = [
    "META_KEY",
    "has_checkpointer",
    "keep_calls",
    "pending_turn",
    "saved_state",
    "with_turn_metadata",
]

#: The checkpoint-metadata key that holds an interrupted turn's id; its conversation id and
#: user text sit beside it (checkpoint metadata keeps only flat str/number values).
META_KEY: Final = "neotoma_turn_id"
_META_CONVERSATION: Final = "neotoma_conversation_id"
_META_USER: Final = "neotoma_user_message"
#: the tool calls the turn made before the interrupt: a JSON list of ``ToolCall.to_json()``
_META_TOOLS: Final = "neotoma_tool_calls"

_logger = logging.getLogger("neotoma_agent.integrations.langgraph")


def has_checkpointer(graph: Any, config: Mapping[str, Any]) -> bool:
    """Whether a run of ``graph`` under ``config`` writes checkpoints (its own or its parent's)."""
    saver = getattr(graph, "checkpointer", None)
    if saver is not None and saver is not False:
        return True
    configurable = config.get("configurable") or {}
    return bool(configurable.get("__pregel_checkpointer"))


async def saved_state(graph: Any, config: Mapping[str, Any]) -> Any:
    """The thread's saved state, or ``None`` when the config names no thread."""
    try:
        return await graph.aget_state(config)
    except ValueError:
        return None  # no thread id in the config: nothing saved to continue


def with_turn_metadata(config: Mapping[str, Any], turn: Turn) -> dict[str, Any]:
    """``config`` whose ``metadata`` names ``turn``: only a checkpointed thread can be
    resumed, and the turn to resume rides in its checkpoints' metadata."""
    metadata = dict(config.get("metadata") or {})
    metadata[META_KEY] = turn.turn_id
    metadata[_META_CONVERSATION] = turn.conversation_id
    metadata[_META_USER] = turn.user_message
    return {**config, "metadata": metadata}


def pending_turn(state: Any, memory: NeotomaMemory) -> tuple[str, str, tuple[ToolCall, ...]] | None:
    """The turn an interrupted run left open on this thread, from the checkpoint metadata:
    its id, its user text and the tool calls it made before the interrupt."""
    if state is None or not getattr(state, "interrupts", ()):
        return None
    meta = getattr(state, "metadata", None) or {}
    turn_id, text = meta.get(META_KEY), meta.get(_META_USER)
    if not isinstance(turn_id, str) or not isinstance(text, str):
        return None
    if meta.get(_META_CONVERSATION) != memory.conversation_id:
        raise ValueError(
            "the turn waiting on this thread belongs to another conversation than this memory's"
        )
    return turn_id, text, _kept_calls(meta)


def _kept_calls(meta: Mapping[str, Any]) -> tuple[ToolCall, ...]:
    # The calls an interrupted run kept in its checkpoint (see keep_calls).
    kept = meta.get(_META_TOOLS)
    if not isinstance(kept, str):
        return ()
    try:
        return tuple(ToolCall.from_json(data) for data in json.loads(kept))
    except (TypeError, ValueError) as exc:  # not what keep_calls wrote: left out, said so
        _logger.warning("tool.not_carried reason=%s", type(exc).__name__)
        return ()


def _saver(graph: Any, config: Mapping[str, Any]) -> BaseCheckpointSaver[Any]:
    # The checkpointer a checkpointed run wrote to: the graph's own, or its parent's.
    saver = getattr(graph, "checkpointer", None)
    if not isinstance(saver, BaseCheckpointSaver):
        saver = (config.get("configurable") or {}).get("__pregel_checkpointer")
    if not isinstance(saver, BaseCheckpointSaver):
        raise LookupError("no checkpointer to keep the tool calls in")
    return saver


async def keep_calls(
    graph: Any, config: Mapping[str, Any], turn_id: str, calls: tuple[ToolCall, ...]
) -> None:
    """Put ``calls`` in the thread's interrupted checkpoint, beside ``turn_id``.

    Checkpoint metadata is fixed when a run starts, so the interrupted checkpoint is put
    again as it was with one more key: a checkpointer stores a put of a checkpoint id it
    holds in that checkpoint's place. A checkpoint that cannot be read or put is logged
    (without the calls' content), not raised: the run's own outcome stands.
    """
    saver = _saver(graph, config)
    configurable = dict(config.get("configurable") or {})
    configurable.pop("checkpoint_id", None)  # the thread's head: this run's last checkpoint
    configurable.setdefault("checkpoint_ns", "")
    try:
        saved = await saver.aget_tuple({"configurable": configurable})
        if saved is None or saved.metadata.get(META_KEY) != turn_id:
            raise LookupError("the interrupted checkpoint is not this turn's")
        metadata = dict(saved.metadata)
        metadata[_META_TOOLS] = json.dumps([c.to_json() for c in calls], ensure_ascii=False)
        parent = saved.parent_config or {
            "configurable": {
                key: value
                for key, value in saved.config["configurable"].items()
                if key != "checkpoint_id"
            }
        }
        await saver.aput(parent, saved.checkpoint, metadata, {})  # type: ignore[arg-type,unused-ignore]
    except Exception as exc:
        # The run's own outcome stands (it stopped at interrupt()); the resumed turn
        # will lack these calls, which is said here without their content.
        _logger.warning("tool.not_kept calls=%d reason=%s", len(calls), type(exc).__name__)
