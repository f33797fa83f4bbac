"""Utilities with no knowledge of turns: the library's log events, lazy exports,
OpenTelemetry names, the shield for cleanup, owner-only files, what kind of SQLite
file a path is, the clock, terminal-safe text, error labels.

Any module of the package may import these; they import nothing that knows a turn,
except ``otel``, which names a turn's spans and metrics.
"""
