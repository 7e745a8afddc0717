"""What the steps of one co-location run carry, and why agent prefill is missing from a voice reply's steps.

Runs one condition of the seed preset (2 callers, 24 agents) on the simulated engine and watches every
step: how much of the engine's time carries agent prefill, what share of the steps that decode a voice
reply also carry agent prefill (in the first seed nearly all did: "a voice reply's tokens came 60 to 66
milliseconds apart" beside agent prefill), and, for the voice decode steps without it, why no agent
prefilled: agents waiting, free KV (vLLM's count: free blocks, cached ones nobody holds included), and
whether the first waiting agent fits: admitting it takes its cached prefix blocks out of the free pool,
then new blocks for its whole CPU-tier hit (vLLM allocates a waiting request's external hit at admission)
and its first chunk; vLLM's scheduler stops at the first waiting request it cannot place
(`Scheduler.schedule`'s waiting loop), so agents behind it wait too. It also gives the median time of a
voice decode step (the gap between a reply's tokens) by how many agent prefills the step carried, beside
the seed's 60-66 ms "beside three long agent prefills".

    .venv/bin/python tools/step_mix.py --condition vllm-priority --seed 0 --duration 600
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass, field
from typing import Any

from flatshare.colocation.experiment import MAIN_CONDITIONS, ColocationPlan, build_run
from flatshare.colocation.setup import SEED
from flatshare.replay.virtual import run_virtual
from flatshare.sim.connector import SimCpuTierConnector
from flatshare.sim.engine import SimEngine, StepReport


@dataclass
class StepMix:
    """Counts over one run's steps (seconds of engine time, steps, tokens)."""

    busy_s: float = 0.0
    agent_prefill_s: float = 0.0
    voice_decode_steps: int = 0
    voice_decode_with_agent_prefill: int = 0
    # voice decode steps without agent prefill:
    agents_waiting: int = 0
    running_agents: int = 0
    free_kv_tokens: int = 0
    head_local_hit_tokens: int = 0
    head_tier_hit_tokens: int = 0
    head_does_not_fit: int = 0
    head_tier_hit_over_free: int = 0
    # agents' tokens, over the whole run:
    agent_prefill_tokens: int = 0
    agent_decode_tokens: int = 0
    agent_decode_only_steps_s: float = 0.0
    # how long each voice decode step took (the gap between a reply's tokens), by agent prefills in it:
    voice_step_s_by_prefills: dict[int, list[float]] = field(default_factory=dict)
    # running agents whose prompt is not yet all computed (mid-prefill), summed over voice decode steps:
    agents_mid_prefill: int = 0

    def _gaps(self) -> dict[str, float]:
        """Median step time of voice decode steps with no, one, two and three or more agent prefills."""
        groups: list[list[float]] = [[], [], [], []]
        for n, ts in self.voice_step_s_by_prefills.items():
            groups[min(n, 3)].extend(ts)
        out: dict[str, float] = {}
        for label, times in zip(("no", "1", "2", "3+"), groups, strict=True):
            out[f"voice_decode_step_ms_median_with_{label}_agent_prefill"] = (
                round(1e3 * statistics.median(times), 1) if times else float("nan")
            )
            out[f"voice_decode_steps_with_{label}_agent_prefill"] = len(times)
        return out

    def report(self, virtual_s: float) -> dict[str, float]:
        bare = max(1, self.voice_decode_steps - self.voice_decode_with_agent_prefill)
        waiting = max(1, self.agents_waiting)
        return {
            "engine_busy_share": round(self.busy_s / virtual_s, 3),
            "time_with_agent_prefill_share": round(self.agent_prefill_s / virtual_s, 3),
            "voice_decode_steps": self.voice_decode_steps,
            "voice_decode_steps_with_agent_prefill_share": round(
                self.voice_decode_with_agent_prefill / max(1, self.voice_decode_steps), 3
            ),
            "without_it_agents_waiting_share": round(self.agents_waiting / bare, 3),
            "without_it_running_agents_mean": round(self.running_agents / bare, 2),
            "without_it_free_kv_tokens_mean": round(self.free_kv_tokens / bare),
            "without_it_first_waiting_agent_prefix_hit_tokens_mean": round(
                self.head_local_hit_tokens / waiting
            ),
            "without_it_first_waiting_agent_tier_hit_tokens_mean": round(self.head_tier_hit_tokens / waiting),
            "without_it_first_waiting_agent_does_not_fit_share": round(self.head_does_not_fit / waiting, 3),
            "without_it_its_tier_hit_alone_over_free_kv_share": round(
                self.head_tier_hit_over_free / waiting, 3
            ),
            "agent_prefill_tokens_computed": self.agent_prefill_tokens,
            "agent_decode_tokens": self.agent_decode_tokens,
            "time_in_steps_with_agent_decode_and_no_prefill_share": round(
                self.agent_decode_only_steps_s / virtual_s, 3
            ),
            "voice_decode_steps_agents_mid_prefill_mean": round(
                self.agents_mid_prefill / max(1, self.voice_decode_steps), 2
            ),
            **self._gaps(),
        }


def _is_agent(request_id: str) -> bool:
    return request_id.startswith("agent")


def _watch(engine: SimEngine, mix: StepMix) -> None:
    scheduler = engine.scheduler
    connector = scheduler.get_kv_connector()
    tier = connector.tier if isinstance(connector, SimCpuTierConnector) else None
    block = engine.config.block_size

    def on_step(report: StepReport) -> None:
        took = report.end_s - report.start_s
        mix.busy_s += took
        agents = [n for r, n in report.scheduled.items() if _is_agent(r)]
        prefill = [n for n in agents if n > 1]
        agent_prefill = bool(prefill)
        mix.agent_prefill_s += took if agent_prefill else 0.0
        mix.agent_prefill_tokens += sum(prefill)
        mix.agent_decode_tokens += len(agents) - len(prefill)
        if agents and not agent_prefill:
            mix.agent_decode_only_steps_s += took
        if not any(r.startswith("voice") and n == 1 for r, n in report.scheduled.items()):
            return
        mix.voice_decode_steps += 1
        mix.voice_step_s_by_prefills.setdefault(len(prefill), []).append(took)
        mix.agents_mid_prefill += sum(
            1
            for r in scheduler.running
            if _is_agent(r.request_id) and r.num_computed_tokens < r.num_prompt_tokens
        )
        if agent_prefill:
            mix.voice_decode_with_agent_prefill += 1
            return
        free = scheduler.kv_cache_manager.block_pool.get_num_free_blocks() * block
        mix.free_kv_tokens += free
        mix.running_agents += sum(1 for r in scheduler.running if _is_agent(r.request_id))
        waiting = [r for r in scheduler.waiting if _is_agent(r.request_id)]
        if not waiting:
            return
        mix.agents_waiting += 1
        head = waiting[0]
        blocks, local = scheduler.kv_cache_manager.get_computed_blocks(head)[:2]
        start, end = local // block, min(head.num_tokens // block, len(head.block_hashes))
        hits = tier.lookup(head.block_hashes[start:end]) if tier is not None and end > start else 0
        hit = (hits or 0) * block
        chunk = min(head.num_tokens - local - hit, engine.config.max_num_batched_tokens)
        # What admitting it takes from the free pool: its cached prefix blocks nobody holds (they count
        # as free), then new blocks for the CPU-tier hit and the first chunk.
        cached_free = sum(1 for b in blocks.blocks[0] if b.ref_cnt == 0)
        needs = cached_free + -(-(hit + chunk) // block)
        mix.head_local_hit_tokens += local
        mix.head_tier_hit_tokens += hit
        mix.head_does_not_fit += int(needs > free // block)
        mix.head_tier_hit_over_free += int(hit > 0 and -(-hit // block) > free // block - cached_free)

    engine.on_step = on_step


def step_mix(condition: str, seed: int, duration_s: float, changes: dict[str, Any]) -> dict[str, float]:
    """Run `condition` (2 callers) on the seed preset with `changes` and count what its steps carry."""
    plan = ColocationPlan(callers=(2,), seeds=1, duration_s=duration_s, setup=SEED.with_changes(**changes))
    chosen = next(c for c in MAIN_CONDITIONS if c.key == condition)
    workload, engine, _, _ = build_run(chosen, 2, seed, plan)
    mix = StepMix()
    _watch(engine, mix)
    run_virtual(workload, [engine], until_s=duration_s, stop_s=duration_s + plan.drain_s)
    agents = [r for r in engine.records.values() if _is_agent(r.id) and r.first_scheduled_s is not None]
    tier = engine.cpu_tier_counters()
    return {
        **mix.report(engine.now),
        "agent_requests_started": len(agents),
        "agent_prompt_tokens_of_those": sum(r.prompt_tokens for r in agents),
        "cpu_tier_tokens_loaded": tier.get("load_tokens", 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--condition", default="vllm-priority", choices=[c.key for c in MAIN_CONDITIONS])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--duration", type=float, default=600.0)
    parser.add_argument(
        "--setup", default="{}", help="changes to the seed preset, JSON: '{\"cpu_tier_tokens\": 0}'"
    )
    args = parser.parse_args()
    print(json.dumps(step_mix(args.condition, args.seed, args.duration, json.loads(args.setup)), indent=1))


if __name__ == "__main__":
    main()
