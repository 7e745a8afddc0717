"""The shared prefixes of a workload's protected requests (what `flatshare warmup` loads)."""

from __future__ import annotations

from flatshare.workloads.spec import parse_spec
from flatshare.workloads.warmup import protected_prefixes


def test_the_voice_agents_system_prompt_is_the_one_protected_prefix() -> None:
    workload = parse_spec("voice-agents:callers=2,agents=3,duration=60,voice_system=1200", seed=3)
    (prefix,) = protected_prefixes(workload)
    assert prefix.group == "voice-system" and prefix.priority == 0 and len(prefix.token_ids) == 1200
    voice = [r for r in workload.requests() if r.cls == "voice"]
    assert voice and all(r.prompt_token_ids[:1200] == prefix.token_ids for r in voice)
    assert not protected_prefixes(workload, protect_priority=-1)  # nothing that important


def test_a_workload_without_protected_shared_prefixes_has_none() -> None:
    agents = parse_spec("agents:n=3,duration=60", seed=1)
    assert protected_prefixes(agents) == ()  # agents run at priority 10: none is protected
