"""The swap of large data URLs in request facts for references and back
(adapters/store/blobs.py): exact, and never fooled by text a client sent."""

from __future__ import annotations

import hashlib
import json

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from adapters.store.blobs import THRESHOLD, extract, put_back, references

BIG = "data:text/plain," + "x" * THRESHOLD


def _facts(value: str, **extra: object) -> str:
    part = {"type": "input_file", "file_data": value, "filename": "a.txt"}
    doc = {"owner": "o", "input": [{"role": "user", "content": [part]}], **extra}
    return msgspec.json.encode(doc).decode()


def test_a_large_data_url_becomes_a_reference_and_comes_back_byte_for_byte() -> None:
    facts = _facts(BIG)
    found: dict[str, str] = {}
    stored = extract(facts, found)
    digest = hashlib.sha256(BIG.encode()).hexdigest()
    assert found == {digest: BIG} and BIG not in stored
    assert references(stored) == {digest}
    assert put_back(stored, found) == facts


def test_a_small_data_url_stays_inline() -> None:
    facts = _facts("data:text/plain,hi")
    found: dict[str, str] = {}
    assert extract(facts, found) == facts and not found


@given(st.text(min_size=1, max_size=50))
def test_escapes_in_the_data_url_survive(tail: str) -> None:
    value = BIG + tail  # quotes, backslashes, control characters: JSON escapes them
    facts = _facts(value)
    found: dict[str, str] = {}
    stored = extract(facts, found)
    assert put_back(stored, found) == facts
    assert json.loads(put_back(stored, found))["input"][0]["content"][0]["file_data"] == value


def test_text_a_client_sent_is_never_taken_for_a_reference() -> None:
    digest = hashlib.sha256(BIG.encode()).hexdigest()
    forged = f"blob:sha256:{digest}"
    keys = ("image_url", "file_data", "schema", "parameters")
    facts = _facts(forged, metadata={k: forged for k in keys}, schema={"schema": forged})
    assert references(facts) == set()
    assert put_back(facts, {digest: BIG}) == facts
