"""Bounded retrieval: find what the store already knows about what the user names.

1. :func:`~neotoma_agent._recall.extract.default_extractor` pulls concrete identifiers out of the
   user message (names, emails, domains, handles, ticket ids, quoted strings, ``ent_`` ids).
2. :func:`retrieve` looks each one up with ``retrieve_entity_by_identifier``, at most
   ``max_concurrency`` in flight, under one overall deadline, beside the conversation's
   recent entities (what the history read of the same enter names, so no extra round
   trip) and an application's own :class:`Retriever`, under the same deadline. A lookup
   that fails or is still running at the deadline is skipped and counted: retrieval never
   fails a turn.
3. :mod:`._ranking` scores every candidate (exact, field, partial, recent, plugin) and
   orders them; only those at or above the linking threshold are retrieved (and linked).

A server's lookup matches *substrings* of canonical names and returns early, so a longer
name that contains the identifier could hide the entity it names exactly (the task
"Follow up: Acme Corp" hid the company "Acme Corp", whose canonical name is "Acme"). So
each identifier is looked up in the form the exact entity's canonical name has (computed
as the server computes it: see :func:`lookup_plan`), and exactness is decided locally
(the id an entity of that type and name has, :mod:`._ranking`).
"""

from __future__ import annotations

import time
from collections.abc import (
    Awaitable,
    Callable,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, Final, Protocol, TypedDict, overload

import attrs

from .._engine.requests import Lookups
from .._neotoma.identity import format_canonical_name, normalize
from .._util.error_label import error_label
from .._util.log import get_logger
from ..transport._bodies import present
from ..transport._results import Entity, LookupResult
from .extract import Extractor, default_extractor, extract
from .history import HistoryTurn
from .loose import LooseWords, loose_words, person_like
from .ranking import (
    DEFAULT_LINK_THRESHOLD,
    RECENT_WINDOW,
    MatchReason,
    RetrievedEntity,
    Scored,
    is_host,
    ranked,
    recent_entity,
    score_lookups,
    score_loose,
    score_plugin,
    score_recent,
)

if TYPE_CHECKING:
    from ..transport._base import Transport

__all__ = [
    "DEFAULT_LINK_THRESHOLD",
    "DEFAULT_LOOKUP_LIMIT",
    "DEFAULT_MAX_IDENTIFIERS",
    "DEFAULT_RANKING",
    "DEFAULT_RETRIEVAL_LIMIT",
    "Extractor",
    "Found",
    "MatchReason",
    "Ranking",
    "RetrievalQuery",
    "RetrievalStats",
    "Retrieved",
    "RetrievedEntity",
    "Retriever",
    "default_extractor",
    "extract",
    "lookup_bodies",
    "lookup_plan",
    "plan_retrieval",
    "rank_found",
    "ranked_step",
    "recent_entities",
    "retrieval",
    "retrieve",
]

logger = get_logger()

#: a memory's defaults (``retrieval_limit``, ``max_identifiers``, ``lookup_limit``), here
#: so that a hook opening a turn without the memory retrieves as a default memory does
DEFAULT_RETRIEVAL_LIMIT: Final = 8
DEFAULT_MAX_IDENTIFIERS: Final = 16
DEFAULT_LOOKUP_LIMIT: Final = 25


class Ranking(TypedDict):
    """How a retrieval looks up and ranks: the keywords :func:`retrieval` and
    :func:`retrieve` take from a memory's settings (``_phases.Phases.ranking``)."""

    #: at most this many entities retrieved (``retrieval_limit``)
    limit: int
    #: at most this many answers a lookup
    lookup_limit: int
    #: bookkeeping entities (conversations, messages, turns) may be retrieved
    include_bookkeeping: bool
    #: the score that gets a REFERS_TO edge (``link_threshold``)
    threshold: float
    #: also look up the message's other uncommon words (the default extractor's)
    loose: bool


#: a default memory's :class:`Ranking` (``MemorySettings``' defaults, no extractor): what a
#: hook opening a turn without a memory ranks by (``transport.embedded._turns``)
DEFAULT_RANKING: Final[Ranking] = Ranking(
    limit=DEFAULT_RETRIEVAL_LIMIT,
    lookup_limit=DEFAULT_LOOKUP_LIMIT,
    include_bookkeeping=False,
    threshold=DEFAULT_LINK_THRESHOLD,
    loose=True,
)


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
    #: entities in the bounded set (at or above the linking threshold)
    retrieved: int = 0
    #: wall time of the whole retrieval, milliseconds
    ms: float = 0.0
    #: entities found but scored below the linking threshold (not retrieved, not linked)
    candidates: int = 0
    #: the conversation's recent entities considered
    recent: int = 0
    #: entities the application's retriever returned (``None``: it failed or timed out)
    plugin: int | None = 0


@attrs.frozen
class Retrieved(Sequence[Entity]):
    """The bounded set, the candidates below the linking threshold, and how they were found.

    A sequence of the bounded set, best match first, like ``t.retrieved``::

        for entity in await memory.retrieve("Acme Corp"):
            print(entity.id, entity.canonical_name)
    """

    #: at or above the linking threshold, best first (these get REFERS_TO edges); each a
    #: :class:`RetrievedEntity` (why, score) when retrieval found it, a plain ``Entity``
    #: when only its id was handed over (a turn resumed by id)
    entities: tuple[Entity, ...]
    stats: RetrievalStats
    #: found but below the threshold, best first (neither retrieved nor linked)
    candidates: tuple[RetrievedEntity, ...] = ()
    #: what the last turns referred to and this message does not name: retrieved
    #: (``t.retrieved``, after the bounded set) but not linked, reason ``recent``
    recent: tuple[RetrievedEntity, ...] = ()

    @property
    def ids(self) -> tuple[str, ...]:
        """The entity ids of the bounded set (the linked ones), best match first."""
        return tuple(e.id for e in self.entities)

    def __iter__(self) -> Iterator[Entity]:
        return iter(self.entities)

    def __len__(self) -> int:
        return len(self.entities)

    @overload
    def __getitem__(self, index: int) -> Entity: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Entity, ...]: ...

    def __getitem__(self, index: int | slice) -> Entity | tuple[Entity, ...]:
        return self.entities[index]

    @property
    def shown(self) -> tuple[Entity, ...]:
        """The bounded set, then the recent entities it does not hold (``t.retrieved``)."""
        return self.entities + self.recent if self.recent else self.entities


EMPTY_RETRIEVAL: Final = Retrieved((), RetrievalStats())


@attrs.frozen
class RetrievalQuery:
    """What an application's :class:`Retriever` is asked."""

    #: the exact user message
    text: str
    #: the identifiers the extractor found in it (capped)
    identifiers: tuple[str, ...]
    #: the conversation (its ``conversation_id``)
    conversation_id: str
    #: at most this many entities are retrieved in all
    limit: int


class Retriever(Protocol):
    """An application's own retrieval (an embedding search, a keyword index, ...).

    Called once per turn with a :class:`RetrievalQuery`, concurrently with the lookups and
    under the same deadline (``retrieval_timeout``). It returns ``(entity, score)`` pairs:
    entities as the store returns them (for instance from ``retrieve_entity_by_identifier``
    or ``query_entities`` on ``memory.transport``, or built with ``Entity(...)`` from an
    index that keeps ids, types and names) and a score in ``[0, 1]`` (clamped), merged into
    the same ranking with reason ``plugin``: it is retrieved and linked when the score
    reaches ``link_threshold``. A retriever that raises or is still running at the deadline
    is logged at WARNING and skipped, like a lookup.
    """

    def __call__(self, query: RetrievalQuery, /) -> Awaitable[Iterable[tuple[Entity, float]]]:
        """The entities ``query`` names, with a score each."""
        ...


#: The conversation's recent entities, newest first: a wait for the history read that runs
#: beside the retrieval (no I/O of its own), awaited once the lookups answered.
RecentSource = Callable[[], Awaitable[Sequence[Entity]]]

#: At most this many recent entities are candidates (the newest).
MAX_RECENT: Final = 32


def recent_entities(history: Sequence[HistoryTurn]) -> list[Entity]:
    """The entities ``history``'s messages REFER_TO, newest turn first, each once.

    A reply REFERS_TO what its turn retrieved, cited and produced (``t.remember``), so
    this is what the last turns were about. Each carries what the history read holds (id,
    type, canonical name, display name), not its snapshot, and how many turns ago it was
    named (``raw["turns_ago"]``, 0 for the last turn).
    """
    out: list[Entity] = []
    seen: set[str] = set()
    for age, turn in enumerate(reversed(history)):
        for r in turn.entities:
            if r.entity_id and r.entity_id not in seen:
                seen.add(r.entity_id)
                out.append(
                    recent_entity(r.entity_id, r.entity_type, r.canonical_name, r.title, age)
                )
                if len(out) >= MAX_RECENT:
                    return out
    return out


# Second-level labels of country domains: the name is before them ("acme.co.uk").
_SECOND_LEVEL: Final = frozenset({"co", "com", "org", "net", "ac", "gov"})


def _domain_name(identifier: str) -> str | None:
    """``acme`` for ``acme.com`` / ``www.acme.co.uk``: the label a company is named by."""
    if not is_host(identifier):
        return None
    labels = identifier.casefold().removeprefix("www.").split(".")[:-1]
    while len(labels) > 1 and labels[-1] in _SECOND_LEVEL:
        labels.pop()
    return labels[-1] if len(labels[-1]) >= 3 else None


#: One lookup: (the indexes of the identifiers it serves, what to look up, the ``by``
#: field or None, the entity type or None). A loose word's lookup serves no identifier.
Lookup = tuple[tuple[int, ...], str, str | None, str | None]


def lookup_plan(
    identifiers: Sequence[str], loose: Sequence[str] = (), people: Sequence[str] = ()
) -> list[Lookup]:
    """The lookups for ``identifiers`` (deduplicated), then one per ``loose`` word and one
    among people per run of ``people`` (:mod:`._loose`).

    A server's lookup returns the canonical names that contain the text, ordered by name,
    and stops there (its field pass, over ``name, full_name, title, email, domain,
    company`` only, runs when no canonical name matched). So each identifier is looked up
    in the form the exact entity's canonical name contains, and the ranking decides
    exactness against the identifier as written:

    - a name with a company legal suffix ("Acme Corp") as the company's canonical name
      ("Acme"): that finds the company, and every name containing "Acme Corp" too (after
      it: a name sorts before its extensions);
    - a name that could be a person's ("Lena Fischer") also among people only: a person
      stored with an email has the email as canonical name, so while anything else's
      canonical name contains the name, only this lookup reaches her ``name`` field;
    - a domain (``acme.com``) as its name (``acme``): that finds every canonical name
      containing the domain (emails); and among companies by ``website`` (the server's
      field pass compares it whole, then scans for it inside a URL);
    - an email as written, and its domain among companies by ``website``;
    - a handle (``@ana_l``) in the ``handle`` field, with and without its ``@``;
    - anything else as written.
    """
    # (what, by, type) -> [the first spelling, the identifiers it serves], in first-use order
    planned: dict[tuple[str, str | None, str | None], tuple[str, list[int]]] = {}

    def add(index: int | None, what: str, by: str | None = None, kind: str | None = None) -> None:
        _, served = planned.setdefault((what.casefold(), by, kind), (what, []))
        if index is not None and index not in served:
            served.append(index)

    for index, identifier in enumerate(identifiers):
        if identifier.startswith("@") and len(identifier) > 2:
            add(index, identifier, "handle")  # stored as written, or without the "@"
            add(index, identifier[1:], "handle")
        elif identifier.startswith("ent_"):
            add(index, identifier)
        elif "@" in identifier:
            add(index, identifier)
            domain = identifier.rsplit("@", 1)[1]
            if is_host(domain):
                add(index, domain.casefold(), "website", "company")
        elif (label := _domain_name(identifier)) is not None:
            add(index, label)
            add(index, identifier.casefold().removeprefix("www."), "website", "company")
        elif (short := format_canonical_name("company", identifier)) != identifier.strip() and (
            normalize("company", identifier) != normalize("note", identifier)
        ):
            add(index, short)
        else:
            add(index, identifier)
            if person_like(identifier):
                add(index, identifier, None, "person")
    for word in loose:
        add(None, word)
    for run in people:
        add(None, run, None, "person")
    return [(tuple(served), what, by, kind) for (_, by, kind), (what, served) in planned.items()]


class Found:
    """What the reads of one retrieval answered: each lookup's entities (by its slot of
    the plan), how many failed, the recent entities and the application retriever's.

    The answer to a retrieval's :class:`~._engine.requests.Lookups` request: the async
    :func:`retrieve` (concurrent, under a deadline) and the hooks' driver on a store file
    (in the caller's thread) both fill one in as the answers come, and the step
    (:func:`retrieval`) ranks it (:func:`rank_found`).
    """

    __slots__ = ("failures", "plan", "plugin", "recent", "results")

    def __init__(self, plan: Sequence[Lookup]) -> None:
        self.plan = plan
        #: the entities each answered lookup found, by its slot of ``plan``
        self.results: dict[int, Sequence[Entity]] = {}
        self.failures = 0
        #: the conversation's recent entities, newest first
        self.recent: Sequence[Entity] = ()
        #: what the application's retriever returned (``None``: not asked, or it failed)
        self.plugin: list[tuple[Entity, float]] | None = None

    def answered(self, slot: int, entities: Sequence[Entity]) -> None:
        """Lookup ``slot`` answered."""
        self.results[slot] = entities

    def failed(self, slot: int, exc: Exception) -> None:
        """Lookup ``slot`` raised: skipped and counted (retrieval never fails a turn)."""
        self.failures += 1
        # The identifier is user content: log its position, never its text. INFO: a read
        # loses nothing, the turn goes on, and RetrievalStats.failures says it happened.
        served = self.plan[slot][0]
        logger.info(
            "retrieval.lookup_failed",
            identifier_index=served[0] if served else -1,
            error_class=type(exc).__name__,
            error=error_label(exc),
        )

    def fill(self, answers: Sequence[LookupResult | Exception | None]) -> None:
        """Each lookup's answer or failure, by its slot (``None``: it never answered)."""
        for slot, answer in enumerate(answers):
            if isinstance(answer, Exception):
                self.failed(slot, answer)
            elif answer is not None:
                self.answered(slot, answer.entities)

    @property
    def unfinished(self) -> int:
        """Lookups that neither answered nor failed (still running at the deadline)."""
        return len(self.plan) - len(self.results) - self.failures


def plan_retrieval(
    identifiers: Sequence[str], text: str, *, limit: int, others: bool
) -> tuple[LooseWords, list[Lookup]] | None:
    """The loose words of ``text`` and the lookups of a retrieval (:func:`lookup_plan`);
    ``None`` when there is nothing to do: no room (``limit``), nothing to look up and
    nothing ``others`` (recency, a retriever) would read."""
    words = loose_words(text, identifiers)
    if limit <= 0 or (not identifiers and not words.lookups and not words.people and not others):
        return None
    return words, lookup_plan(identifiers, words.lookups, words.people)


def retrieval(
    identifiers: Sequence[str],
    text: str,
    *,
    limit: int,
    lookup_limit: int,
    include_bookkeeping: bool = False,
    threshold: float = DEFAULT_LINK_THRESHOLD,
    others: bool = False,
    plugin_asked: bool = False,
    loose: bool = True,
    started: float,
) -> Generator[Lookups, Found, Retrieved]:
    """A retrieval as a step of the turn machine: its plan (:func:`plan_retrieval`), one
    :class:`~._engine.requests.Lookups` request for it, answered with the :class:`Found`
    its reads filled in, and the ranking of what they found (:func:`rank_found`).

    ``others``: the driver reads more beside the lookups (the recent entities, an
    application's retriever: ``plugin_asked``), so a plan with no lookup still asks.
    ``loose``: also look up the message's other uncommon words (:mod:`._loose`).
    ``started``: the ``time.perf_counter()`` the retrieval began at (the driver's clock).
    Two drivers: :func:`retrieve` (concurrent, under a deadline, on a transport) and the
    hooks' on a store file (``transport.embedded._turns``, in turn).
    """
    planned = plan_retrieval(identifiers, text if loose else "", limit=limit, others=others)
    if planned is None:
        return Retrieved((), RetrievalStats(identifiers=len(identifiers)))
    words, plan = planned
    found: Found = yield Lookups(plan, lookup_limit)
    return rank_found(
        identifiers,
        found,
        limit=limit,
        include_bookkeeping=include_bookkeeping,
        threshold=threshold,
        text=text,
        started=started,
        plugin_asked=plugin_asked,
        loose=words,
    )


async def retrieve(
    transport: Transport,
    identifiers: Sequence[str],
    *,
    limit: int,
    max_concurrency: int,
    deadline_s: float | None,
    lookup_limit: int,
    include_bookkeeping: bool = False,
    threshold: float = DEFAULT_LINK_THRESHOLD,
    text: str = "",
    recent: RecentSource | None = None,
    retriever: Retriever | None = None,
    conversation_id: str = "",
    loose: bool = True,
) -> Retrieved:
    """Look every identifier up concurrently and rank the answers (never raises but cancel).

    At most ``max_concurrency`` lookups are in flight; they, ``recent`` (the conversation's
    recent entities) and ``retriever`` share one deadline, ``deadline_s`` seconds from now
    (``None``: no deadline). ``text`` is the user message (recency and the retriever read
    it). At most ``limit`` entities are retrieved, and as many candidates kept.
    ``loose``: also look up the message's other uncommon words and match names the store
    has against its word n-grams (:mod:`._loose`; off with an application's extractor).
    """
    import anyio  # here: a hook's retrieval on a store file runs without the event loop

    others = recent is not None or retriever is not None
    step = retrieval(
        identifiers,
        text,
        limit=limit,
        lookup_limit=lookup_limit,
        include_bookkeeping=include_bookkeeping,
        threshold=threshold,
        others=others,
        plugin_asked=retriever is not None,
        loose=loose,
        started=time.perf_counter(),
    )
    try:
        plan = next(step).plan
    except StopIteration as nothing:
        return nothing.value  # type: ignore[no-any-return]
    found = Found(plan)
    # Only needed when there are more lookups than may run at once (it costs checkpoints).
    limiter = anyio.Semaphore(max_concurrency) if len(plan) > max_concurrency else None

    async def lookup(slot: int) -> None:
        _, what, by, kind = plan[slot]
        if limiter is not None:
            await limiter.acquire()
        try:
            answer: LookupResult = await _lookup(transport, what, by, kind, lookup_limit)
        except Exception as exc:
            found.failed(slot, exc)
            return
        finally:
            if limiter is not None:
                limiter.release()
        found.answered(slot, answer.entities)

    async def read_recent() -> None:
        assert recent is not None
        try:
            found.recent = await recent()
        except Exception as exc:  # the history read logs its own failures
            logger.info("retrieval.recent_failed", error_class=type(exc).__name__)

    async def run_plugin() -> None:
        assert retriever is not None
        query = RetrievalQuery(text, tuple(identifiers), conversation_id, limit)
        try:
            found.plugin = list(await retriever(query))
        except Exception as exc:
            # WARNING, unlike a failed lookup: the application's own retriever raised (a bug
            # to fix, not a store that was away); the turn goes on without what it found.
            logger.warning(
                "retrieval.plugin_failed", error_class=type(exc).__name__, error=error_label(exc)
            )

    many = _many(transport) if len(plan) > 1 else None

    async def lookup_all() -> None:
        # One job for all of them (the embedded store): each answer or failure in its slot.
        assert many is not None
        answers: Sequence[LookupResult | Exception]
        try:
            answers = await many(lookup_bodies(plan, lookup_limit))
        except Exception as exc:
            answers = [exc] * len(plan)
        found.fill(answers)

    with anyio.move_on_after(deadline_s) as deadline:
        if retriever is None and (len(plan) <= 1 or many is not None):
            # The lookups are one call, and recency only waits for the history read already
            # under way beside the retrieval: nothing to run at once, so no task group.
            if many is not None:
                await lookup_all()
            elif plan:
                await lookup(0)
            if recent is not None:
                await read_recent()
        else:
            async with anyio.create_task_group() as tg:
                if many is not None:
                    tg.start_soon(lookup_all)
                else:
                    for slot in range(len(plan)):
                        tg.start_soon(lookup, slot)
                if recent is not None:
                    tg.start_soon(read_recent)
                if retriever is not None:
                    tg.start_soon(run_plugin)
    return ranked_step(step, found, deadline_s if deadline.cancelled_caught else None)


def lookup_bodies(plan: Sequence[Lookup], lookup_limit: int) -> list[dict[str, Any]]:
    """The ``retrieve_entity_by_identifier`` body of each lookup of ``plan``."""
    return [
        present(identifier=what, entity_type=kind, by=by, limit=lookup_limit)
        for _, what, by, kind in plan
    ]


def ranked_step(
    step: Generator[Lookups, Found, Retrieved], found: Found, timed_out: float | None
) -> Retrieved:
    """The end of a :func:`retrieval` step that asked for its lookups: ``found`` ranked.
    ``timed_out``: the deadline (seconds) that cut the reads short, or ``None``."""
    if timed_out is not None:
        logger.info("retrieval.timeout", deadline_s=timed_out, unfinished=found.unfinished)
    try:
        step.send(found)
    except StopIteration as ranked_found:
        return ranked_found.value  # type: ignore[no-any-return]
    raise RuntimeError("a retrieval asks for its lookups once")


#: A store that runs many lookups as one job (:meth:`EmbeddedStore.retrieve_many`).
ManyLookups = Callable[[Sequence[Mapping[str, Any]]], Awaitable[Sequence[LookupResult | Exception]]]


def _many(transport: Transport) -> ManyLookups | None:
    # Looked up on the class: a wrapper that forwards unknown attributes (a recording or
    # faulty transport, an import's shared lookups) sends its lookups one by one, as before.
    if getattr(type(transport), "retrieve_many", None) is None:
        return None
    many: ManyLookups = getattr(transport, "retrieve_many")  # noqa: B009
    return many


def _lookup(
    transport: Transport, what: str, by: str | None, kind: str | None, limit: int
) -> Awaitable[LookupResult]:
    # Only the options a lookup uses: a transport (or a test double) may take no others.
    if by is None and kind is None:
        return transport.retrieve_entity_by_identifier(what, limit=limit)
    if kind is None:
        return transport.retrieve_entity_by_identifier(what, by=by, limit=limit)
    return transport.retrieve_entity_by_identifier(what, entity_type=kind, by=by, limit=limit)


def rank_found(
    identifiers: Sequence[str],
    found: Found,
    *,
    limit: int,
    include_bookkeeping: bool,
    threshold: float,
    text: str,
    started: float,
    plugin_asked: bool = False,
    loose: LooseWords | None = None,
) -> Retrieved:
    """What the reads of a retrieval ``found`` (:class:`Found`), scored and ranked: the
    bounded set and the candidates.

    Pure but for the clock the stats read: every retrieval ranks here (the last of
    :func:`retrieval`'s step). ``started``: the
    ``time.perf_counter()`` the retrieval began at.
    """
    plan, results, recent_found, plugin_found = (
        found.plan,
        found.results,
        found.recent,
        found.plugin,
    )
    answered = [
        (index, identifiers[index], results[slot])
        for slot in sorted(results)
        for index in plan[slot][0]
    ]
    scored: list[Scored] = score_lookups(answered, include_bookkeeping)
    if loose is not None and (loose.lookups or loose.people):
        by_word = [e for slot in sorted(results) if not plan[slot][0] for e in results[slot]]
        scored += score_loose(loose, by_word, include_bookkeeping)
    scored += score_recent(recent_found, text, scored, include_bookkeeping)
    if plugin_found:
        scored += score_plugin(plugin_found, include_bookkeeping)
    everything = ranked(scored)
    linked = tuple(e for e in everything if e.score >= threshold)[:limit]
    # The last turns' entities the message does not name are shown (reason "recent"), not
    # linked: the agent sees who "him" is.
    window = {e.id for e in recent_found if e.raw.get("turns_ago", 0) < RECENT_WINDOW}
    shown = tuple(e for e in everything if e.score < threshold and e.id in window)
    shown = shown[: max(0, limit - len(linked))]
    candidates = tuple(e for e in everything if e.score < threshold and e not in shown)[:limit]
    stats = RetrievalStats(
        identifiers=len(identifiers),
        lookups=len(results),
        misses=sum(1 for entities in results.values() if not entities),
        failures=found.failures,
        timeouts=found.unfinished,
        retrieved=len(linked),
        ms=(time.perf_counter() - started) * 1000,
        candidates=len(candidates),
        recent=len(recent_found),
        plugin=None if plugin_asked and plugin_found is None else len(plugin_found or ()),
    )
    return Retrieved(linked, stats, candidates, shown)
