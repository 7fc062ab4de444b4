"""WAL positions as the replica reads them (adapters/store/replica.py `lsn`): PostgreSQL's
`high/low` hexadecimal text as one number that orders as the WAL does."""

from __future__ import annotations

from adapters.store.replica import lsn


def test_a_position_is_its_two_halves() -> None:
    assert lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert lsn("0/0") == 0


def test_positions_order_as_the_wal() -> None:
    assert lsn("0/FFFFFFFF") < lsn("1/0") < lsn("1/1") < lsn("A/0")


def test_no_position_is_the_start() -> None:
    # A standby that replays nothing (or a primary) gives NULL: it has replayed nowhere.
    assert lsn(None) == 0
    assert lsn("") == 0
