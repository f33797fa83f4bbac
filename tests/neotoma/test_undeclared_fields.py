"""Fields an entity's type does not declare: every store keeps them off the snapshot, so
``remember`` and ``t.remember`` warn, naming each one and the declared field it may mean."""

from __future__ import annotations

import warnings

import pytest
from turn_support import db_path, memory, store

import neotoma_agent
from neotoma_agent import UndeclaredFieldWarning
from neotoma_agent.transport._base import Transport

__all__ = ["db_path", "store"]

pytestmark = pytest.mark.anyio

SECRET = "Alice's doctor, Dr. Pereira"


async def test_remember_warns_of_each_undeclared_field_and_never_its_value(
    store: Transport,
) -> None:
    m = memory(store)
    with pytest.warns(UndeclaredFieldWarning) as caught:
        alice = await m.remember("person", name="Alice", note=SECRET, favourite_color="blue")
    (warning,) = caught
    assert warning.filename == __file__  # the application's line, not the library's
    assert isinstance(warning.message, UndeclaredFieldWarning)
    assert warning.message.entity_type == "person"
    assert warning.message.fields == (("note", "notes"), ("favourite_color", None))
    text = str(warning.message)
    assert "'note' (did you mean 'notes'?)" in text
    assert "'favourite_color'" in text
    assert SECRET not in text
    assert "blue" not in text
    # What the warning is about: the store kept only the declared field.
    assert dict((await store.get_entity_snapshot(alice)).snapshot) == {"name": "Alice"}


async def test_t_remember_warns_too(store: Transport) -> None:
    m = memory(store)
    async with m.turn("Book the board room", turn_id="t1") as t:
        with pytest.warns(UndeclaredFieldWarning, match=r"'locaton' \(did you mean 'location'\?\)"):
            t.remember("event", title="Board meeting", locaton="Room 4B")
        t.reply = "Booked."


async def test_declared_fields_and_types_without_a_schema_do_not_warn(store: Transport) -> None:
    m = memory(store)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        await m.remember("person", name="Ana Lopez", role="CTO", notes="met in Lisbon")
        await m.remember("recipe", name="Pancakes", flour="200g", favourite="yes")


def test_the_warning_is_public_and_a_user_warning() -> None:
    assert neotoma_agent.UndeclaredFieldWarning is UndeclaredFieldWarning
    assert issubclass(UndeclaredFieldWarning, UserWarning)


async def test_fields_expected_inside_the_block_are_stored_silently_and_only_there(
    store: Transport,
) -> None:
    import anyio

    m = memory(store)
    block_open, elsewhere_done = anyio.Event(), anyio.Event()

    async def elsewhere() -> None:
        # A task started before the block, running while it is open, still gets its warning.
        await block_open.wait()
        with pytest.warns(UndeclaredFieldWarning):
            await m.remember("person", name="Bo", nickname="B")
        elsewhere_done.set()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        async with anyio.create_task_group() as tg:
            tg.start_soon(elsewhere)
            with neotoma_agent.expect_undeclared_fields():
                block_open.set()
                kept = await m.remember("person", name="Cy", trigger="auto")
                await elsewhere_done.wait()
    observation = (await store.list_observations(kept)).observations[0]
    assert observation.fields["trigger"] == "auto"  # kept on the observation
    with pytest.warns(UndeclaredFieldWarning):  # and the block is over
        await m.remember("person", name="Di", trigger="auto")
