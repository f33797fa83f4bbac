"""Names written in any case: the message's word n-grams matched against names the store has.

Capitalisation finds most names (:mod:`._extract`), but not "ping lena fischer" or "is
taskflow down?". So the message's other words, those no identifier covers and no list of
common words holds, are looked up too (each a substring lookup, beside the identifiers'
lookups, under the same deadline and cap), and an entity they bring back is a match only
when one of its names is, word for word, a run of the message's words (case and accents
ignored): "taskflow" names the product ``TaskFlow``, "taskflow migration" the project
``TaskFlow Migration`` (and then not the product: a match inside a longer one is dropped),
"the flow of tasks" nothing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from typing import Final, NamedTuple

from .._neotoma.identity import format_canonical_name
from .extract import COMMON_WORDS, CONNECTORS, FUNCTION_WORDS
from .search_text import words as search_words

__all__ = [
    "MAX_LOOSE_LOOKUPS",
    "MAX_LOOSE_PEOPLE",
    "LooseWords",
    "loose_words",
    "ngram_spans",
    "person_like",
    "words",
]

#: At most this many of a message's words are looked up (the longest first).
MAX_LOOSE_LOOKUPS: Final = 4
#: At most this many runs of a message's words are looked up among people.
MAX_LOOSE_PEOPLE: Final = 2
#: The words of a message read for loose names.
MAX_LOOSE_CHARS: Final = 2000

_TOKEN: Final = re.compile(r"[^\W_]+")
#: the same words, kept by ``split`` between the text around them
_TOKEN_PARTS: Final = re.compile(r"([^\W_]+)")
_SENTENCE_GAP: Final = re.compile(r"[.!?:;\n]")


@functools.lru_cache(maxsize=8192)
def words(value: str) -> tuple[str, ...]:
    """``value``'s words as a search matches them (lower case, accents removed, split at
    anything not a letter or digit: one rule, :mod:`neotoma_agent._recall.search_text`), memoised:
    the same names come back turn after turn."""
    return tuple(search_words(value))


# Everyday words that are rarely a name on their own: looking them up costs a request and
# finds nothing a whole-name match would keep. (A name made of them, "Quarterly Plan", is
# still found when it is capitalised, or through another of its words.)
_EVERYDAY: Final = frozenset(
    """
    able above across act add address after afternoon again against age ago agree ahead air
    allow almost alone along already always among amount another answer anyone anything
    anyway anywhere appear apply area around arrive ask asked away back bad bag bank base be
    become before begin behind believe below best better between big bill bit black blue
    board body book both bottom box break bring broke broken brown build building built busy
    buy call came can car card care carry case cause center centre change changed changes
    cheap check checked checklist child choose city claim class clean clear close closed
    cold come comes coming common company complete cost could country couple course cover
    create current cut daily dark data deal dear deck decide deep deliver demo department
    design desk detail details did die different difficult dinner direct doing done door
    double down draft draw dream drink drive drop due during each early easy eat else empty
    end enough enter entire even evening ever every exactly example except expect explain
    face fact fail fall family far fast feel few field figure fill final find fine finish
    fire first fit five floor fly follow food form forward four free friend front full fun
    future game gave general get gets getting give given glad goes going gone good got
    great green ground group grow guess half hand handle hang happen happy hard head hear
    heard help high hold home hope hot hour house huge idea important include inside instead
    interest into item job join jump just keep kept kind knew know known land large last
    late later latest lead learn least leave left less letter level life light like likely
    line list little live living local long longer look looked looking lose lost lot loud
    love low lunch made main major make makes making many mark market matter mean meet
    member memo middle might mind minor miss missing model money more morning most mostly
    move moved much must name near need needed needs never news next nice nobody none normal
    note notes nothing number numbers offer office often old once one only onto open order
    other out outside over own page paid pair paper part party pass past pay people per
    perhaps phone pick piece place plan plane play please point possible post power pretty
    price print private probably problem process pull push put quick quickly quite quote
    rather reach reachable read ready real really reason receive recent red remain renewed
    rest return right room round rule run running safe said sale same save saw say school
    second seem seen sell send sent serious set several shall share short should show side
    sign simple since single site size slide slides slow small soon sorry sort sound space
    speak special spend spent stand start state stay step still stop store story street
    strong stuff such sure system table take taken talk team tell term than that then there
    thing things think third this those though thought three through till time today
    together told tomorrow too took top total touch toward town trip true truth try turn
    twice two type under understand unit until upon use used useful usual value very view
    visit wait walk wall want wanted warm watch water way week well went were what while
    white whole why wide will win window wish within without word work worked working world
    worry would write wrong year yes yet young everyone everybody someone somebody weather
    http https www monday tuesday wednesday thursday friday saturday sunday january
    february march april june july august september october november december
    calendar onboarding agenda contract pricing release reviewer review offsite laptop badge
    status update updates meeting call calls email emails message messages reply
    replied replies replied sync synced ready late early fast faster slower mail mailbox
    changed change changes going went thinks thought looks looking says said tells told
    asked asks wants wanted needs needed works worked started starts finished finishes
    """.split()
)

_SKIP: Final = _EVERYDAY | COMMON_WORDS | FUNCTION_WORDS | CONNECTORS

# Words that make a name an organisation's, a product's, a project's or a place's, not a
# person's: such a name is not looked up among people ("Kestrel Robotics", "Acme Labs").
_NOT_PEOPLE: Final = frozenset(
    """
    labs lab logistics studio studios partners holdings group bank industries consulting
    design photography robotics aerospace analytics health healthcare traders trading
    systems technologies technology tech solutions capital ventures media software
    services service foods pharma pharmaceuticals bio biologics biotech energy motors
    airlines insurance university college school institute foundation association club
    agency network networks digital cloud data ai security finance financial
    migration project rollout platform app api release office hotel cafe restaurant
    street road avenue station airport center centre hospital clinic museum park
    scheduling point points market markets shop store stores company inc corp
    """.split()
)


class LooseWords(NamedTuple):
    """A message's words for loose matching."""

    #: the message's words, case-folded and accents removed, in order
    tokens: tuple[str, ...]
    #: for each token, whether an identifier already covers it
    covered: tuple[bool, ...]
    #: the words to look up (at most :data:`MAX_LOOSE_LOOKUPS`)
    lookups: tuple[str, ...]
    #: the identifiers' words: a name equal to one of them is matched too (the identifier
    #: "Maria de la Cruz" names "María de la Cruz", whose lookup could not find her)
    named: frozenset[tuple[str, ...]] = frozenset()
    #: runs of two or three such words (with particles) to look up among people: "lena
    #: fischer" (a person stored with an email is found by name only among people)
    people: tuple[str, ...] = ()


def _fold(word: str) -> str:
    folded = words(word)
    return folded[0] if len(folded) == 1 else "".join(folded)


def loose_words(text: str, identifiers: Sequence[str]) -> LooseWords:
    """The words of ``text`` to look up, besides ``identifiers``."""
    covered_words: set[str] = set()
    named: set[tuple[str, ...]] = set()
    wanted: dict[str, None] = {}
    for identifier in identifiers:
        folded_words = words(identifier)
        covered_words.update(folded_words)
        if identifier.isascii() and person_like(identifier):
            # Written without accents, a stored name with them is not a substring: look
            # up its last word too ("cruz" finds "María de la Cruz").
            named.add(folded_words)
            plain = [w for w in folded_words if len(w) >= 4 and w not in CONNECTORS]
            if plain:
                wanted[plain[-1]] = None
    accents = len(wanted)
    tokens: list[str] = []
    covered: list[bool] = []
    runs: list[list[str]] = [[]]
    cased = False  # a capital inside a sentence: the writer capitalises names
    kept = False  # a word was kept before this one
    carry = ""  # what lies between the last word kept and the next gap (a word folded away)
    # One split in C: the text between words and the words, alternately.
    parts = _TOKEN_PARTS.split(text[:MAX_LOOSE_CHARS])
    for i in range(1, len(parts), 2):
        word = parts[i]
        lower = word.lower()
        # An ASCII token (letters and digits only) folds to its lower case: no lookup.
        folded = lower if word.isascii() else _fold(word)
        if not folded:
            carry += parts[i - 1] + word
            continue
        gap = carry + parts[i - 1] if carry else parts[i - 1]
        carry = ""
        if kept and word[0].isupper() and word != "I" and not _SENTENCE_GAP.search(gap):
            cased = True
        tokens.append(folded)
        is_covered = folded in covered_words
        covered.append(is_covered)
        content = not is_covered and not folded.isdigit() and lower not in _SKIP
        if runs[-1] and not gap.isspace():
            runs.append([])  # punctuation between the words: no name spans it
        if content or (runs[-1] and lower in CONNECTORS):
            runs[-1].append(lower)
        elif runs[-1]:
            runs.append([])
        kept = True
    people: list[str] = []
    for run in runs:
        while run and run[-1] in CONNECTORS:
            run.pop()
        names = [w for w in run if w not in CONNECTORS]
        # In a cased message a lone lowercase word is rarely a name; two in a row may be
        # ("loop in jan van der berg"). In an uncased one any word may be.
        if not cased or len(names) >= 2:
            wanted.update((w, None) for w in names if len(w) >= 4 and _fold(w) not in _SKIP)
        if (
            2 <= len(names) <= 3
            and not any(w in _NOT_PEOPLE for w in run)
            and len(people) < MAX_LOOSE_PEOPLE
        ):
            people.append(" ".join(run))
    others = list(wanted)[accents:]
    longest = sorted(others, key=len, reverse=True)[:MAX_LOOSE_LOOKUPS]
    lookups = (*list(wanted)[:accents], *(w for w in others if w in longest))
    return LooseWords(tuple(tokens), tuple(covered), lookups, frozenset(named), tuple(people))


@functools.lru_cache(maxsize=4096)
def person_like(identifier: str) -> bool:
    """A capitalised name of two to five words that could be a person's ("Lena Fischer",
    "Jan van der Berg"): no digits, no company suffix, not an address."""
    tokens = identifier.split()
    return (
        2 <= len(tokens) <= 5
        and all(t[:1].isupper() or t.lower() in CONNECTORS for t in tokens)
        and not any(w in _NOT_PEOPLE for w in words(identifier))
        and not any(c.isdigit() or c in "@/" for c in identifier)
        and format_canonical_name("company", identifier) == identifier.strip()
    )


def _occurrences(needle: tuple[str, ...], hay: tuple[str, ...]) -> Iterable[int]:
    n = len(needle)
    first = needle[0]
    for i in range(len(hay) - n + 1):
        if hay[i] == first and hay[i : i + n] == needle:
            yield i


def ngram_spans(loose: LooseWords, names: Iterable[tuple[str, ...]]) -> list[tuple[int, int]]:
    """Where each of ``names`` is a run of the message's words that an identifier does not
    already cover entirely: ``(start, end)`` token spans."""
    spans: list[tuple[int, int]] = []
    for name in names:
        if not name or (len(name) == 1 and (len(name[0]) < 4 or name[0] in _SKIP)):
            continue
        if all(w in CONNECTORS for w in name):
            continue
        for start in _occurrences(name, loose.tokens):
            end = start + len(name)
            if not all(loose.covered[start:end]) or name in loose.named:
                spans.append((start, end))
    return spans
