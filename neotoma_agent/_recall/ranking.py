"""Ranking: why each candidate entity was found, its score, and the order of the set.

Every candidate gets one score in ``[0, 1]`` per way it was found; its best one decides its
:class:`RetrievedEntity` ``reason`` and ``score``. The scores, deterministic and pure:

========  =====================================================================  ==========
reason    when                                                                   score
========  =====================================================================  ==========
exact     the identifier is the entity's id; or the entity's id is the id an     1.0
          entity of its type named so gets (computed as the server computes
          it: "Acme Corp" names the company ``Acme``); or a name of the entity
          (canonical name, ``name``, ``title``, ``full_name``, ``legal_name``,
          an alias) equals the identifier, ignoring case, accents, punctuation;
          or (:func:`score_loose`) a name is, word for word, a run of the
          message's words that no longer match holds ("is taskflow down?")
field     an identity field equals the identifier: ``email``, ``website`` /      0.95
          ``url`` / ``domain`` (as a host: no scheme, ``www.`` or path),
          ``handle`` / ``username`` (without ``@``), ``external_id``; or the
          ticket id leading a name or title, whole ("OPS-412: Rotate TLS" for
          ``OPS-412``, never for ``OPS-41``)
field     an email's domain is the entity's website, and no entity has that       0.8
          email ("sales@acme.com" and Acme's ``acme.com``)
partial   the identifier's words are a run of whole words of a name, or a name's  0.9 × words
          words a run of the identifier's ("Acme" in "Acme Logistics": 0.45;     matched /
          "Set" is never in "Seth" or "Asset"); an email at the identifier's     words of the
          domain scores 0.5                                                      longer
recent    a message of the last turns (``history_turns``) referred to it, or their     0.5; 0.8
          replies produced it. Named by the last two turns: 0.8 when the message  or partial
          plainly refers to it: a word of it names its type ("What did I book?"   + 0.3 when
          and a ``booking``: equal, or a prefix by at most three letters), or a   named by
          personal pronoun stands for it (:func:`_pronoun_referents`); a partial  the last
          match gets +0.3 (at most 0.9), so "Ana" alone links the Ana Lopez just  two turns
          talked about. Otherwise 0.5 (shown, not linked)
plugin    the application's retriever returned it, with the score it gave        its own
========  =====================================================================  ==========

Only entities scoring at least the linking threshold (``link_threshold``, default
:data:`DEFAULT_LINK_THRESHOLD`) are linked (REFERS_TO); the last two turns' entities below
it are shown beside them (``t.retrieved``, reason ``recent``), the others kept as
candidates. Order: score descending, then reason (exact, field, partial, recent, plugin),
then the first identifier that found the entity (in message order; recent entities by
recency, newest first), then the store's order, then the id.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, NamedTuple

import attrs

from .._neotoma.identity import IdentityError, entity_id_for, normalize, resolve_identity_cached
from .._records.payloads import BOOKKEEPING_TYPES
from ..transport._results import Entity
from .loose import LooseWords, ngram_spans, words

__all__ = [
    "DEFAULT_LINK_THRESHOLD",
    "MatchReason",
    "RetrievedEntity",
    "Scored",
    "ranked",
]

#: Why an entity was retrieved (see the module docstring for the scores).
MatchReason = Literal["exact", "field", "partial", "recent", "plugin"]

EXACT_SCORE: Final = 1.0
FIELD_SCORE: Final = 0.95
PARTIAL_MAX: Final = 0.9
EMAIL_DOMAIN_SCORE: Final = 0.5
#: an email at the domain of the entity's website (``sales@acme.com`` and Acme's site),
#: when no entity has that email
EMAIL_SITE_SCORE: Final = 0.8
RECENT_SCORE: Final = 0.5
RECENT_NAMED_SCORE: Final = 0.8
RECENT_BOOST: Final = 0.3
#: Only entities the last this-many turns named are boosted (older ones stay at 0.5).
RECENT_WINDOW: Final = 2
#: Entities scoring below this are candidates only: not retrieved, never linked.
DEFAULT_LINK_THRESHOLD: Final = 0.75

_REASON_ORDER: Final[Mapping[str, int]] = {
    "exact": 0,
    "field": 1,
    "partial": 2,
    "recent": 3,
    "plugin": 4,
}


@attrs.frozen
class RetrievedEntity(Entity):
    """An :class:`~neotoma_agent.Entity` as retrieval found it: why, and how well.

    ``reason`` is one of ``exact``, ``field``, ``partial``, ``recent``, ``plugin``;
    ``score`` in ``[0, 1]`` (the linking threshold decides what is linked);
    ``identifier`` is the identifier of the message that found it (``None`` for recent and
    plugin matches).
    """

    reason: MatchReason = "exact"
    score: float = EXACT_SCORE
    identifier: str | None = None


# ------------------------------------------------------------------ normal forms

_RULE_PREFIX: Final = re.compile(r"^\w+:")
_EMAIL_LIKE: Final = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_HOST_LIKE: Final = re.compile(r"^(?:[a-z0-9-]+\.)+[a-z]{2,}$")
_TICKET_ID: Final = re.compile(r"^[a-z][a-z0-9]{1,9}-\d{1,7}$")
# A ticket id leading a title or name: "OPS-412: Rotate", "[OPS-412] Rotate", "OPS-412 - x".
_LEADING_ID: Final = re.compile(r"^\s*[\[(]?([A-Za-z][A-Za-z0-9]{1,9}-\d{1,7})(?![\w-])")
_NAME_FIELDS: Final = ("name", "title", "full_name", "legal_name")
_EMAIL_FIELDS: Final = ("email",)
_HOST_FIELDS: Final = ("website", "url", "domain")
_HANDLE_FIELDS: Final = ("handle", "username")
_ID_FIELDS: Final = ("external_id",)


def host(value: str) -> str:
    """A website or URL as a bare host: ``https://www.Acme.com/x`` -> ``acme.com``."""
    text = value.strip().casefold()
    if "//" in text:
        text = text.split("//", 1)[1]
    text = text.split("/", 1)[0].split(":", 1)[0].split("?", 1)[0]
    return text.removeprefix("www.")


def is_host(value: str) -> bool:
    """True when ``value`` looks like a bare host name (``acme.com``, ``www.acme.co.uk``)."""
    return _HOST_LIKE.match(value.strip().casefold()) is not None


def _names(entity: Entity) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    name = entity.canonical_name
    if name:
        # "person:Ana Lopez", "person:Ana|Lopez", "id:external_id:R-9": the tail is a name.
        while _RULE_PREFIX.match(name):
            name = name.split(":", 1)[1]
        out.append(words(name))
    snapshot = entity.snapshot
    for key in _NAME_FIELDS:
        value = snapshot.get(key)
        if isinstance(value, str) and value:
            out.append(words(value))
    aliases = entity.raw.get("aliases")
    if isinstance(aliases, list):
        out += [words(a) for a in aliases if isinstance(a, str)]
    return [n for n in out if n]


def _field_values(entity: Entity, keys: Sequence[str]) -> Iterable[str]:
    for key in keys:
        value = entity.snapshot.get(key)
        if isinstance(value, str) and value:
            yield value


@functools.lru_cache(maxsize=4096)
def ids_for(entity_type: str, identifier: str) -> frozenset[str]:
    """The ids an entity of ``entity_type`` gets when ``identifier`` is its name, title or
    (for an email) its email, computed as the server computes them."""
    candidates = {"name": identifier, "title": identifier}
    if "@" in identifier:
        candidates["email"] = identifier
    ids: set[str] = set()
    for key, value in candidates.items():
        try:
            ids.add(resolve_identity_cached(entity_type, {key: value}).entity_id)
        except IdentityError:
            continue
    ids.add(entity_id_for(entity_type, identifier))
    return frozenset(ids)


@functools.lru_cache(maxsize=4096)
def _bases_for(entity_type: str, identifier: str) -> frozenset[str]:
    """What :func:`ids_for` hashes, without the tenant: the normalized names an entity of
    ``entity_type`` gets when ``identifier`` is its name, title or email."""
    candidates = {"name": identifier, "title": identifier}
    if "@" in identifier:
        candidates["email"] = identifier
    bases = {normalize(entity_type, identifier)}
    for key, value in candidates.items():
        try:
            bases.add(
                normalize(
                    entity_type, resolve_identity_cached(entity_type, {key: value}).canonical_name
                )
            )
        except IdentityError:
            continue
    return frozenset(bases)


def _same_tenant_identity(identifier: str, entity: Entity) -> bool:
    """Whether ``identifier`` names ``entity`` as :func:`ids_for` would, for an entity whose
    id is not the one its name gives unscoped (a user's, ``store.for_user``: its id hashes
    the user too; or one renamed since): by the normalized name itself."""
    name = entity.canonical_name
    if not name or entity.id == _unscoped_id(entity.entity_type, name):
        return False
    return normalize(entity.entity_type, name) in _bases_for(entity.entity_type, identifier)


@functools.lru_cache(maxsize=4096)
def _unscoped_id(entity_type: str, canonical_name: str) -> str:
    return entity_id_for(entity_type, canonical_name)


def _run_in(needle: tuple[str, ...], hay: tuple[str, ...]) -> bool:
    n = len(needle)
    if n == 0 or n > len(hay):
        return False
    first = needle[0]
    return any(hay[i] == first and hay[i : i + n] == needle for i in range(len(hay) - n + 1))


def _leading_ids(entity: Entity) -> Iterable[str]:
    """The ticket ids the entity's names start with ("OPS-412: Rotate TLS" -> ``ops-412``)."""
    name = entity.canonical_name or ""
    while _RULE_PREFIX.match(name):
        name = name.split(":", 1)[1]
    for value in (name, *_field_values(entity, _NAME_FIELDS)):
        if (m := _LEADING_ID.match(value)) is not None:
            yield m.group(1).casefold()


def match(identifier: str, entity: Entity) -> tuple[MatchReason, float] | None:
    """How ``identifier`` names ``entity``: (reason, score), or ``None`` when it does not."""
    if identifier == entity.id or identifier.casefold() == entity.id:
        return "exact", EXACT_SCORE
    if entity.id in ids_for(entity.entity_type, identifier) or _same_tenant_identity(
        identifier, entity
    ):
        return "exact", EXACT_SCORE
    needle = words(identifier)
    names = _names(entity)
    if needle and needle in names:
        return "exact", EXACT_SCORE
    folded = identifier.strip().casefold()
    if _TICKET_ID.match(folded) and folded in _leading_ids(entity):
        return "field", FIELD_SCORE  # whole token: "OPS-41" never leads "OPS-412: ..."
    if _EMAIL_LIKE.match(folded):
        if any(v.strip().casefold() == folded for v in _field_values(entity, _EMAIL_FIELDS)):
            return "field", FIELD_SCORE
        domain = folded.rsplit("@", 1)[1]
        if any(host(v) == domain for v in _field_values(entity, _HOST_FIELDS)):
            return "field", EMAIL_SITE_SCORE
    elif _HOST_LIKE.match(folded):
        bare = folded.removeprefix("www.")
        if any(host(v) == bare for v in _field_values(entity, _HOST_FIELDS)):
            return "field", FIELD_SCORE
    handle = folded.removeprefix("@")
    if any(
        v.strip().casefold().removeprefix("@") == handle
        for v in _field_values(entity, _HANDLE_FIELDS)
    ):
        return "field", FIELD_SCORE
    if any(v.strip().casefold() == folded for v in _field_values(entity, _ID_FIELDS)):
        return "field", FIELD_SCORE
    best = 0.0
    if _HOST_LIKE.match(folded):
        # An address is all or nothing, but for a colleague's email at the domain.
        at = "@" + folded.removeprefix("www.")
        if any(v.strip().casefold().endswith(at) for v in _field_values(entity, _EMAIL_FIELDS)):
            best = EMAIL_DOMAIN_SCORE
    elif not _EMAIL_LIKE.match(folded):
        for name in names:
            if _run_in(needle, name):
                best = max(best, PARTIAL_MAX * len(needle) / len(name))
            elif _run_in(name, needle):
                best = max(best, PARTIAL_MAX * len(name) / len(needle))
    if best > 0:
        return "partial", round(best, 4)
    return None


# Words of a message that say nothing about which recent entity it means.
_STOP: Final = frozenset(
    """
    the and for you your yours what did does that this with about have has had was were are
    our ours his her hers their them they who whom when where which why how can could would
    should will from into then than there here not but all any some get got one its it's
    also just please tell show know let lets let's me my mine we us is am be been being do
    """.split()
)


def _similar(word: str, target: str) -> bool:
    # Equal, or one a prefix of the other by at most three letters, the shorter at least
    # four long: "book" / "booking", "meeting" / "meetings"; not "add" / "address".
    if word == target:
        return True
    short, long_ = (word, target) if len(word) <= len(target) else (target, word)
    return len(short) >= 4 and len(long_) - len(short) <= 3 and long_.startswith(short)


def _type_named(message_words: frozenset[str], entity: Entity) -> bool:
    """True when a word of the message names the entity's type ("What did I book?" and a
    ``booking``; "the flight" and a ``flight_booking``)."""
    kinds = words(entity.entity_type)
    return any(_similar(w, k) for w in message_words for k in kinds)


def message_words(text: str) -> frozenset[str]:
    """The words of ``text`` that may name a recent entity (three letters or more)."""
    return frozenset(w for w in words(text[:2000]) if len(w) >= 3 and w not in _STOP)


# ------------------------------------------------------------------ the ranking


class Scored(NamedTuple):
    """One way a candidate was found, before candidates are merged (a NamedTuple: a
    coding-agent hook ranks in a fresh process per prompt)."""

    entity: Entity
    reason: MatchReason
    score: float
    #: the identifier's position in the message (recent: 1000 + recency rank; plugin: 2000)
    source: int
    #: the store's position in its answer
    position: int
    identifier: str | None = None


def _eligible(entity: Entity, include_bookkeeping: bool) -> bool:
    if not entity.id:
        return False
    if not include_bookkeeping and entity.entity_type in BOOKKEEPING_TYPES:
        return False
    # Direct lookups keep merged-away rows; their survivor is the entity to cite.
    return not entity.raw.get("merged_to_entity_id")


def score_lookups(
    lookups: Sequence[tuple[int, str, Sequence[Entity]]], include_bookkeeping: bool
) -> list[Scored]:
    """Score each answered lookup's entities against its identifier."""
    out: list[Scored] = []
    for index, identifier, entities in lookups:
        for pos, entity in enumerate(entities):
            if not _eligible(entity, include_bookkeeping):
                continue
            found = match(identifier, entity)
            if found is not None:
                out.append(Scored(entity, found[0], found[1], index, pos, identifier))
    # An email that is someone's names them, not their company's site too.
    named = {s.source for s in out if s.score >= FIELD_SCORE and "@" in (s.identifier or "")}
    if named:
        out = [s for s in out if s.score != EMAIL_SITE_SCORE or s.source not in named]
    return out


def score_loose(
    loose: LooseWords, found: Sequence[Entity], include_bookkeeping: bool
) -> list[Scored]:
    """The entities the loose lookups found whose name is a run of the message's words,
    longest runs first: a match inside another's run is dropped ("taskflow" inside
    "taskflow migration")."""
    spans: list[tuple[int, int, int, Entity]] = []
    for pos, entity in enumerate(found):
        if _eligible(entity, include_bookkeeping):
            for start, end in ngram_spans(loose, _names(entity)):
                spans.append((start, end, pos, entity))
    out: list[Scored] = []
    for start, end, pos, entity in spans:
        inside = any(s <= start and end <= e and (s, e) != (start, end) for s, e, _, _ in spans)
        if not inside:
            identifier = " ".join(loose.tokens[start:end])
            out.append(Scored(entity, "exact", EXACT_SCORE, 500 + start, pos, identifier))
    return out


def _boosted_partials(recent: Sequence[Entity], lookups: Sequence[Scored]) -> dict[str, float]:
    """The partial matches a recent entity's boost applies to: an identifier's, when it
    names no entity exactly ("Lena Fischer" is Lena Fischer, not "Lena Fischer Design" the
    last turn named) and partly matches exactly one of the last two turns' entities ("Lena"
    after a turn about Lena Meyer and Lena Fischer is either)."""
    window = {
        e.id
        for e in recent
        if isinstance(age := e.raw.get("turns_ago", 0), int) and age < RECENT_WINDOW
    }
    named = {s.source for s in lookups if s.score >= FIELD_SCORE}
    hits: dict[int, set[str]] = {}
    for s in lookups:
        if s.reason == "partial" and s.entity.id in window and s.source not in named:
            hits.setdefault(s.source, set()).add(s.entity.id)
    partial: dict[str, float] = {}
    for s in lookups:
        if s.reason == "partial" and hits.get(s.source) == {s.entity.id}:
            partial[s.entity.id] = max(s.score, partial.get(s.entity.id, 0.0))
    return partial


def score_recent(
    recent: Sequence[Entity], text: str, lookups: Sequence[Scored], include_bookkeeping: bool
) -> list[Scored]:
    """Score the entities the last turns referred to (newest first)."""
    if not recent:
        return []
    said = message_words(text)
    partial = _boosted_partials(recent, lookups)
    referred = _pronoun_referents(recent, text, lookups)
    out: list[Scored] = []
    for rank_, entity in enumerate(recent):
        if not _eligible(entity, include_bookkeeping):
            continue
        score = RECENT_SCORE
        age = entity.raw.get("turns_ago", 0)
        if isinstance(age, int) and age < RECENT_WINDOW:
            if entity.id in referred or _type_named(said, entity):
                score = RECENT_NAMED_SCORE
            if entity.id in partial:
                score = max(score, min(PARTIAL_MAX, partial[entity.id] + RECENT_BOOST))
        out.append(Scored(entity, "recent", round(score, 4), 1000 + rank_, 0))
    return out


#: Entity types a personal pronoun can stand for.
PERSON_TYPES: Final = frozenset({"person", "contact"})
_SINGULAR: Final = frozenset("he him his himself she her hers herself".split())
_PLURAL: Final = frozenset("they them their theirs themselves both".split())
#: A plural pronoun stands for at most this many people.
_MAX_PLURAL: Final = 4


def _pronoun_referents(
    recent: Sequence[Entity], text: str, lookups: Sequence[Scored]
) -> frozenset[str]:
    """The recent people a personal pronoun of ``text`` plainly refers to.

    The people (``person``, ``contact``) of the newest of the last two turns that named
    any: "him", "her", "his" (...) refer to the one it named, if it named exactly one;
    "them", "they", "both" (...) to all it named, if it named two to four. Never when the
    message names a person itself ("Ask Lena Meyer about her trip": "her" is Lena Meyer).
    """
    said = frozenset(words(text[:2000]))
    singular, plural = bool(said & _SINGULAR), bool(said & _PLURAL)
    if not (singular or plural):
        return frozenset()
    if any(s.entity.entity_type in PERSON_TYPES and s.score >= FIELD_SCORE for s in lookups):
        return frozenset()
    people: dict[int, list[str]] = {}
    for entity in recent:
        age = entity.raw.get("turns_ago", 0)
        if entity.entity_type in PERSON_TYPES and isinstance(age, int) and age < RECENT_WINDOW:
            people.setdefault(age, []).append(entity.id)
    if not people:
        return frozenset()
    newest = people[min(people)]
    if singular and len(newest) == 1:
        return frozenset(newest)
    if plural and 2 <= len(newest) <= _MAX_PLURAL:
        return frozenset(newest)
    return frozenset()


def score_plugin(found: Iterable[tuple[Entity, float]], include_bookkeeping: bool) -> list[Scored]:
    """Scores an application's retriever gave, clamped to ``[0, 1]``."""
    out: list[Scored] = []
    for pos, (entity, score) in enumerate(found):
        if _eligible(entity, include_bookkeeping):
            value = max(0.0, min(1.0, float(score)))
            out.append(Scored(entity, "plugin", value, 2000, pos))
    return out


def _key(s: Scored) -> tuple[float, int, int, int, str]:
    return (-s.score, _REASON_ORDER[s.reason], s.source, s.position, s.entity.id)


def _fullest(a: Entity, b: Entity) -> Entity:
    # A recent entity carries only what the history read holds (name, type); a lookup's
    # carries the snapshot. Keep the one with more fields.
    return b if len(b.snapshot) > len(a.snapshot) else a


def ranked(scored: Iterable[Scored]) -> list[RetrievedEntity]:
    """Merge the scores by entity (each keeps its best) and order them (module docstring)."""
    best: dict[str, Scored] = {}
    richest: dict[str, Entity] = {}
    for s in scored:
        eid = s.entity.id
        richest[eid] = _fullest(richest[eid], s.entity) if eid in richest else s.entity
        if eid not in best or _key(s) < _key(best[eid]):
            best[eid] = s
    out: list[RetrievedEntity] = []
    for s in sorted(best.values(), key=_key):
        e = richest[s.entity.id]
        out.append(
            RetrievedEntity(
                e.id,
                e.entity_type,
                e.canonical_name,
                e.snapshot,
                e.raw,
                reason=s.reason,
                score=s.score,
                identifier=s.identifier,
            )
        )
    return out


def recent_entity(
    entity_id: str, entity_type: str, canonical_name: str | None, title: str | None, age: int
) -> Entity:
    """An entity as a history read names it (no snapshot beyond its display name), named
    ``age`` turns ago (0: the last turn)."""
    snapshot: dict[str, Any] = {"title": title} if title else {}
    return Entity(entity_id, entity_type, canonical_name, snapshot, {"turns_ago": age})
