"""The verbs under torchrun (issue 19): CPU, gloo, 2 processes, tiny budgets.

* shares of episode seeds are disjoint and cover the list; without torchrun variables everything is a job of one;
* eval-sim on 2 ranks gives the single-process metrics episode for episode;
* collect on 2 ranks gives the single-process episodes (every array and attribute, by episode index); a killed
  rank ends the job with an error naming it, and --resume finishes the file with the same episodes;
* train-vision and dagger weights are bit-identical across ranks after every step / iteration, while the ranks
  train on different batches.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from graspsim.runtime import RuntimeConfig
from graspsim import distributed

ROOT = Path(__file__).resolve().parent.parent
ASSETS = Path(__file__).parent / "assets"


def torchrun(*args: str, nproc: int = 2, timeout: float = 120, **popen) -> subprocess.Popen:
    """Start ``torchrun --standalone --nproc-per-node nproc ARGS`` (module or script) from the repository root."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                           "MASTER_PORT")}
    env["PYTHONPATH"] = str(ROOT)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *args]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **popen)


def finish(proc: subprocess.Popen, timeout: float = 120) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"torchrun did not finish within {timeout} s:\n{out[-3000:]}")
    return out


@contextlib.contextmanager
def one_thread():
    """Run an in-process reference with one torch thread, as each torchrun worker has (OMP_NUM_THREADS=1): renders
    then agree to the last bit, and on a shared 2-core machine one thread is also several times faster."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def run_ok(*args: str, timeout: float = 120) -> str:
    proc = torchrun(*args)
    out = finish(proc, timeout)
    assert proc.returncode == 0, out[-4000:]
    return out


# ------------------------------------------------------------------------------------------ helpers (no processes)
def test_shards_are_disjoint_and_cover_the_list():
    items = list(range(23))
    for world in (1, 2, 3, 5, 23, 30):
        for strided in (False, True):
            shares = [distributed.shard(items, r, world, strided) for r in range(world)]
            flat = [x for s in shares for x in s]
            assert sorted(flat) == items and len(flat) == len(items)
            assert max(map(len, shares)) - min(map(len, shares)) <= 1
        assert [x for r in range(world) for x in distributed.shard(items, r, world)] == items  # rank order
    assert distributed.shard_bounds(10, 1, 3) == (4, 7)
    with pytest.raises(ValueError, match="rank"):
        distributed.shard(items, 2, 2)


def test_without_torchrun_everything_is_a_job_of_one(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    ctx = distributed.init("cpu", 5)
    assert (ctx.rank, ctx.world_size, ctx.is_main, ctx.distributed) == (0, 1, True, False)
    assert distributed.all_gather_object({"a": 1}) == [{"a": 1}]
    assert distributed.broadcast_object(7) == 7
    assert distributed.rank_seed(123, 0) == 123 and distributed.rank_seed(123, 1) != 123
    distributed.barrier()
    with pytest.raises(ValueError, match="boom"):  # the guard leaves a job of one's errors alone
        with distributed.guard("x"):
            raise ValueError("boom")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(ValueError, match="inconsistent"):
        distributed.from_env()


# ------------------------------------------------------------------------------------------ eval-sim
@pytest.mark.timeout(240)
def test_eval_sim_two_ranks_equal_one(tmp_path):
    from graspsim.dagger.evaluate import EvalSimConfig, evaluate_sim

    kw = dict(policy=ASSETS / "policy_format0.pt", episodes=12, seed=5, num_envs=4, gifs=2,
              runtime=RuntimeConfig(progress=False))
    with one_thread():
        one = evaluate_sim(EvalSimConfig(out=tmp_path / "one", **kw))
    run_ok("-m", "graspsim.cli", "eval-sim", "--policy", str(kw["policy"]), "--out", str(tmp_path / "two"),
           "--episodes", "12", "--seed", "5", "--num-envs", "4", "--gifs", "2", "--no-progress", "--dist-timeout", "60",
           "--threads", "1")  # as one_thread() above: rendering sums differ in their last bit between thread counts
    two = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert (one["world_size"], two["world_size"]) == (1, 2)
    for key in ("per_episode_success", "per_episode_failure", "per_episode_steps", "scene_steps", "success_rate",
                "failures", "gifs"):
        assert two[key] == one[key], key
    for g in one["gifs"]:  # the first episodes' frames too (they ran on rank 0)
        assert (tmp_path / "two" / g["file"]).read_bytes() == (tmp_path / "one" / g["file"]).read_bytes()


# ------------------------------------------------------------------------------------------ collect
def episodes_by_index(path: Path) -> dict[int, tuple[dict, dict]]:
    """episode_index -> (every array of the demo by path, its attributes)."""
    out = {}
    with h5py.File(path, "r") as f:
        for g in f["data"].values():
            arrays: dict = {}
            g.visititems(lambda name, o: arrays.__setitem__(name, o[()]) if isinstance(o, h5py.Dataset) else None)
            attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in g.attrs.items()}
            out[int(attrs["episode_index"])] = (arrays, attrs)
    return out


def rank_pid(parent: int, rank: int) -> int | None:
    """Process id of the worker with RANK=rank among the descendants of ``parent`` (Linux /proc)."""
    children = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(p.name))
    todo = list(children.get(parent, []))
    while todo:
        pid = todo.pop()
        try:
            env = (Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env and b"LOCAL_RANK=" + str(rank).encode() in env:
            return pid
        todo += children.get(pid, [])
    return None


def kill_rank_once_it_committed(proc: subprocess.Popen, shard: Path, rank: int = 1) -> None:
    """SIGKILL rank ``rank`` of the torchrun job ``proc`` as soon as its shard ``shard`` holds an episode."""
    t0 = time.monotonic()
    while committed(shard) < 1 and proc.poll() is None and time.monotonic() - t0 < 120:
        time.sleep(0.05)
    pid = rank_pid(proc.pid, rank)
    assert pid is not None and proc.poll() is None, f"rank {rank} finished before it could be killed"
    os.kill(pid, signal.SIGKILL)


def committed(path: Path) -> int:
    try:
        with h5py.File(path, "r") as f:
            return len(f["data"])
    except (OSError, KeyError):
        return 0


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the rank's process through /proc")
@pytest.mark.timeout(300)
def test_collect_two_ranks_equal_one_and_resume_after_a_killed_rank(tmp_path):
    from graspsim.expert.collect import CollectConfig, collect, shard_file, shards_dir

    n = 12
    with one_thread():  # (an episode's arrays do not depend on num_envs)
        collect(CollectConfig(out=tmp_path / "one.h5", episodes=n, seed=3, num_envs=4, noise=0.01,
                              runtime=RuntimeConfig(progress=False)))
    out = tmp_path / "two.h5"
    args = ["-m", "graspsim.cli", "collect", "--out", str(out), "--episodes", str(n), "--seed", "3", "--num-envs", "2",
            "--noise", "0.01", "--no-progress", "--dist-timeout", "60"]
    proc = torchrun(*args)
    kill_rank_once_it_committed(proc, shard_file(out, 1))
    t_kill = time.monotonic()
    log = finish(proc, 90)
    assert proc.returncode != 0
    assert time.monotonic() - t_kill < 60, "the job did not end promptly after a rank died"
    assert re.search(r"rank\s*:\s*1\b", log) and "SIGKILL" in log, log[-3000:]
    assert shards_dir(out).is_dir() and committed(shard_file(out, 1)) >= 1  # what rank 1 committed is kept

    with pytest.raises(FileExistsError, match="--resume"):  # an unfinished distributed collect is not restarted
        collect(CollectConfig(out=out, episodes=n, seed=3, num_envs=2, noise=0.01, runtime=RuntimeConfig(progress=False)))
    run_ok(*args, "--resume")
    assert not shards_dir(out).exists()
    with h5py.File(out, "r") as f:
        assert int(f.attrs["world_size"]) == 2
        assert all(isinstance(f["data"].get(k, getlink=True), h5py.HardLink) for k in f["data"])  # self-contained
    one, two = episodes_by_index(tmp_path / "one.h5"), episodes_by_index(out)
    assert sorted(two) == sorted(one) == list(range(n))
    for k in range(n):
        (a1, t1), (a2, t2) = one[k], two[k]
        assert t1 == t2, k
        assert sorted(a1) == sorted(a2)
        for name in a1:
            assert np.array_equal(a1[name], a2[name]), (k, name)


# ------------------------------------------------------------------------------------------ DDP
@pytest.mark.timeout(300)
def test_train_vision_and_dagger_weights_identical_across_ranks(tmp_path):
    run_ok(str(ROOT / "tests" / "dist_worker.py"), "both", str(tmp_path), timeout=240)
    r0, r1 = (json.loads((tmp_path / f"digests-rank{r}.json").read_text()) for r in (0, 1))
    for kind, steps in (("vision", 4), ("dagger", 2)):
        assert len(r0[kind]["weights"]) == steps
        assert r0[kind]["weights"] == r1[kind]["weights"], kind  # bit-identical after every step
        assert len(set(r0[kind]["weights"])) == steps  # and the weights did move
    b0, b1 = r0["vision"]["batches"], r1["vision"]["batches"]
    assert len(b0) == 4 and all(x != y for x, y in zip(b0, b1))  # each rank trained on its own composites
    metrics = json.loads((tmp_path / "vision" / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["steps"] == 4
    rows = json.loads((tmp_path / "dagger" / "metrics.json").read_text())
    assert [r["world_size"] for r in rows] == [2, 2] and rows[-1]["episodes"] == 4
    with h5py.File(tmp_path / "dagger" / "data" / "iter_001.h5", "r") as f:
        assert int(f.attrs["world_size"]) == 2
        assert [int(f["data"][f"demo_{k}"].attrs["episode_index"]) for k in range(4)] == [0, 1, 2, 3]
    assert not list((tmp_path / "dagger" / "data").glob("*.rank*.h5"))  # the parts were joined
