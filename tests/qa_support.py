"""Helpers shared by the audit's tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from neotoma_agent.qa import AuditReport, _audit, audit
from neotoma_agent.qa._stream import StoreReads, StreamingAuditor, store_reads
from neotoma_agent.testing import RecordingTransport
from neotoma_agent.transport._base import Transport
from neotoma_agent.transport.embedded import EmbeddedStore


def spy_on_fast_path(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record, per whole-store audit, whether it read through the store's bulk reads (the
    embedded file's fast path)."""
    used: list[bool] = []

    def spy(transport: Transport, auditor: StreamingAuditor) -> StoreReads | None:
        reads = store_reads(transport, auditor)
        used.append(reads is not None)
        return reads

    monkeypatch.setattr(_audit, "store_reads", spy)
    return used


async def audit_both_ways(
    store: EmbeddedStore, used: list[bool], kwargs_list: Sequence[Mapping[str, Any]]
) -> list[AuditReport]:
    """Audit ``store`` with each of ``kwargs_list`` (``min_age=0`` unless given) through the
    file fast path and over the Transport reads; assert both answer the same; the reports."""
    generic = RecordingTransport(store)  # not an EmbeddedStore: the Transport reads
    reports = []
    for given in kwargs_list:
        kwargs = {"min_age": 0, **given}
        on_file = await audit(store, **kwargs)
        assert used.pop() is True
        over_transport = await audit(generic, **kwargs)
        assert used.pop() is False
        assert on_file == over_transport, kwargs
        reports.append(on_file)
    return reports
