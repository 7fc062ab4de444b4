"""A response's events live, whoever owns it: the audit view's SSE, the `/v1` stream's
twin for an auditor."""

from __future__ import annotations

from domain.errors import NotFound
from service.bundle import Bundle
from service.ports import Batches
from service.responses import reads


async def follow_events(svc: Bundle, rid: str) -> Batches:
    """The response's events from its first, live until its terminal one."""
    row = await svc.index.get(rid)
    if row is None:
        raise NotFound(f"No response with id '{rid}' found.")
    return await reads.read_events(svc, rid, row.owner, after=-1, follow=True)
