"""The shared experiment framework without vLLM: executors report failed jobs (condition and seed) while
the others complete, run follow-up jobs, and run folders appear whole or not at all."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from flatshare.errors import InputError
from flatshare.lab.executors import LocalExecutor, make_executor
from flatshare.lab.jobs import Job, JobFailure, JobsFailed
from flatshare.runfiles.files import atomic_folder, read_json, read_jsonl, write_json, write_jsonl


def square_unless_bad(job: Job[int]) -> int:
    if job.condition == "bad":
        raise ValueError(f"no run for seed {job.seed}")
    return job.params * job.params


JOBS = [Job("good", 0, 2), Job("bad", 3, 0), Job("good", 1, 5)]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failing_job_is_reported_with_its_condition_and_seed_while_the_others_complete(
    workers: int,
) -> None:
    done: list[tuple[str, int, JobFailure | None]] = []
    failures = LocalExecutor(workers).run(
        JOBS, square_unless_bad, lambda j, f: done.append((j.condition, j.seed, f))
    )
    assert failures == [JobFailure("bad", 3, "ValueError: no run for seed 3")]
    assert sorted((c, s) for c, s, f in done if f is None) == [("good", 0), ("good", 1)]
    assert len(done) == 3
    assert "bad seed 3: ValueError" in str(JobsFailed(failures))


def then_one_more(job: Job[int], result: Any) -> list[Job[int]]:
    return [Job("follow", job.seed, result)] if job.condition == "good" else []


@pytest.mark.parametrize("workers", [1, 2])
def test_follow_up_jobs_run_after_the_job_that_releases_them(workers: int) -> None:
    seen: list[str] = []
    failures = LocalExecutor(workers).run(
        [Job("good", 0, 3)],
        square_unless_bad,
        lambda j, f: seen.append(f"{j.condition}:{j.params}"),
        then_one_more,
    )
    assert failures == [] and seen == ["good:3", "follow:9"]


def test_executor_options_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert make_executor("local", 1) == LocalExecutor(1)
    with pytest.raises(InputError, match="--executor must be one of local, ray"):
        make_executor("threads")
    with pytest.raises(InputError, match="--ray-address: only with --executor ray"):
        make_executor("local", ray_address="127.0.0.1:6379")
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find_spec(name, *a)
    )
    with pytest.raises(
        InputError, match=r"Ray is not installed; install the extra: pip install -e '\.\[ray\]'"
    ):
        make_executor("ray")


def test_a_run_folder_appears_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "runs" / "x" / "s0"
    with pytest.raises(RuntimeError), atomic_folder(target) as folder:
        write_json(folder / "run.json", {"a": 1})
        raise RuntimeError("crash mid-run")
    assert not target.exists() and list(target.parent.iterdir()) == []
    for value in (1, 2):  # a second run of the same job replaces the first
        with atomic_folder(target) as folder:
            write_json(folder / "run.json", {"a": value})
            write_jsonl(folder / "rows.jsonl", [{"b": value, "a": 0}])
    assert read_json(target / "run.json") == {"a": 2}
    assert (target / "rows.jsonl").read_text() == '{"a": 0, "b": 2}\n'
    assert read_jsonl(target / "rows.jsonl") == [{"a": 0, "b": 2}]
    assert [p.name for p in target.parent.iterdir()] == ["s0"]
    assert (target / "run.json").read_text() == '{\n  "a": 2\n}\n'


# A parent that runs slow jobs in two local workers, each printing its pid as it starts one; the start
# method (fork, forkserver, spawn) is its argument.
_SLOW_JOBS = textwrap.dedent(
    r"""
    import multiprocessing, os, sys, time
    from flatshare.lab.executors import LocalExecutor
    from flatshare.lab.jobs import Job

    def slow(job):
        os.write(1, b"%d\n" % os.getpid())  # one write: two workers' lines never interleave
        time.sleep(60)

    if __name__ == "__main__":
        multiprocessing.set_start_method(sys.argv[1])
        LocalExecutor(2).run([Job(f"c{i}", 0, i) for i in range(6)], slow)
    """
)


def _alive(pid: int) -> bool:
    """Running (a zombie nobody has reaped yet counts as ended: an init that does not reap is common in
    containers)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:  # gone since os.kill, or no /proc here (then os.kill's answer stands)
        return not Path("/proc/self").exists()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # the state follows the command's closing ")"


@pytest.mark.parametrize("start_method", ["fork", "forkserver", "spawn"])
def test_local_workers_end_when_their_parent_is_killed(tmp_path: Path, start_method: str) -> None:
    """Killed by SIGTERM, the parent leaves no workers behind: before, each went on with the job queued
    to it, then waited for more for ever. Under every start method the workers run their jobs first (a
    forkserver's workers are its children, not the pool's: a watch on the pool's pid ended them at once)."""
    script = tmp_path / "slow_jobs.py"
    script.write_text(_SLOW_JOBS)
    # Its own process group: the finally below stops whatever of it is left, workers included.
    parent = subprocess.Popen(
        [sys.executable, str(script), start_method],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    workers: list[int] = []
    try:
        assert parent.stdout is not None
        workers = [int(parent.stdout.readline()) for _ in range(2)]  # both workers are in a job
        parent.send_signal(signal.SIGTERM)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in workers if _alive(pid)], "workers outlived their parent"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)
        for pid in workers:  # re-parented workers keep the group, so killpg reached them too
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        parent.wait(timeout=30)


def _on_gpu(job: Job[str]) -> dict[str, object]:
    """A job that reports the GPUs Ray gave it, and when it held them."""
    import os
    import time

    import ray

    started = time.monotonic()
    time.sleep(1.0)
    return {
        "gpus": ray.get_gpu_ids(),
        "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "span": (started, time.monotonic()),
    }


@pytest.mark.timeout(300)
def test_ray_jobs_that_ask_for_a_gpu_each_get_one_and_share_none() -> None:
    """A local Ray instance declaring 2 GPUs (none is needed: Ray counts declared resources) runs
    4 one-GPU jobs: each sees one GPU of its own, and never more than 2 run at once."""
    ray = pytest.importorskip("ray")
    from flatshare.lab.ray_executor import RayExecutor

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/
    ray.init(num_cpus=4, num_gpus=2, include_dashboard=False, log_to_driver=False)
    seen: list[dict[str, object]] = []
    try:
        failures = RayExecutor(resources={"num_gpus": 1, "num_cpus": 1}).run(
            [Job(f"run{k}", 0, "") for k in range(4)],
            _on_gpu,
            then=lambda job, result: seen.append(result) or [],
        )
    finally:
        ray.shutdown()
    assert failures == [] and len(seen) == 4
    for result in seen:
        assert len(result["gpus"]) == 1 and result["cuda"] == str(result["gpus"][0])  # type: ignore[arg-type,index]
    spans = [result["span"] for result in seen]
    for start, _ in spans:  # type: ignore[misc]
        assert sum(s <= start < e for s, e in spans) <= 2  # type: ignore[misc]
