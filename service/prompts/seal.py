"""The seal stage: a reasoning or compaction item whose sealed blob does not open here is
refused before anything is written (OpenAI's 400 `invalid_encrypted_content`); the engine
wrapper that opens the blobs a prompt carries is service/reasoning/sealing.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from domain.errors import InvalidRequest
from domain.objects import InputCompaction, InputReasoning
from service.reasoning.sealing import Sealer


def check_sealed(sealer: Sealer, items: Sequence[object]) -> None:
    """Refuse, before anything is written, a reasoning item whose blob does not open here
    (OpenAI's 400 `invalid_encrypted_content`)."""
    for item in items:
        if isinstance(item, InputCompaction):
            if sealer.open(item.encrypted_content) is None:
                raise InvalidRequest(
                    f"The encrypted content for item {item.id or 'compaction'} could not be "
                    "verified.",
                    param="input",
                    code="invalid_encrypted_content",
                )
            continue
        if not isinstance(item, InputReasoning) or not item.encrypted_content or item.content:
            continue
        if sealer.open(item.encrypted_content) is None:
            raise InvalidRequest(
                f"The encrypted content for item {item.id or 'reasoning'} could not be verified.",
                param="input",
                code="invalid_encrypted_content",
            )
