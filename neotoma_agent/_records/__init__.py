"""What a turn stores, as pure values: ids and keys, payloads, tool-call records, and the
checks of text and arguments at the library's boundary.

Nothing here does I/O: the turn machine (``_engine``) and its drivers build their
stores from these, and the readers (``_recall``) parse them back.
"""
