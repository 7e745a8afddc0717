"""The gate's session -> backend map (issue 32, item 4): bounded in time and count, whatever clients send."""

from __future__ import annotations

import pytest

from flatshare.policy.gates import GateEvent, GateRequest, make_gate
from flatshare.policy.gates.sessions import SessionLimits, SessionMap


def test_an_entry_expires_ttl_after_its_last_request() -> None:
    sessions = SessionMap(SessionLimits(ttl_s=10.0, most=100))
    sessions.set("a", "b0", 0.0)
    sessions.set("b", "b1", 5.0)
    sessions.set("a", "b1", 8.0)  # a's last request: its clock restarts
    assert sessions.get("b", 14.9) == "b1" and sessions.get("b", 15.0) is None
    assert sessions.get("a", 17.9) == "b1" and sessions.get("a", 18.0) is None
    assert len(sessions) == 0 and sessions.expired == 2


def test_past_the_count_the_least_recently_used_goes() -> None:
    sessions = SessionMap(SessionLimits(ttl_s=1e9, most=3))
    for i in range(10):
        sessions.set(f"s{i}", "b0", float(i))
    assert len(sessions) == 3 and sessions.evicted == 7
    assert [sessions.get(f"s{i}", 10.0) for i in (6, 7, 8, 9)] == [None, "b0", "b0", "b0"]


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="session_ttl_s"):
        SessionLimits(ttl_s=0)
    with pytest.raises(ValueError, match="max_sessions"):
        SessionLimits(most=0)


def test_a_gate_forgets_a_session_after_its_ttl() -> None:
    """An event for a session the gate forgot (no backend given) opens no lease."""
    gate = make_gate("leaseholder")
    gate.limit_sessions(SessionLimits(ttl_s=60.0, most=10))
    gate.arrive(GateRequest("r1", "b0", priority=0, prompt_tokens=10, session_id="t/call"), 0.0)
    gate.finished("r1", 1.0)
    gate.event(GateEvent("caller_speaking", "t/call"), 30.0)
    gate.event(GateEvent("caller_speaking", "t/call"), 100.0)
    assert gate.counters["leases"] == 1
