"""``graspsim collect``: run the FSM expert in batched randomized scenes and write an HDF5 episode file.

>>> summary = collect(CollectConfig(out="demos.h5", episodes=200, num_envs=64, seed=0))

Every episode gets its own scene seed (``demo_K.attrs["seed"]``, derived from the run seed and the
scene counter): ``graspsim.GraspEnv(cfg.sim, num_envs=1, seed=s)`` rebuilds that scene. Dynamics and
image noise come from one run-level generator, so the same run seed and config (including
``num_envs``) give identical arrays. A resumed run draws fresh noise streams and new scenes, so it
differs from an uninterrupted run but never repeats a scene.

Per step the file holds the observation the expert acted on (``obs/rgb`` T,H,W,3 uint8, ``obs/mask``
T,H,W uint8, ``obs/gripper`` T,3 float32), the expert's clean label (``actions`` T,4 float32), the
executed (noisy) action when ``noise > 0`` (``executed_actions``), robomimic's ``rewards`` / ``dones``,
and privileged state (``privileged/{tcp_pos, sphere_pos, sphere_radius, finger_width, held, phase}``).
Episodes are appended in completion order (ties broken by scene slot); in-flight episodes beyond
``episodes`` are discarded. See :mod:`graspsim.dataset` for the crash-safe file protocol.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from graspsim import FAILURE_NAMES, GraspEnv, SimConfig, State, observe, sample_scenes
from graspsim.config import check_device
from graspsim.dataset import EpisodeRecorder, EpisodeWriter, demo_attrs, describe
from graspsim.fileio import check_out_file

from .fsm import FSMExpert

log = logging.getLogger(__name__)

RESUMABLE_KEYS = ("episodes", "resume", "overwrite", "out", "progress", "flush_seconds", "valid_fraction")
"""Config fields that may change when resuming a file (they do not change what is recorded)."""
PRIVILEGED_KEYS = ("tcp_pos", "sphere_pos", "sphere_radius", "finger_width", "held")


@dataclass(frozen=True)
class CollectConfig:
    """Collect expert demonstrations into a robomimic-style HDF5 file."""

    out: Path
    """Output file (.h5 or .hdf5). Its folder must exist."""
    episodes: int = 100
    """Number of episodes the file should hold when done (with --resume: the total, not the increment)."""
    seed: int = 0
    """Run seed: scenes, dynamics noise and expert noise all derive from it."""
    num_envs: int = 64
    """Scenes simulated in parallel."""
    noise: float = 0.0
    """Std (m/s) of Gaussian noise added to the expert's velocity when executing it (labels stay clean)."""
    resume: bool = False
    """Continue an existing file up to --episodes (its stored config must match this one)."""
    overwrite: bool = False
    """Replace an existing file (the old one is kept until the new one is complete)."""
    device: str = "cpu"
    """Torch device for simulation and rendering."""
    compression: str = "gzip"
    """Compression of image arrays (rgb, mask): gzip, lzf or none."""
    flush_seconds: float = 0.0
    """Commit finished episodes at most this often (s); 0 commits at every step where one finishes.
    A hard kill loses only episodes not yet committed."""
    valid_fraction: float = 0.0
    """Fraction of episodes listed under robomimic's filter key ``mask/valid`` (the rest under
    ``mask/train``); 0 writes no filter keys. Episode K's split depends only on the seed and K."""
    progress: bool = True
    """Show a progress bar."""
    sim: SimConfig = field(default_factory=SimConfig)
    """Simulator configuration (randomization ranges, image size, episode length)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "out", Path(self.out))
        if self.out.suffix.lower() not in (".h5", ".hdf5"):
            raise ValueError(f"CollectConfig.out must end in .h5 or .hdf5; got {str(self.out)!r}")
        if not isinstance(self.episodes, int) or self.episodes <= 0:
            raise ValueError(f"CollectConfig.episodes must be a positive int; got {self.episodes!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"CollectConfig.seed must be a non-negative int; got {self.seed!r}")
        if not isinstance(self.num_envs, int) or self.num_envs <= 0:
            raise ValueError(f"CollectConfig.num_envs must be a positive int; got {self.num_envs!r}")
        if not (isinstance(self.noise, (int, float)) and math.isfinite(self.noise) and self.noise >= 0):
            raise ValueError(f"CollectConfig.noise must be a finite number >= 0 (m/s); got {self.noise!r}")
        if self.compression not in ("gzip", "lzf", "none"):
            raise ValueError(f"CollectConfig.compression must be gzip, lzf or none; got {self.compression!r}")
        if not (isinstance(self.flush_seconds, (int, float)) and 0 <= self.flush_seconds < math.inf):
            raise ValueError(f"CollectConfig.flush_seconds must be a finite number >= 0; got {self.flush_seconds!r}")
        if not (isinstance(self.valid_fraction, (int, float)) and 0 <= self.valid_fraction < 1):
            raise ValueError(f"CollectConfig.valid_fraction must be in [0, 1); got {self.valid_fraction!r}")
        if self.resume and self.overwrite:
            raise ValueError("CollectConfig: --resume and --overwrite exclude each other")
        check_device("CollectConfig", self.device)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["out"] = str(self.out)
        return d


def scene_seed(run_seed: int, k: int) -> int:
    """Seed of the ``k``-th scene of a run (63-bit, well mixed; distinct runs do not share scenes)."""
    a, b = np.random.SeedSequence([int(run_seed), int(k)]).generate_state(2, np.uint32)
    return int((int(a) << 31) ^ int(b))


def _stream_seed(run_seed: int, stream: int, start: int) -> int:
    """Seed of a run-level random stream (0: dynamics and image noise, 1: expert noise) for a run
    starting at episode ``start`` (so a resumed run does not replay the noise of the first run)."""
    return int(np.random.SeedSequence([int(run_seed), 1_000_003 + stream, int(start)]).generate_state(1, np.uint32)[0])


def seeded_scenes(cfg: SimConfig, seeds: list[int], device: torch.device) -> State:
    """One scene per seed, exactly as ``GraspEnv(cfg, num_envs=1, seed=s)`` builds it, stacked to ``len(seeds)``."""
    parts = []
    for s in seeds:  # loop over newly started episodes only
        g = torch.Generator(device=device)
        g.manual_seed(s)
        parts.append(sample_scenes(cfg, 1, g, device))
    return State(**{k: torch.cat([getattr(p, k) for p in parts]) for k, _ in parts[0].items()})


def _put_scenes(state: State, ids: torch.Tensor, fresh: State) -> State:
    return State(**{k: v.index_copy(0, ids, getattr(fresh, k)) for k, v in state.items()})


def _env_args(cfg: CollectConfig) -> dict:
    from graspsim.gym_env import ENV_ID

    return {"env_name": ENV_ID, "type": 2, "env_kwargs": {"cfg": cfg.sim.to_dict(), "device": cfg.device}}


def _progress_bar(enabled: bool, total: int, done: int):
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    bar = Progress(
        TextColumn("[bold]collect"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[eps]:.1f} eps/s"), TextColumn("success {task.fields[succ]}"),
        TimeElapsedColumn(), TimeRemainingColumn(), disable=not enabled,
    )
    task = bar.add_task("collect", total=total, completed=done, eps=0.0, succ="-")
    return bar, task


def collect(cfg: CollectConfig, progress_fn: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """Run the expert until ``cfg.out`` holds ``cfg.episodes`` episodes; return a summary dict.

    Summary keys: ``path``, ``episodes`` / ``steps`` / ``success_rate`` / ``failures`` (counts by
    cause) / ``median_steps_success`` over the whole file; ``new_episodes``, ``new_steps``,
    ``seconds``, ``episodes_per_s``, ``steps_per_s`` (scene steps) for this run; ``mb`` and
    ``mb_per_100_episodes`` of the finished file. ``progress_fn`` (if given) receives a dict with
    ``episodes``, ``target``, ``success``, ``episodes_per_s`` after every commit.
    Ctrl-C commits the finished episodes, consolidates the file and re-raises KeyboardInterrupt.
    """
    device = torch.device(cfg.device)
    check_out_file(cfg.out, overwrite=cfg.overwrite, resume=cfg.resume)
    writer = EpisodeWriter(
        cfg.out, cfg.to_dict(), resume=cfg.resume, overwrite=cfg.overwrite, env_args=_env_args(cfg),
        ignore_keys=RESUMABLE_KEYS, compression=None if cfg.compression == "none" else cfg.compression,
    )
    t_start = time.perf_counter()
    new_eps = new_steps = scene_steps = 0
    try:
        start = writer.num_episodes
        previous = demo_attrs(cfg.out) if start else []
        n_success = sum(bool(a.get("success", False)) for a in previous)
        next_scene = max((int(a.get("scene_index", -1)) for a in previous), default=-1) + 1
        if start >= cfg.episodes:
            log.info("%s already holds %d episodes (asked for %d); nothing to collect", cfg.out, start, cfg.episodes)
        else:
            if start:
                log.info("resuming %s at %d of %d episodes", cfg.out, start, cfg.episodes)
            new_eps, new_steps, scene_steps, n_success = _run(cfg, writer, device, start, next_scene, n_success,
                                                              progress_fn)
    except KeyboardInterrupt:
        if not writer.num_episodes:  # nothing to keep: leave no empty file behind (and an old one untouched)
            writer.abort()
            raise
        log.warning("interrupted: %d episodes committed to %s", writer.num_episodes, cfg.out)
        _split(cfg, writer)
        writer.close()
        raise
    except BaseException:
        writer.abort()  # a new file with nothing in it is removed; --overwrite keeps the old file
        raise
    _split(cfg, writer)
    writer.close()
    seconds = time.perf_counter() - t_start
    info = describe(cfg.out)
    mb = info["bytes"] / 1e6
    summary = {
        "path": str(cfg.out),
        "episodes": info["episodes"],
        "steps": info["steps"],
        "success_rate": info["success_rate"],
        "failures": info["failures"],
        "median_steps_success": info["median_steps_success"],
        "new_episodes": new_eps,
        "new_steps": new_steps,
        "scene_steps": scene_steps,
        "seconds": seconds,
        "episodes_per_s": new_eps / seconds if seconds > 0 else math.nan,
        "steps_per_s": scene_steps / seconds if seconds > 0 else math.nan,
        "mb": mb,
        "mb_per_100_episodes": 100 * mb / info["episodes"] if info["episodes"] else math.nan,
    }
    log.info("collect: %d episodes (%d new) in %s, success %.2f%%, median steps to success %s, failures %s, "
             "%.2f eps/s, %.0f steps/s, %.1f MB", summary["episodes"], new_eps, cfg.out,
             100 * summary["success_rate"], summary["median_steps_success"], summary["failures"],
             summary["episodes_per_s"], summary["steps_per_s"], mb)
    return summary


def _split(cfg: CollectConfig, writer: EpisodeWriter) -> None:
    """Write robomimic train/valid filter keys; the draw for episode K is the K-th of a seeded stream."""
    if cfg.valid_fraction <= 0 or writer.num_episodes == 0:
        return
    u = np.random.default_rng([cfg.seed, 7919]).random(writer.num_episodes)
    valid = np.flatnonzero(u < cfg.valid_fraction)
    train = np.flatnonzero(u >= cfg.valid_fraction)
    writer.set_filter_keys({"train": train.tolist(), "valid": valid.tolist()})


def _run(cfg: CollectConfig, writer: EpisodeWriter, device: torch.device, start: int, next_scene: int,
         n_success: int, progress_fn: Callable[[dict], None] | None) -> tuple[int, int, int, int]:
    """The collection loop. Returns (new episodes, their steps, scene steps simulated, successes in file)."""
    B, sim = cfg.num_envs, cfg.sim
    # one generator for dynamics + image noise and one for expert noise; a resumed run starts new streams
    env = GraspEnv(sim, num_envs=B, device=device, seed=_stream_seed(cfg.seed, 0, start), render_obs=False)
    g_expert = torch.Generator(device=device)
    g_expert.manual_seed(_stream_seed(cfg.seed, 1, start))
    expert = FSMExpert(sim, B, device, noise_std=cfg.noise, generator=g_expert)

    scene_index = torch.arange(next_scene, next_scene + B, dtype=torch.long)  # B: scene counter per slot
    seeds = [scene_seed(cfg.seed, k) for k in scene_index.tolist()]
    slot_seed = torch.tensor(seeds, dtype=torch.long)
    env.state = seeded_scenes(sim, seeds, device)
    next_scene += B
    expert.reset()
    recorder = EpisodeRecorder(B, image_keys=("rgb",), capacity=sim.max_steps)

    written, pending, new_steps, scene_steps = start, [], 0, 0
    last_flush = time.perf_counter()
    t0 = time.perf_counter()
    bar, task = _progress_bar(cfg.progress, cfg.episodes, start)

    def commit() -> None:
        nonlocal written, pending, n_success
        writer.append(pending)
        written += len(pending)
        n_success += sum(bool(ep.attrs["success"]) for ep in pending)
        pending = []
        rate = (written - start) / max(time.perf_counter() - t0, 1e-9)
        succ = n_success / written
        bar.update(task, completed=written, eps=rate, succ=f"{100 * succ:.1f}%")
        if progress_fn is not None:
            progress_fn({"episodes": written, "target": cfg.episodes, "success": succ, "episodes_per_s": rate})

    with bar:
        try:
            obs = observe(env.state, sim, env.generator)
            while written + len(pending) < cfg.episodes:
                priv = env.privileged()
                label = expert.act(priv)  # B,4 clean expert label
                executed = expert.perturb(label)
                record_priv = {k: priv[k] for k in PRIVILEGED_KEYS}
                record_priv["phase"] = expert.phase
                extras = {"executed_actions": executed} if cfg.noise > 0 else None
                recorder.record(obs, label, record_priv, extras)
                _, _, done, info = env.step(executed)
                scene_steps += B
                ids = torch.nonzero(done).flatten().cpu()  # ascending slot order: ties broken by slot
                if ids.numel():
                    need = cfg.episodes - written - len(pending)
                    keep = ids[:need]
                    success = info["success"].cpu()[keep].tolist()
                    failure = info["failure"].cpu()[keep].tolist()
                    attrs = [
                        {"success": bool(s), "failure": FAILURE_NAMES[c], "seed": int(slot_seed[i]),
                         "scene_index": int(scene_index[i])}
                        for i, s, c in zip(keep.tolist(), success, failure)
                    ]
                    episodes = recorder.finish(keep, attrs)
                    recorder.discard(ids)
                    for ep in episodes:
                        T = ep.num_samples
                        ep.extras["rewards"] = np.zeros(T, np.float32)
                        ep.extras["rewards"][-1] = float(ep.attrs["success"])
                        ep.extras["dones"] = np.zeros(T, np.uint8)
                        ep.extras["dones"][-1] = 1
                        new_steps += T
                    pending += episodes
                    # fresh scenes for the finished slots
                    new_index = torch.arange(next_scene, next_scene + ids.numel(), dtype=torch.long)
                    next_scene += ids.numel()
                    new_seeds = [scene_seed(cfg.seed, k) for k in new_index.tolist()]
                    scene_index[ids] = new_index
                    slot_seed[ids] = torch.tensor(new_seeds, dtype=torch.long)
                    env.state = _put_scenes(env.state, ids.to(device), seeded_scenes(sim, new_seeds, device))
                    expert.reset(ids)
                now = time.perf_counter()
                finished = written + len(pending) >= cfg.episodes
                if pending and (finished or now - last_flush >= cfg.flush_seconds):
                    commit()
                    last_flush = now
                if not finished:
                    obs = observe(env.state, sim, env.generator)
        except KeyboardInterrupt:
            if pending:  # finished episodes are worth keeping
                commit()
            raise
    return written - start, new_steps, scene_steps, n_success


__all__ = ["CollectConfig", "collect", "scene_seed", "seeded_scenes"]
