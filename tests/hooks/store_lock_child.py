"""Holds a write lock on a store file (``BEGIN EXCLUSIVE``) until its stdin closes.

Run as ``python store_lock_child.py DB``: prints ``locked`` once it holds the lock, rolls
back and exits when its stdin closes (the test's ``with`` block ends, or the test dies).
"""

from __future__ import annotations

import sqlite3
import sys

conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
conn.close()
