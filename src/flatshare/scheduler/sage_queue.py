"""A vLLM waiting queue ordered by a key computed when a request enters it: sage's `self.waiting`.

It implements vLLM 0.32's `RequestQueue` interface (`vllm.v1.core.sched.request_queue`), which is all
vLLM's scheduler uses of its waiting queue, so `schedule()` runs unchanged over it. A request's key is
computed once per insertion (`add_request`, `prepend_request(s)`: vLLM puts skipped and preempted requests
back through them), so each operation costs the key plus O(log n) heap work; `remove_requests` and
iteration cost O(n log n), as vLLM's own priority queue's do. Ties go to the earlier insertion.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from vllm.v1.core.sched.request_queue import RequestQueue
from vllm.v1.request import Request

Key = tuple[Any, ...]


class IndexQueue(RequestQueue):
    """Requests in ascending `key(request)` order (smaller first)."""

    def __init__(self, key: Callable[[Request], Key]) -> None:
        self._key = key
        self._heap: list[tuple[Key, int, Request]] = []
        self._seq = itertools.count()

    def add_request(self, request: Request) -> None:
        heapq.heappush(self._heap, (self._key(request), next(self._seq), request))

    def pop_request(self) -> Request:
        if not self._heap:
            raise IndexError("pop from an empty queue")
        return heapq.heappop(self._heap)[2]

    def peek_request(self) -> Request:
        if not self._heap:
            raise IndexError("peek from an empty queue")
        return self._heap[0][2]

    def prepend_request(self, request: Request) -> None:
        """Re-queued by its key, like vLLM's priority queue (there is no front to put it at)."""
        self.add_request(request)

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        for request in requests:
            self.add_request(request)

    def remove_request(self, request: Request) -> None:
        """Remove `request`; ValueError when it is not queued (as vLLM's queues raise)."""
        if not any(entry[2] is request for entry in self._heap):
            raise ValueError("request not in the queue")
        self.remove_requests((request,))

    def remove_requests(self, requests: Iterable[Request]) -> None:
        gone = {id(r) for r in requests}
        self._heap = [entry for entry in self._heap if id(entry[2]) not in gone]
        heapq.heapify(self._heap)

    def keys(self) -> list[Key]:
        """The keys in queue order (for tests and counters)."""
        return [entry[0] for entry in sorted(self._heap, key=lambda e: (e[0], e[1]))]

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        return iter([entry[2] for entry in sorted(self._heap, key=lambda e: (e[0], e[1]))])
