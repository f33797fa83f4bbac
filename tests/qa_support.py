"""Helpers shared by the audit's tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from neotoma_agent.qa import AuditReport, _audit, _embedded, audit
from neotoma_agent.qa._stream import StreamingAuditor
from neotoma_agent.testing import RecordingTransport
from neotoma_agent.transport._base import Transport
from neotoma_agent.transport.embedded import EmbeddedStore


def spy_on_fast_path(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record, per whole-store audit, whether it read through the file fast path."""
    used: list[bool] = []
    fast = _embedded.file_reads

    def spy(transport: Transport, auditor: StreamingAuditor) -> _embedded.FileReads | None:
        reads = fast(transport, auditor)
        used.append(reads is not None)
        return reads

    monkeypatch.setattr(_audit, "file_reads", spy)
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
