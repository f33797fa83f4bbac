"""A history page derives each turn record's id from its conversation's and turn's ids: it
names the record with the turn_key its turn's store gave it, so that the identity that store
resolved is found memoised. The id must be the one the identity rules give those two ids
alone, for any text (whitespace-only ids among them, where the rule does not decide)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from neotoma_agent._neotoma import identity
from neotoma_agent._neotoma.identity import IdentityError, resolve_identity
from neotoma_agent._records.keys import turn_keys
from neotoma_agent._records.payloads import turn_record
from neotoma_agent.transport.embedded._history_page import turn_record_id

_ID = st.text(st.sampled_from(["a", "Z", "0", ":", "|", "-", " ", "\t", "\u00a0", "@", "é"]))


def _plain(session: str, turn_id: str, tenant: str | None) -> str | None:
    # The identity rules on the two ids alone, with no memo.
    try:
        found = resolve_identity("conversation_turn", {"session_id": session, "turn_id": turn_id})
    except IdentityError:
        return None
    return found.in_tenant(tenant).entity_id


@given(session=_ID, turn_id=_ID, tenant=st.sampled_from([None, "u1"]))
def test_turn_record_id_is_the_rules_on_the_two_ids(
    session: str, turn_id: str, tenant: str | None
) -> None:
    turn_record_id.cache_clear()
    expected = _plain(session, turn_id, tenant)
    try:
        got: str | None = turn_record_id(session, turn_id, tenant)
    except IdentityError:
        got = None
    assert got == expected


def test_a_turns_record_id_is_found_memoised() -> None:
    # The record a turn stores resolves its identity from its payload; the page's derivation
    # of the same record is then a hit of that memo, not another run of the rules.
    payload = turn_record(turn_keys("conv-memo", "t7"), "open")
    fields = {k: v for k, v in payload.items() if k != "entity_type"}
    stored = identity.resolve_identity_cached("conversation_turn", fields)
    turn_record_id.cache_clear()
    before = identity._resolve_items.cache_info()
    assert turn_record_id("conv-memo", "t7", None) == stored.entity_id
    after = identity._resolve_items.cache_info()
    assert (after.hits - before.hits, after.misses - before.misses) == (1, 0)
