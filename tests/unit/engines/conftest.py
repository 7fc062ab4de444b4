"""Shared fixtures of the engine unit tests."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from adapters.engines.harmony import HarmonyRenderer, gpt_oss_encoding


@pytest.fixture(scope="session")
def encoding() -> Any:
    return gpt_oss_encoding()


@pytest.fixture
def renderer(encoding: Any) -> HarmonyRenderer:
    return HarmonyRenderer(encoding, today=lambda: date(2025, 6, 28))
