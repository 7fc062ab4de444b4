"""This process's cache of `previous_response_id` histories: for a response a create
continued, the turns up to and including it (a `History`, domain/generation.py), under the
chain-break count the read model had when they were read (`ResponseIndex.chain_tip`).

A create continuing response R then reads R alone: if the history up to R's predecessor is
here under the current count, no turn before R was deleted, erased or collected since it
was read (every delete, erasure and `gc` of responses raises the count), so it is the
history a walk of the chain would rebuild, and R's turn is added to it; else the chain is
walked (service/prompts/history.py). The rest of an ended response cannot change: its
status, owner, `store`, and what it was sent and answered are final, but for an erasure.
Bounded: the least recently used histories go first.
"""

from __future__ import annotations

from collections import OrderedDict

from domain.generation import History

SIZE = 512  # histories kept: each holds its turns by reference, shared with its chain's


class ChainCache:
    """Histories by (owner, the id of their last response), each under its break count."""

    def __init__(self, size: int = SIZE) -> None:
        self._size = size
        self._kept: OrderedDict[tuple[str, str], tuple[int, History]] = OrderedDict()

    def get(self, owner: str, response_id: str, breaks: int) -> History | None:
        """The history ending with `response_id` if it was read at `breaks`, else None."""
        key = (owner, response_id)
        found = self._kept.get(key)
        if found is None:
            return None
        if found[0] != breaks:  # a delete or an erasure since: walked again
            del self._kept[key]
            return None
        self._kept.move_to_end(key)
        return found[1]

    def put(self, owner: str, response_id: str, breaks: int, history: History) -> None:
        self._kept[(owner, response_id)] = (breaks, history)
        self._kept.move_to_end((owner, response_id))
        while len(self._kept) > self._size:
            self._kept.popitem(last=False)

    def clear(self) -> None:
        """Forget every history (as a process that starts, or one that never read them)."""
        self._kept.clear()

    def __len__(self) -> int:
        return len(self._kept)
