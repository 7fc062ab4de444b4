"""The decoded turns a continuation reuses (service/prompts/history.py `Decoded`): a turn is
decoded once while its stored bytes stay the same, afresh once they change (an erasure), and
what is kept stays under its byte bound."""

from __future__ import annotations

from service.prompts.history import Decoded

FACTS = (
    b'{"input": [{"type": "message", "id": "msg_1", "role": "user",'
    b' "content": [{"type": "input_text", "text": "hi"}]}]}'
)


def snapshot(instructions: str) -> bytes:
    return b'{"instructions": "%s", "output": []}' % instructions.encode()


def test_a_turn_is_decoded_once_while_its_bytes_stay_the_same() -> None:
    decoded = Decoded()
    first = decoded.turn("resp_1", snapshot("be brief"), FACTS)
    again = decoded.turn("resp_1", bytes(snapshot("be brief")), bytes(FACTS))
    assert again is first
    assert first.instructions == "be brief"
    assert first.input[0].content[0].text == "hi"  # type: ignore[union-attr]


def test_a_turn_whose_bytes_changed_is_decoded_afresh() -> None:
    decoded = Decoded()
    decoded.turn("resp_1", snapshot("the secret plan"), FACTS)
    erased = decoded.turn("resp_1", snapshot("[erased]"), FACTS)
    assert erased.instructions == "[erased]"


def test_what_is_kept_stays_under_its_bound() -> None:
    one = len(snapshot("x" * 100)) + len(FACTS)
    decoded = Decoded(max_bytes=10 * one, max_one=2 * one)
    turns = [decoded.turn(f"resp_{n}", snapshot("x" * 100), FACTS) for n in range(50)]
    assert len(decoded) == 10
    assert decoded.turn("resp_49", snapshot("x" * 100), FACTS) is turns[-1]  # the newest kept
    assert decoded.turn("resp_0", snapshot("x" * 100), FACTS) is not turns[0]  # the oldest not
    decoded.turn("resp_big", snapshot("x" * (3 * one)), FACTS)
    assert len(decoded) == 10  # a turn over `max_one` is not kept
