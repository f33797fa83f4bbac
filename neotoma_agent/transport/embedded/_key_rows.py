"""The idempotency keys' rows: a key's text and its list of observations packed, its
index by source on a prefix (a schema step, ``_schema``).

A key is found by its digest (``_rows.key_digest``, version 8); its row keeps the text
once, for what reads it back (an observation's ``source`` on the GET routes, the purge).
The turn protocol's keys are mostly ids written out in hex
(``conversation-{cid}-{tid}-{phase}-{16 hex digits}``, a turn id often a UUID), so the
text is stored packed by one general mechanism: a blob of UTF-8 runs and three kinds of
token, each introduced by a byte UTF-8 never holds (so a token never splits a character,
and a run needs no escape):

- ``0xFF`` and 16 bytes: a canonical lowercase UUID (``8-4-4-4-12`` hex digits);
- ``0xFE``, a length ``n`` (4 to 255) and ``n`` bytes: a run of ``2n`` lowercase hex digits;
- ``0xFD`` and an index: a fragment of :data:`FRAGMENTS`.

Any other text (uppercase hex, a UUID with other dashes, an odd last digit) stays in the
runs as it is, so unpacking gives back exactly the same text. A key is packed only where
the blob is shorter; any other key (and any key an older file held, until the step packs
it) is its text, and every reader takes both (:func:`key_text`). The same text is always
the same value, so a key is matched as its row holds it; but SQL orders a text before any
blob, so an order by key is taken in Python, on the texts (:func:`first_key`).

A key's list of the observations it wrote or found (their seqs, an entity row's first
observation as minus the row's rowid: ``_rows``), newest first, was JSON text
(``[-174,-173,105]``); it is a blob of zigzag varints (each number's sign in its lowest
bit, then 7 bits a byte, the high bit set on all but a number's last byte): 2 or 3 bytes
a number where JSON takes 4 to 8 (:func:`pack_seqs`, :func:`key_seqs` reads both).

The index by source, which finds the first key of an observation's source (16 bytes),
holds the source's first :data:`SOURCE_PREFIX` bytes (4 since schema version 21,
:data:`SOURCE_INDEX`; 8 in versions 19 and 20), not all 16: a read compares the whole
source on the rows it leads to (a shared prefix costs a row more, never a wrong answer),
and each entry (with the row's key: its user and digest) is 12 bytes smaller.
"""

from __future__ import annotations

import functools
import json
import re
import sqlite3
from collections.abc import Iterable
from typing import Final

from . import _scope

__all__ = [
    "FRAGMENTS",
    "PACKED_KEYS",
    "SOURCE_INDEX",
    "SOURCE_PREFIX",
    "first_key",
    "key_seqs",
    "key_text",
    "pack_key",
    "pack_keys",
    "pack_seqs",
]

#: The texts the turn protocol's keys repeat (``_records.keys``: the prefix and the four
#: phases), as one byte each. Part of the file format: append only, never reorder.
FRAGMENTS: Final = (
    "conversation-",
    "-user-",
    "-assistant-",
    "-abandoned-",
    "-recorded-",
)
_FRAGMENT_CODES: Final = {text: code for code, text in enumerate(FRAGMENTS)}

_UUID: Final = 0xFF
_HEX: Final = 0xFE
_FRAGMENT: Final = 0xFD

_TOKENS: Final = re.compile(
    r"(?P<uuid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    r"|(?P<hex>(?:[0-9a-f]{2}){4,255})"
    "|(?P<fragment>"
    + "|".join(re.escape(f) for f in sorted(FRAGMENTS, key=len, reverse=True))
    + ")"
)
_MARKS: Final = re.compile(rb"[\xfd-\xff]")


def pack_key(key: str | bytes) -> str | bytes:
    """``key`` as its row holds it: packed where that is shorter, else the text as it is
    (a blob is taken as packed already); :func:`key_text` gives back exactly ``key``."""
    if isinstance(key, bytes):
        return key
    try:
        packed = _turn_key(key) or _packed(key)
        size = len(key.encode())
    except UnicodeEncodeError:  # a lone surrogate: no packing (nor storing) can hold it
        return key
    return packed if packed is not None and len(packed) < size else key


def _packed(text: str) -> bytes | None:
    """``text``'s runs and tokens (:func:`pack_key` before it compares the lengths), or
    None where it holds no token."""
    parts: list[bytes] = []
    at = 0
    for m in _TOKENS.finditer(text):
        parts.append(text[at : m.start()].encode())
        token = m.group()
        if m.lastgroup == "uuid":
            parts.append(bytes((_UUID,)) + bytes.fromhex(token.replace("-", "")))
        elif m.lastgroup == "hex":
            parts.append(bytes((_HEX, len(token) // 2)) + bytes.fromhex(token))
        else:
            parts.append(bytes((_FRAGMENT, _FRAGMENT_CODES[token])))
        at = m.end()
    if not at:
        return None
    parts.append(text[at:].encode())
    # Exact by construction (a token decodes to the very text it matched, a run is its
    # own UTF-8, and no UTF-8 byte is a token's mark): the property tests check it.
    return b"".join(parts)


# A turn's keys end ``-{phase}-{16 hex digits}`` (``_records.keys``), and a turn's enter
# and close share all before it (the turn's ``conversation-{cid}-{tid}``).
_PHASE_CODES: Final = {
    text[1:-1]: code for code, text in enumerate(FRAGMENTS) if text.startswith("-")
}
_DIGEST: Final = re.compile("[0-9a-f]{16}")
# The ends of a head after which the phase's ``-`` would complete a fragment.
_FRAGMENT_HEADS: Final = tuple(text[:-1] for text in FRAGMENTS)


def _turn_key(key: str) -> bytes | None:
    """What :func:`_packed` gives a key of a turn's shape, ``{head}-{phase}-{16 hex
    digits}``, from its head's packing (memoised: the enter's and the close's are one):
    no token of ``key`` crosses the ``-`` after the head (a fragment ending there is left
    to :func:`_packed`; no UUID or hex run reaches through a phase's word), so each part
    packs as it would alone. None for any other key."""
    rest, _, digits = key.rpartition("-")
    if len(digits) != 16 or not _DIGEST.fullmatch(digits):
        return None
    head, dash, phase = rest.rpartition("-")
    code = _PHASE_CODES.get(phase)
    if code is None or not dash:
        return None
    packed = _packed_head(head)
    if packed is None:
        return None
    return packed + bytes((_FRAGMENT, code, _HEX, 8)) + bytes.fromhex(digits)


@functools.lru_cache(maxsize=256)
def _packed_head(head: str) -> bytes | None:
    if head.endswith(_FRAGMENT_HEADS):
        return None
    try:
        return _packed(head) or head.encode()
    except UnicodeEncodeError:
        return None


def key_text(value: str | bytes) -> str:
    """The key a row's ``key`` column holds (packed or its text)."""
    if isinstance(value, str):
        return value
    out: list[str] = []
    at = 0
    end = len(value)
    while at < end:
        m = _MARKS.search(value, at)
        mark = end if m is None else m.start()
        out.append(value[at:mark].decode())
        if m is None:
            break
        kind = value[mark]
        if kind == _UUID:
            h = value[mark + 1 : mark + 17].hex()
            out.append(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
            at = mark + 17
        elif kind == _HEX:
            size = value[mark + 1]
            out.append(value[mark + 2 : mark + 2 + size].hex())
            at = mark + 2 + size
        else:
            out.append(FRAGMENTS[value[mark + 1]])
            at = mark + 2
    return "".join(out)


def pack_seqs(seqs: Iterable[int]) -> bytes:
    """A key's list of observations as its row holds it (zigzag varints)."""
    out = bytearray()
    for seq in seqs:
        n = seq * 2 if seq >= 0 else -seq * 2 - 1
        while n > 0x7F:
            out.append(n & 0x7F | 0x80)
            n >>= 7
        out.append(n)
    return bytes(out)


def key_seqs(value: str | bytes) -> list[int]:
    """The seqs a row's ``observations`` column lists (packed, or JSON text)."""
    if isinstance(value, str):
        loaded: list[int] = json.loads(value)
        return loaded
    seqs: list[int] = []
    n = shift = 0
    for byte in value:
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            seqs.append(n >> 1 if not n & 1 else -(n >> 1) - 1)
            n = shift = 0
    return seqs


def first_key(conn: sqlite3.Connection, source: str | bytes | None) -> str | None:
    """The first key (the oldest, then the least text) of the running user's rows that
    wrote ``source`` (as rows hold it: ``_rows.encode_id``), or None."""
    rows = conn.execute(
        "SELECT created_at, key FROM idempotency_keys "
        f"WHERE substr(source_id, 1, {SOURCE_PREFIX}) = substr(?1, 1, {SOURCE_PREFIX}) "
        "AND source_id = ?1 "
        f"AND {_scope.owned()}",
        (source,),
    ).fetchall()
    if not rows:
        return None
    # As SQL ordered (created_at, key) when keys were texts: an integer time before a text
    # one, and texts by their code points (UTF-8's byte order).
    return min((isinstance(at, str), at, key_text(key)) for at, key in rows)[2]


#: the bytes of a source the index by source holds (its start: sources are digests)
SOURCE_PREFIX: Final = 4

#: the index by source on the prefix (a step's script: the index of schema version 21)
SOURCE_INDEX: Final = f"""
DROP INDEX idempotency_keys_by_source;
CREATE INDEX idempotency_keys_by_source
    ON idempotency_keys (substr(source_id, 1, {SOURCE_PREFIX}));
"""

#: the migration's script (its rows are packed by :func:`pack_keys` after it)
PACKED_KEYS: Final = """
DROP INDEX idempotency_keys_by_source;
CREATE INDEX idempotency_keys_by_source ON idempotency_keys (substr(source_id, 1, 8));
"""


def pack_keys(conn: sqlite3.Connection) -> None:
    """Every key's text and list packed, in the migration's one transaction (a packed
    value stays as it is: a file written back to an older version by the tests keeps its
    blobs)."""
    conn.create_function("pack_key", 1, pack_key, deterministic=True)
    conn.create_function("pack_seqs", 1, lambda text: pack_seqs(key_seqs(text)))
    conn.execute("UPDATE idempotency_keys SET key = pack_key(key) WHERE typeof(key) = 'text'")
    conn.execute(
        "UPDATE idempotency_keys SET observations = pack_seqs(observations) "
        "WHERE typeof(observations) = 'text'"
    )
