"""The traffic classes live in one place: every gate's settings carry the bounds of `policy.classes`, and
the workloads' priorities come from the same constants."""

from __future__ import annotations

import pytest

from flatshare.policy.classes import AGENT_PRIORITY, DEFAULT_PRIORITY, VOICE_PRIORITY, Classes, ClassSettings
from flatshare.policy.gates import BASELINE_NAMES, make_gate, make_settings


@pytest.mark.parametrize("name", BASELINE_NAMES)
def test_every_gate_classes_requests_by_the_shared_bounds(name: str) -> None:
    settings = make_settings(name)
    assert isinstance(settings, ClassSettings) and settings.classes() == Classes()
    gate = make_gate(name, {"voice_max_priority": 2, "agent_min_priority": 5})
    assert [gate.classes.of(p) for p in (2, 3, 5)] == ["voice", "other", "agent"]
    with pytest.raises(ValueError, match="must be below agent_min_priority"):
        make_settings(name, {"voice_max_priority": 10, "agent_min_priority": 10})


def test_workload_classes_fall_on_the_right_side_of_the_bounds() -> None:
    classes = Classes()
    assert classes.of(DEFAULT_PRIORITY["voice"]) == "voice" == classes.of(VOICE_PRIORITY)
    assert classes.of(DEFAULT_PRIORITY["agent"]) == "agent" == classes.of(AGENT_PRIORITY)
    assert {classes.of(DEFAULT_PRIORITY[c]) for c in ("chat", "code", "short")} == {"other"}
