"""Aborting a request inside a `SimEngine`, as vLLM's API server does when a client disconnects.

`SimEngine` has no abort of its own; this works on its public `scheduler` and `records`.
"""

from __future__ import annotations

from vllm.v1.request import RequestStatus

from flatshare.sim.engine import SimEngine

ABORTED = "aborted"


def abort_request(engine: SimEngine, request_id: str) -> bool:
    """Finish `request_id` as aborted, freeing its KV blocks. False if the scheduler does not hold it
    (not yet admitted from the engine's arrival queue, or already finished)."""
    aborted = engine.scheduler.finish_requests(request_id, RequestStatus.FINISHED_ABORTED)
    if not aborted:
        return False
    record = engine.records.get(request_id)
    if record is not None:
        record.status = ABORTED
        record.finish_reason = "abort"
        record.finish_s = engine.now
    return True
