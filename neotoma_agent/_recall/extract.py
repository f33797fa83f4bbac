"""Identifier extraction: the concrete names, addresses and ids a user message holds.

:func:`default_extractor` is linear in the text and reads a bounded prefix of it;
:func:`extract` runs any extractor and caps and dedupes what it returns. Retrieval
(:mod:`._retrieval`) looks each identifier up.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final

__all__ = [
    "COMMON_WORDS",
    "CONNECTORS",
    "FUNCTION_WORDS",
    "MAX_EXTRACT_CHARS",
    "MAX_IDENTIFIER_CHARS",
    "Extractor",
    "default_extractor",
    "extract",
]

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
# Issue-tracker keys ("ABC-123", "PROJ2-7"): a capitalised project key, a hyphen, a number.
_TICKET: Final = re.compile(r"(?<![\w-])[A-Z][A-Z0-9]{1,9}-\d{1,7}(?![\w-])")
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
# Leading words of a sentence-initial run are dropped while they are in this set (function
# words and the imperatives a request starts with).
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
    set put move keep start stop run try take bring buy pay sign read review prepare plan
    arrange organise organize confirm cancel reschedule postpone follow assign close finish
    complete fix change edit delete remove rename merge link file submit approve reject
    log track print copy paste translate dear whats where's who's how's there's
    introduce connect thank loop discuss mention welcome ping nudge chase invite
    met saw called told asked sent spoke talked emailed visited booked paid heard
    """.split()
)

# Common words that open a sentence as a subject or a heading ("Question 3 about Acme?",
# "Meeting moved to Friday"): a sentence-initial run made of one of them (and numbers) is
# not a name. Words that are often first names ("Mark", "Rose") are deliberately absent.
_COMMON_WORDS: Final = frozenset(
    """
    question questions answer meeting meetings call calls update updates note notes task
    tasks issue issues problem problems idea ideas plan plans project projects report
    reports summary status progress agenda minutes reminder reminders deadline deadlines
    invoice invoices order orders payment payments budget price prices cost costs
    contract contracts proposal proposals draft drafts document documents file files
    email emails message messages letter letters ticket tickets bug bugs feature features
    request requests review reviews feedback comment comments decision decisions result
    results test tests step steps point points item items topic topics section part
    chapter page option options choice thing things stuff something nothing everything
    someone everyone anyone nobody people person team teams company companies client
    clients customer customers user users account accounts product products service
    services event events trip travel flight flights hotel hotels booking bookings
    reservation table lunch dinner breakfast coffee weather morning afternoon evening
    night week weeks month months year years day days time times date dates hour hours
    minute minutes later earlier soon first second third next last final new old other
    another quick short long big small great nice fine sorry thanks welcome congrats
    cool awesome perfect excellent sounds seems looks yeah yep nope sure right wrong
    also besides otherwise instead meanwhile finally overall basically honestly
    apparently unfortunately hopefully currently recently please kindly quickly
    urgent important fyi btw asap reminder hint tip warning error errors fix fixes
    goal goals target targets objective action actions follow followup follow-up
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
    """
    of the & de del della der den van von la le du da di dos das ter ten zu bin ibn af av
    """.split()
)

#: the word lists other modules read (loose matching, :mod:`._loose`)
FUNCTION_WORDS: Final = _FUNCTION_WORDS
COMMON_WORDS: Final = _COMMON_WORDS
CONNECTORS: Final = _CONNECTORS

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


_POSSESSIVES: Final = ("'s", "’s")


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
    if sentence_initial:
        # "Status of the Halcyon Bio deal": a common word capitalised by position, joined
        # to the name by connectors, is not part of it.
        skip = start
        while skip < end and tokens[skip][1].lower() in _COMMON_WORDS:
            skip += 1
        if skip > start and skip < end and tokens[skip][1].lower() in _CONNECTORS:
            while skip < end and tokens[skip][1].lower() in _CONNECTORS:
                skip += 1
            start = skip
    kept = tokens[start:end]
    if not kept or (len(kept) == 1 and len(kept[0][1]) < 2):
        return None
    if (
        sentence_initial
        and kept[0][1].lower() in _COMMON_WORDS
        and all(t.isdigit() for _, t in kept[1:])
    ):
        return None  # "Question 3 ...", "Meeting ...": a word capitalised by position
    return kept[0][0], " ".join(t for _, t in kept)


def _capitalised_runs(text: str) -> list[tuple[int, str]]:
    """Runs of capitalised words, with numbers and connectors inside them.

    A run breaks at any punctuation or line break; a word ending in a full stop ends it
    (except an honorific: "Dr. Ana Lopez"). When the run starts a sentence its leading
    function words are dropped, and a run that is only a common word (and numbers) is
    dropped, because they are capitalised only by position. Connectors ("de la", "van",
    "of") join capitalised words: "María de la Cruz", "Bank of America".
    """
    if text.islower():
        # Every cased character is lowercase: no word holds a capital (upper or title
        # case), so none starts a run. A message typed in lower case skips the scan.
        return []
    return _scan_runs(text)


def _scan_runs(text: str) -> list[tuple[int, str]]:
    """:func:`_capitalised_runs`, word by word."""
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
        elif token[:1].isupper() or (token[:1].islower() and not token.islower()):
            # Capitalised, or camel case starting lowercase ("iPhone", "eBay", "macOS").
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
        if ends_sentence or (token is not raw and raw.endswith(_POSSESSIVES)):
            flush()  # a possessive ends a name: "Acme Corp's CTO" names Acme Corp
        sentence_start = ends_sentence
        prev_end = m.end()
    flush()
    return found


def default_extractor(text: str) -> list[str]:
    """Concrete identifiers named in ``text``, in order of appearance, deduplicated.

    Finds quoted strings, runs of capitalised words with their connectors and accents
    ("María de la Cruz", "Bank of America"; sentence-initial function and common words are
    dropped: "Tell me about Acme Corp" gives ``["Acme Corp"]``, "Set up a call" nothing),
    camel-case product names ("iPhone", "GitHub"), ticket ids (``ABC-123``), emails, URL
    hosts and bare domains, ``@handles``, ``#tags`` and Neotoma entity ids, from the first
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
    if "-" in text:
        take(_TICKET)
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
