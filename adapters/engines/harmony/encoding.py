"""The gpt-oss harmony encoding, loaded once per process from the offline vocabulary."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from openai_harmony import HarmonyEncodingName, HarmonyError, load_harmony_encoding

from adapters.engines.harmony.vocab import ensure_vocabulary
from domain.errors import EngineError


@functools.cache
def gpt_oss_encoding(cache_dir: Path | None = None) -> Any:
    """`o200k_harmony`, the encoding gpt-oss was trained with; raises `EngineError` naming
    the fix when the vocabulary is missing."""
    ensure_vocabulary(cache_dir)
    try:
        return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    except HarmonyError as e:
        raise EngineError(
            f"openai-harmony could not load the gpt-oss encoding: {e}",
            code="harmony_vocabulary_missing",
        ) from e


def stop_token_ids(encoding: Any) -> list[int]:
    """Where an assistant turn ends: `<|return|>` and `<|call|>` (not `<|end|>`)."""
    return sorted(encoding.stop_tokens_for_assistant_actions())


def special_token(encoding: Any, token: str) -> int:
    """The id of a special token (`<|start|>`, `<|message|>`...). openai-harmony's `encode`
    takes a millisecond for it (it builds its set of special tokens to check the text), so
    callers find the ids they need once."""
    (rank,) = encoding.encode(token, allowed_special={token})
    return int(rank)
