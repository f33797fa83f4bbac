"""Bounded retrieval: find what the store already knows about what the user names.

Three steps, each small:

1. :func:`default_extractor` pulls concrete identifiers out of the user message (quoted
   strings, capitalised names, emails, domains, @handles, #tags, ``ent_`` ids).
2. :func:`retrieve` looks each one up with ``retrieve_entity_by_identifier``, at most
   ``max_concurrency`` in flight, under one overall deadline. A lookup that fails or is still
   running at the deadline is skipped and counted: retrieval never fails a turn.
3. :func:`rank` turns the lookups into a bounded set. A server matches identifiers as
   case-insensitive *substrings* of names (a lookup of "Zeta Labs 1" also returns "Zeta Labs
   10" … "16"), so exact name matches come first, then prefixes, then substrings; an
   identifier that has an exact match keeps only its exact matches; ids are deduplicated and
   the protocol's own bookkeeping entities are left out unless asked for.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Sequence
from typing import Final

import anyio
import attrs

from ._log import get_logger
from ._payloads import BOOKKEEPING_TYPES
from .transport._base import Entity, LookupResult, Transport

__all__ = [
    "Extractor",
    "RetrievalStats",
    "Retrieved",
    "default_extractor",
    "rank",
    "retrieve",
]

logger = get_logger()

#: Any ``str -> identifiers`` callable can replace :func:`default_extractor`.
Extractor = Callable[[str], Sequence[str]]

#: The default extractor reads at most this many leading characters of a message.
MAX_EXTRACT_CHARS: Final = 100_000
#: Longer candidates are not identifiers.
MAX_IDENTIFIER_CHARS: Final = 200

# --------------------------------------------------------------------------------------
# Identifier extraction
# --------------------------------------------------------------------------------------

# Every pattern that starts with a repeated class is anchored at the start of a run (the
# lookbehinds): otherwise a long run with no match is rescanned from each of its positions,
# which is quadratic (a 1 MB message would block the event loop for minutes).
_EMAIL: Final = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
)
_URL: Final = re.compile(r"\bhttps?://[^\s<>\"'`)\]}]+", re.IGNORECASE)
_DOMAIN: Final = re.compile(
    r"(?<![\w@./-])(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+([A-Za-z]{2,24})(?![\w-])"
)
_HANDLE: Final = re.compile(r"(?<![\w@.])@[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?")
_TAG: Final = re.compile(r"(?<![\w&#/])#[^\W\d_][\w-]*")
_ENTITY_ID: Final = re.compile(r"\bent_[0-9a-fA-F]{24}\b")
#: (opening quote, pattern): a pass runs only when its quote is in the text
_QUOTED: Final = (
    ('"', re.compile(r"\"([^\"\n]{1,200})\"")),
    ("“", re.compile(r"“([^”\n]{1,200})”")),
    ("‘", re.compile(r"‘([^’\n]{1,200})’")),
    ("`", re.compile(r"`([^`\n]{1,200})`")),
    # Single quotes only around whole words, so apostrophes ("don't", "Ana's") never pair up.
    ("'", re.compile(r"(?<![\w'])'([^'\n]{1,200}?)'(?![\w'])")),
)
_WORD: Final = re.compile(r"[^\W_](?:[\w&'’.-]*[^\W_])?\.?")

# File extensions that look like top-level domains ("Node.js", "setup.py").
_NOT_TLDS: Final = frozenset(
    {
        "js",
        "ts",
        "py",
        "md",
        "rs",
        "sh",
        "go",
        "rb",
        "cs",
        "pl",
        "db",
        "so",
        "txt",
        "json",
        "yaml",
        "yml",
        "toml",
        "csv",
        "html",
        "css",
        "png",
        "jpg",
        "jpeg",
        "gif",
        "pdf",
        "zip",
        "exe",
        "log",
        "tsx",
        "jsx",
        "ini",
        "cfg",
        "lock",
        "xml",
        "svg",
        "ipynb",
        "java",
        "kt",
        "swift",
        "cpp",
        "hpp",
        "doc",
        "docx",
        "xls",
        "xlsx",
        "ppt",
        "pptx",
        "mp3",
        "mp4",
        "wav",
        "mov",
        "tar",
        "gz",
        "bz2",
        "whl",
        "egg",
        "sql",
        "php",
        "lua",
        "vue",
        "dart",
        "scala",
        "etc",
        "eg",
        "ie",
        "vs",
        "am",
        "pm",
    }
)

# Capitalised only because they start a sentence: "Tell me about Acme" looks up "Acme".
_FUNCTION_WORDS: Final = frozenset(
    """
    a about after again all also although an and any anything are as at be because been
    before being both but by can could did do does doing done each either even ever every
    for from get give go good great had has have having he hello her here hers hey hi him his
    how however i i'd i'll i'm i've if in is it it's its just let let's lets look may maybe me
    might mine more most must my neither no nor not now of off ok okay on once only or our
    ours please same she should show since so some such sure tell than thank thanks that the
    their theirs them then there these they this those though through to too under until up
    us very was we well were what whatever when whenever where whether which while who whom
    whose why will with would yes yet you your yours yourself actually also anyway
    remind describe explain summarize summarise compare check find list search write create
    make add update send book schedule draft help say ask answer recall remember fetch open
    note record store save use using see today tomorrow yesterday tonight email mail ping
    call message text contact invite meet notify forward reply share send show tell
    """.split()
)

# Never identifiers on their own, wherever they appear.
_ALWAYS_DROP: Final = frozenset(
    {
        "i",
        "i'm",
        "i'd",
        "i'll",
        "i've",
        "ok",
        "okay",
        "yes",
        "no",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
    }
)

# Honorifics lead a person's name but are not part of the stored one.
_HONORIFICS: Final = frozenset({"mr", "mrs", "ms", "dr", "prof", "sir", "mx", "st"})

# Lowercase words allowed inside a name: "Bank of America", "Johnson & Johnson".
_CONNECTORS: Final = frozenset(
    {"of", "the", "&", "de", "del", "der", "den", "van", "von", "la", "le", "du", "da"}
)

_SENTENCE_END: Final = re.compile(r"[.!?…:;]|\n")
_PLAIN_GAP: Final = re.compile(r"[ \t]{1,2}|[ \t]&[ \t]")


def _mask(text: str, spans: list[tuple[int, int]]) -> str:
    # Consumed spans become a barrier character so name runs never cross them.
    parts: list[str] = []
    pos = 0
    for start, end in sorted(spans):
        if end <= pos:
            continue
        start = max(start, pos)
        parts += [text[pos:start], "\x00" * (end - start)]
        pos = end
    parts.append(text[pos:])
    return "".join(parts)


def _strip_token(word: str) -> str:
    word = word.rstrip(".")
    for suffix in ("'s", "’s"):
        if word.endswith(suffix):
            word = word[: -len(suffix)]
    return word


def _clean_run(tokens: list[tuple[int, str]], sentence_initial: bool) -> tuple[int, str] | None:
    start, end = 0, len(tokens)
    if sentence_initial:
        while start < end and tokens[start][1].lower() in _FUNCTION_WORDS:
            start += 1
    while start < end and (tokens[start][1].lower() in _HONORIFICS or tokens[start][1].isdigit()):
        start += 1
    while start < end and tokens[end - 1][1].lower() in _CONNECTORS:
        end -= 1
    kept = tokens[start:end]
    if not kept or (len(kept) == 1 and len(kept[0][1]) < 2):
        return None
    return kept[0][0], " ".join(t for _, t in kept)


def _capitalised_runs(text: str) -> list[tuple[int, str]]:
    """Runs of capitalised words, with numbers and connectors inside them.

    A run breaks at any punctuation or line break; a word ending in a full stop ends it
    (except an honorific: "Dr. Ana Lopez"). When the run starts a sentence its leading
    function words are dropped, because they are capitalised only by position.
    """
    found: list[tuple[int, str]] = []
    run: list[tuple[int, str]] = []
    pending: list[tuple[int, str]] = []  # connectors waiting for the next capitalised word
    run_initial = False
    sentence_start = True
    prev_end = 0

    def flush() -> None:
        nonlocal run, pending
        if run:
            cleaned = _clean_run(run, run_initial)
            if cleaned is not None:
                found.append(cleaned)
        run, pending = [], []

    for m in _WORD.finditer(text):
        gap = text[prev_end : m.start()]
        raw = m.group(0)
        # Most words end in neither "." nor "'s", and most gaps are one space: no calls.
        token = _strip_token(raw) if raw[-1] in ".s" else raw
        lower = token.lower()
        if prev_end == 0 or (gap != " " and not _PLAIN_GAP.fullmatch(gap)):
            flush()
            if prev_end == 0 or _SENTENCE_END.search(gap):
                sentence_start = True
        elif "&" in gap and run:
            pending.append((prev_end + gap.index("&"), "&"))
        if lower in _ALWAYS_DROP:
            flush()
        elif token[:1].isupper():
            if run:
                run.extend(pending)
            else:
                run_initial = sentence_start
            pending = []
            run.append((m.start(), token))
        elif run and token.isdigit():
            run.extend(pending)
            pending = []
            run.append((m.start(), token))
        elif run and lower in _CONNECTORS and len(pending) < 2:
            pending.append((m.start(), token))
        else:
            flush()
        ends_sentence = raw.endswith(".") and raw.lower().rstrip(".") not in _HONORIFICS
        if ends_sentence:
            flush()
        sentence_start = ends_sentence
        prev_end = m.end()
    flush()
    return found


def default_extractor(text: str) -> list[str]:
    """Concrete identifiers named in ``text``, in order of appearance, deduplicated.

    Finds quoted strings, runs of capitalised words (dropping sentence-initial function words:
    "Tell me about Acme Corp" gives ``["Acme Corp"]``), emails, URL hosts and bare domains,
    ``@handles``, ``#tags`` and Neotoma entity ids, from the first
    :data:`MAX_EXTRACT_CHARS` characters. Linear in the length of the text. The caller caps
    the count (``max_identifiers``).
    """
    # Identifiers are ranked by position and capped (max_identifiers), so a long message's
    # tail would rarely contribute; scanning a bounded prefix keeps extraction cheap.
    text = text[:MAX_EXTRACT_CHARS]
    found: list[tuple[int, str]] = []
    spans: list[tuple[int, int]] = []
    # The text with every span so far masked, rebuilt only when a pass added spans. Each
    # pass runs only when the character every match of it holds is in the text: a short
    # chat message usually holds none, and a pass that cannot match adds nothing.
    masked, masked_spans = text, 0

    def current() -> str:
        nonlocal masked, masked_spans
        if len(spans) != masked_spans:
            masked, masked_spans = _mask(text, spans), len(spans)
        return masked

    def take(pattern: re.Pattern[str], group: int = 0) -> None:
        for m in pattern.finditer(current()):
            value = m.group(group).strip()
            if len(value) >= 2:
                found.append((m.start(), value))
            spans.append(m.span())

    if "ent_" in text:
        take(_ENTITY_ID)
    if "://" in text:
        for m in _URL.finditer(current()):
            url = m.group(0).rstrip(".,;:!?")
            host = url.split("//", 1)[1].split("/", 1)[0].split(":", 1)[0]
            host = re.sub(r"^(?:www\.)", "", host)
            if "." in host:
                found.append((m.start(), host.lower()))
            spans.append((m.start(), m.start() + len(url)))
    if "@" in text:
        take(_EMAIL)
    if "." in text:
        for m in _DOMAIN.finditer(current()):
            if m.group(1).lower() in _NOT_TLDS:
                continue
            found.append((m.start(), re.sub(r"^www\.", "", m.group(0).lower())))
            spans.append(m.span())
    if "@" in text:
        take(_HANDLE)
    if "#" in text:
        take(_TAG)
    for quote, pattern in _QUOTED:
        if quote in text:
            take(pattern, 1)
    found.extend(_capitalised_runs(current()))

    seen: set[str] = set()
    result: list[str] = []
    for _, value in sorted(found, key=lambda item: item[0]):
        value = " ".join(value.split())
        key = value.casefold()
        # A 500-character "name" is prose, and a useless substring needle.
        if value and len(value) <= MAX_IDENTIFIER_CHARS and key not in seen:
            seen.add(key)
            result.append(value)
    return result


# --------------------------------------------------------------------------------------
# Ranking
# --------------------------------------------------------------------------------------

_PUNCT: Final = re.compile(r"[-.,;:!?'\"()\[\]{}_/\\]+")
_NAME_FIELDS: Final = (
    "name",
    "title",
    "full_name",
    "legal_name",
    "email",
    "domain",
    "website",
    "url",
    "company",
    "handle",
    "username",
    "external_id",
)
_EXACT, _PREFIX, _SUBSTRING = 0, 1, 2


@functools.lru_cache(maxsize=4096)
def _norm(value: str) -> str:
    # The store compares names case-insensitively and (for most types) without punctuation.
    # Memoised: the same few names come back turn after turn.
    return " ".join(_PUNCT.sub(" ", value.casefold()).split())


_RULE_PREFIX: Final = re.compile(r"^\w+:")


def _names(entity: Entity) -> list[str]:
    names = [entity.id]
    if entity.canonical_name:
        names.append(entity.canonical_name)
        # "person:Ana Lopez", "id:external_id:R-9": the part after the rule prefix is the name.
        tail = entity.canonical_name
        while _RULE_PREFIX.match(tail):
            tail = tail.split(":", 1)[1]
            names.append(tail)
    snapshot = entity.snapshot
    for key in _NAME_FIELDS:
        value = snapshot.get(key)
        if isinstance(value, str) and value:
            names.append(value)
    aliases = entity.raw.get("aliases")
    if isinstance(aliases, list):
        names += [a for a in aliases if isinstance(a, str)]
    return [n for n in map(_norm, names) if n]


def _match_rank(needle: str, entity: Entity) -> int:
    """How ``entity`` matches the normalised identifier ``needle``."""
    names = _names(entity)
    if needle in names:
        return _EXACT
    if any(n.startswith(needle) for n in names):
        return _PREFIX
    return _SUBSTRING


def rank(
    lookups: Sequence[tuple[str, Sequence[Entity]]],
    *,
    limit: int,
    include_bookkeeping: bool = False,
) -> list[Entity]:
    """Merge per-identifier lookup results into at most ``limit`` distinct entities.

    Order: exact name matches, then prefix, then substring matches; ties keep the order the
    identifiers were named in, then the server's order. An identifier with an exact match
    contributes only its exact matches: "Zeta Labs 1" means Zeta Labs 1, not Zeta Labs 10.
    """
    scored: list[tuple[int, int, int, Entity]] = []
    for ident_index, (identifier, entities) in enumerate(lookups):
        needle = _norm(identifier)
        candidates: list[tuple[int, int, Entity]] = []
        for pos, entity in enumerate(entities):
            if not entity.id:
                continue
            if not include_bookkeeping and entity.entity_type in BOOKKEEPING_TYPES:
                continue
            # Direct lookups keep merged-away rows; their survivor is the entity to cite.
            if entity.raw.get("merged_to_entity_id"):
                continue
            candidates.append((_match_rank(needle, entity), pos, entity))
        if any(r == _EXACT for r, _, _ in candidates):
            candidates = [c for c in candidates if c[0] == _EXACT]
        scored += [(r, ident_index, pos, e) for r, pos, e in candidates]
    scored.sort(key=lambda s: (s[0], s[1], s[2]))
    result: list[Entity] = []
    seen: set[str] = set()
    for *_, entity in scored:
        if entity.id not in seen:
            seen.add(entity.id)
            result.append(entity)
            if len(result) >= limit:
                break
    return result


# --------------------------------------------------------------------------------------
# Bounded concurrent retrieval
# --------------------------------------------------------------------------------------


@attrs.frozen
class RetrievalStats:
    """What one bounded retrieval did (never stored; on ``t.result`` and in log events)."""

    #: identifiers extracted (after the ``max_identifiers`` cap)
    identifiers: int = 0
    #: lookups that answered
    lookups: int = 0
    #: lookups that answered with no entity
    misses: int = 0
    #: lookups that raised (skipped)
    failures: int = 0
    #: lookups still running at the deadline (cancelled, skipped)
    timeouts: int = 0
    #: entities in the bounded set
    retrieved: int = 0
    #: wall time of the whole retrieval, milliseconds
    ms: float = 0.0


@attrs.frozen
class Retrieved:
    """The bounded set and how it was obtained."""

    entities: tuple[Entity, ...]
    stats: RetrievalStats

    @property
    def ids(self) -> tuple[str, ...]:
        """The entity ids of the bounded set, best match first."""
        return tuple(e.id for e in self.entities)


EMPTY_RETRIEVAL: Final = Retrieved((), RetrievalStats())


def extract(text: str, extractor: Extractor | None, max_identifiers: int) -> list[str]:
    """Run ``extractor`` (default: :func:`default_extractor`), dedupe, cap at the maximum."""
    # A user extractor is typed str -> Sequence[str], but we do not trust it with a turn.
    raw: Sequence[object] = (extractor or default_extractor)(text)
    seen: set[str] = set()
    identifiers: list[str] = []
    for value in raw:
        if not isinstance(value, str):
            continue
        value = value.strip()
        if value and value.casefold() not in seen:
            seen.add(value.casefold())
            identifiers.append(value)
        if len(identifiers) >= max_identifiers:
            break
    return identifiers


async def retrieve(
    transport: Transport,
    identifiers: Sequence[str],
    *,
    limit: int,
    max_concurrency: int,
    deadline_s: float | None,
    lookup_limit: int,
    include_bookkeeping: bool = False,
) -> Retrieved:
    """Look every identifier up concurrently and rank the answers (never raises but cancel).

    At most ``max_concurrency`` lookups are in flight; all of them share one deadline,
    ``deadline_s`` seconds from now (``None``: no deadline).
    """
    started = time.perf_counter()
    if not identifiers or limit <= 0:
        return Retrieved((), RetrievalStats(identifiers=len(identifiers)))
    results: dict[int, Sequence[Entity]] = {}
    failures = 0
    # Only needed when there are more lookups than may run at once (it costs checkpoints).
    limiter = anyio.Semaphore(max_concurrency) if len(identifiers) > max_concurrency else None

    async def lookup(index: int, identifier: str) -> None:
        nonlocal failures
        if limiter is not None:
            await limiter.acquire()
        try:
            answer: LookupResult = await transport.retrieve_entity_by_identifier(
                identifier, limit=lookup_limit
            )
        except Exception as exc:
            failures += 1
            # The identifier is user content: log its position, never its text. INFO: a read
            # loses nothing, the turn goes on, and RetrievalStats.failures says it happened.
            logger.info(
                "retrieval.lookup_failed",
                identifier_index=index,
                error_class=type(exc).__name__,
                error=str(exc),
            )
            return
        finally:
            if limiter is not None:
                limiter.release()
        results[index] = answer.entities

    with anyio.move_on_after(deadline_s) as deadline:
        if len(identifiers) == 1:
            await lookup(0, identifiers[0])
        else:
            async with anyio.create_task_group() as tg:
                for index, identifier in enumerate(identifiers):
                    tg.start_soon(lookup, index, identifier)
    timeouts = len(identifiers) - len(results) - failures
    if deadline.cancelled_caught:
        logger.info("retrieval.timeout", deadline_s=deadline_s, unfinished=timeouts)
    lookups = [(identifiers[i], results[i]) for i in sorted(results)]
    entities = rank(lookups, limit=limit, include_bookkeeping=include_bookkeeping)
    stats = RetrievalStats(
        identifiers=len(identifiers),
        lookups=len(results),
        misses=sum(1 for found in results.values() if not found),
        failures=failures,
        timeouts=timeouts,
        retrieved=len(entities),
        ms=(time.perf_counter() - started) * 1000,
    )
    return Retrieved(tuple(entities), stats)
