"""Stream ids: the second they were made, then randomness (service/ids.py)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from service.conversations import api as conversation_uc
from service.ids import made_at, new_id
from tests.unit.conftest import Processes
from tests.unit.test_service import run_to_end

SECONDS = st.floats(min_value=0, max_value=2**32 - 1, allow_nan=False)


@given(SECONDS)
def test_an_id_is_its_prefix_then_50_hex_digits_and_carries_its_second(now: float) -> None:
    made = new_id("resp", now)
    assert re.fullmatch(r"resp_[0-9a-f]{50}", made)
    assert made_at(made) == int(now)


@given(SECONDS, SECONDS)
def test_ids_of_different_seconds_sort_as_their_seconds(a: float, b: float) -> None:
    if int(a) != int(b):
        assert (new_id("conv", a) < new_id("conv", b)) == (int(a) < int(b))


def test_ids_of_the_same_second_differ() -> None:
    made = {new_id("resp", 1_800_000_000.5) for _ in range(10_000)}
    assert len(made) == 10_000


def test_ids_of_other_shapes_carry_no_time() -> None:
    before = "resp_" + "0123456789abcdef" * 3  # 48 random hex digits: the ids of before
    assert made_at(before) is None
    assert made_at("resp_" + "A" * 50) is None  # not lower-case hex
    assert made_at("resp_" + "0" * 49) is None
    assert made_at("0" * 55) is None  # no prefix
    assert made_at("resp_bench1") is None


async def test_the_service_makes_ids_of_the_second_it_creates_in(processes: Processes) -> None:
    svc = await processes.start()
    response = await run_to_end(svc, input="hello")
    stamped = made_at(response.id)
    assert stamped is not None and response.created_at - 1 <= stamped <= response.created_at
    conversation = await conversation_uc.create_conversation(svc, [], {}, "alice")
    stamped = made_at(conversation.id)
    assert stamped is not None
    assert conversation.created_at - 1 <= stamped <= conversation.created_at


def test_every_input_item_kind_has_an_id_prefix() -> None:
    """A kind without one would fail a request that sends it without an id (a 500)."""
    from typing import get_args

    from domain.objects import INPUT_ID_PREFIX, InputItem

    assert set(INPUT_ID_PREFIX) == set(get_args(InputItem))
