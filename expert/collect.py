"""``graspsim collect``: run the FSM expert in batched randomized scenes and write an HDF5 episode file.

>>> summary = collect(CollectConfig(out="demos.h5", episodes=200, num_envs=64, seed=0))

The file holds episodes 0..``episodes``-1 of the run seed's ``train`` stream (:mod:`graspsim.seeds`):
``demo_K.attrs["episode_index"]`` is the episode's index k in that stream and ``attrs["seed"]`` its
episode seed, from which ``graspsim.GraspEnv(cfg.sim, num_envs=1, seed=s)`` rebuilds the scene. The
loop is the one rollout driver (:func:`graspsim.rollout.run_episodes`). Every random number of an
episode (its scene, dynamics, image and expert noise) comes from its episode seed, so the same run seed
and config give identical episodes at any ``num_envs``, and a resumed run collects exactly the missing
episode indices: the finished file holds the same episodes as an uninterrupted run (in the order they
finished).

Per step the file holds the observation the expert acted on (``obs/rgb`` T,H,W,3 uint8, ``obs/mask``
T,H,W uint8, ``obs/gripper`` T,3 float32), the expert's clean label (``actions`` T,4 float32), the
executed (noisy) action when ``noise > 0`` (``executed_actions``), robomimic's ``rewards`` / ``dones``,
and privileged state (``privileged/{tcp_pos, sphere_pos, sphere_radius, finger_width, held, phase}``).
Episodes are appended in completion order (ties broken by scene slot); every started episode runs to
its end, so short episodes are not favoured. See :mod:`graspsim.dataset` for the crash-safe file protocol.

Under ``torchrun`` (:mod:`graspsim.distributed`) rank 0 opens ``out`` (checking ``--resume`` / ``--overwrite``
as one process does) and lists the missing episode indices; rank ``r`` collects its contiguous share of them
into its own crash-safe file ``<out>.shards/rank{r}.h5`` (:func:`shard_file`). When every rank is done, rank 0
joins the shards into ``out`` in ascending episode index (:func:`graspsim.dataset.join`), consolidates it into
one self-contained file and removes the shards. Every random number of an episode comes from its own seed
(:mod:`graspsim.rng`), so each episode equals the one a single process collects. If a rank is killed, every
episode its shard committed stays: ``--resume`` (on any number of processes, one included) collects only the
episodes that neither ``out`` nor a shard holds, then joins. The file attribute ``world_size`` records how many
processes wrote it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from graspsim import FAILURE_NAMES, GraspEnv, SimConfig, distributed
from graspsim.dataset import EpisodeRecorder, EpisodeWriter, demo_attrs, describe, indexed_episodes, join
from graspsim.fileio import check_out_file
from graspsim.keys import RGB, privileged_keys
from graspsim.state import KIND_NAMES
from graspsim.progress import progress_bar
from graspsim.runtime import Runtime, RuntimeConfig
from graspsim.validate import finite_non_negative, int_in, non_negative_int
from graspsim.rollout import ExpertHooks, Finished, run_episodes
from graspsim.seeds import episode_seeds, split_draws

from .fsm import FSMExpert

log = logging.getLogger(__name__)

MAX_EPISODES = 10_000_000
"""Largest --episodes (ten million episodes are terabytes of frames; a bigger number is a typo)."""
MAX_NUM_ENVS = 65_536
"""Largest --num-envs (scenes stepped at once)."""
RESUMABLE_KEYS = ("episodes", "resume", "overwrite", "out", "flush_seconds", "valid_fraction", "runtime.progress",
                  "runtime.threads", "runtime.dist_timeout")
"""Config fields that may change when resuming a file (they do not change what is recorded)."""



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
    compression: str = "gzip"
    """Compression of image arrays (rgb, mask): gzip, lzf or none."""
    flush_seconds: float = 0.0
    """Commit finished episodes at most this often (s); 0 commits at every step where one finishes.
    A hard kill loses only episodes not yet committed."""
    valid_fraction: float = 0.0
    """Fraction of episodes listed under robomimic's filter key ``mask/valid`` (the rest under
    ``mask/train``); 0 writes no filter keys. Episode K's split depends only on the seed and K."""
    runtime: Runtime = field(default_factory=RuntimeConfig)
    """Device, threads, torchrun timeout and progress bar (flags --device, --threads, --dist-timeout,
    --progress/--no-progress)."""
    sim: SimConfig = field(default_factory=SimConfig)
    """Simulator configuration (randomization ranges, image size, episode length)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "out", Path(self.out))
        if self.out.suffix.lower() not in (".h5", ".hdf5"):
            raise ValueError(f"CollectConfig.out must end in .h5 or .hdf5; got {str(self.out)!r}")
        int_in("CollectConfig", "episodes", self.episodes, 1, MAX_EPISODES)
        non_negative_int("CollectConfig", "seed", self.seed)
        int_in("CollectConfig", "num_envs", self.num_envs, 1, MAX_NUM_ENVS)
        finite_non_negative("CollectConfig", "noise", self.noise, unit="m/s")
        if self.compression not in ("gzip", "lzf", "none"):
            raise ValueError(f"CollectConfig.compression must be gzip, lzf or none; got {self.compression!r}")
        finite_non_negative("CollectConfig", "flush_seconds", self.flush_seconds, unit="s")
        if not (isinstance(self.valid_fraction, (int, float)) and 0 <= self.valid_fraction < 1):
            raise ValueError(f"CollectConfig.valid_fraction must be in [0, 1); got {self.valid_fraction!r}")
        if self.resume and self.overwrite:
            raise ValueError("CollectConfig: --resume and --overwrite exclude each other")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["out"] = str(self.out)
        return d


def _env_args(cfg: CollectConfig) -> dict:
    from graspsim.gym_env import ENV_ID

    return {"env_name": ENV_ID, "type": 2, "env_kwargs": {"cfg": cfg.sim.to_dict(), "device": cfg.runtime.device}}


def _progress_bar(enabled: bool, total: int, done: int):
    bar = progress_bar("collect", enabled, fields=("{task.fields[eps]:.1f} eps/s", "success {task.fields[succ]}"))
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
    Under torchrun (or when ``out`` has unjoined shards) see the module docstring; every rank returns the summary.
    """
    with cfg.runtime.job("collect") as ctx:
        if ctx.distributed or shards_dir(cfg.out).exists():
            return _collect_sharded(cfg, ctx, progress_fn)
        return _collect(cfg, progress_fn)


def _writer(cfg: CollectConfig, path: Path, world_size: int, **kw) -> EpisodeWriter:
    return EpisodeWriter(path, cfg.to_dict(), env_args=_env_args(cfg), ignore_keys=RESUMABLE_KEYS,
                         compression=None if cfg.compression == "none" else cfg.compression,
                         attrs={"world_size": int(world_size)}, **kw)


def _collect(cfg: CollectConfig, progress_fn: Callable[[dict], None] | None) -> dict[str, Any]:
    device = torch.device(cfg.runtime.device)
    check_out_file(cfg.out, overwrite=cfg.overwrite, resume=cfg.resume)
    writer = _writer(cfg, cfg.out, 1, resume=cfg.resume, overwrite=cfg.overwrite)
    t_start = time.perf_counter()
    new_eps = new_steps = scene_steps = 0
    try:
        start = writer.num_episodes
        previous = demo_attrs(cfg.out) if start else []
        n_success = sum(bool(a.get("success", False)) for a in previous)
        if start >= cfg.episodes:
            log.info("%s already holds %d episodes (asked for %d); nothing to collect", cfg.out, start, cfg.episodes)
        else:
            if start:
                log.info("resuming %s at %d of %d episodes", cfg.out, start, cfg.episodes)
            new_eps, new_steps, scene_steps, n_success = _run(cfg, writer, device, _todo(cfg, previous), n_success,
                                                              progress_fn, cfg.episodes, cfg.runtime.progress)
    except KeyboardInterrupt:
        # nothing to keep: leave no empty file behind (and an old one untouched); an interrupted --overwrite keeps
        # the earlier file too (as after a hard kill): its partial replacement is dropped, with a warning
        if not writer.num_episodes or writer.replaces_file:
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
    return _summary(cfg, new_eps, new_steps, scene_steps, time.perf_counter() - t_start, 1)


def shards_dir(out: Path) -> Path:
    """Folder of the per-rank files of a distributed collect into ``out`` (removed once they are joined)."""
    return Path(out).parent / f"{Path(out).name}.shards"


def shard_file(out: Path, rank: int) -> Path:
    """Rank ``rank``'s episode file of a distributed collect into ``out``."""
    return shards_dir(out) / f"rank{rank}.h5"


def _collect_sharded(cfg: CollectConfig, ctx: distributed.Context,
                     progress_fn: Callable[[dict], None] | None) -> dict[str, Any]:
    """The distributed collect (module docstring). Also finishes unjoined shards on one process."""
    device = distributed.local_device(cfg.runtime.device)
    check_out_file(cfg.out, overwrite=cfg.overwrite, resume=cfg.resume)
    sdir = shards_dir(cfg.out)
    if sdir.exists() and not (cfg.resume or cfg.overwrite):
        raise FileExistsError(f"{sdir} holds the per-rank files of an unfinished distributed collect into {cfg.out}; "
                              "pass --resume to finish it or --overwrite to start again")
    distributed.barrier()  # every rank has checked the output before rank 0 opens it
    t_start = time.perf_counter()
    main = None
    todo: list[int] = []
    try:
        if ctx.is_main:  # rank 0 owns the output file: the one resume rule and --overwrite apply as on one process
            main = _writer(cfg, cfg.out, ctx.world_size, resume=cfg.resume, overwrite=cfg.overwrite)
            if cfg.overwrite:
                shutil.rmtree(sdir, ignore_errors=True)
            in_file = demo_attrs(main.path) if main.num_episodes else []
            shards = sorted(sdir.glob("rank*.h5"))
            for p in shards:  # the resume rule for shards too (also those of ranks this job does not have)
                _writer(cfg, p, ctx.world_size, resume=True, consolidate=False).close()
            in_shards = [{"episode_index": k} for k, _, _ in indexed_episodes(shards)]
            todo = _todo(cfg, in_file + in_shards)
            if in_shards:
                log.info("resuming: %d episodes in %s and %d in its shards; %d to collect", len(in_file), cfg.out,
                         len(in_shards), len(todo))
        todo = distributed.broadcast_object(todo)
        mine = distributed.shard(todo, ctx.rank, ctx.world_size)
        new = (0, 0, 0)
        if mine:
            sdir.mkdir(exist_ok=True)
            w = _writer(cfg, shard_file(cfg.out, ctx.rank), ctx.world_size, resume=True, consolidate=False)
            try:
                n_eps, n_steps, scene_steps, _ = _run(cfg, w, device, mine, 0, progress_fn if ctx.is_main else None,
                                                      w.num_episodes + len(mine), cfg.runtime.progress and ctx.is_main)
                new = (n_eps, n_steps, scene_steps)
            finally:
                w.close()
        counts = distributed.all_gather_object(new)  # also the barrier: every shard is complete
        if not ctx.is_main:
            return distributed.broadcast_object(None)
        in_file = {int(a["episode_index"]) for a in demo_attrs(main.path)} if main.num_episodes else set()
        join(main, sorted(sdir.glob("rank*.h5")), skip=in_file)
        _split(cfg, main)
        main.close()
        shutil.rmtree(sdir, ignore_errors=True)
    except BaseException:
        if main is not None:
            main.abort()  # committed episodes stay (in out or in the shards); --resume continues
        raise
    summary = _summary(cfg, *(sum(c[i] for c in counts) for i in range(3)), time.perf_counter() - t_start,
                       ctx.world_size)
    return distributed.broadcast_object(summary)


def _summary(cfg: CollectConfig, new_eps: int, new_steps: int, scene_steps: int, seconds: float,
             world_size: int) -> dict[str, Any]:
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
        "world_size": world_size,
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
    u = split_draws(cfg.seed, writer.num_episodes)
    valid = np.flatnonzero(u < cfg.valid_fraction)
    train = np.flatnonzero(u >= cfg.valid_fraction)
    writer.set_filter_keys({"train": train.tolist(), "valid": valid.tolist()})


class _ExpertRecording(ExpertHooks):
    """Rollout hooks of ``collect``: the (optionally noisy) expert drives, every step is recorded, and
    finished episodes are committed to the writer at most every ``flush_seconds``."""

    def __init__(self, env, expert: FSMExpert, cfg: CollectConfig, writer: EpisodeWriter, indices: list[int],
                 n_success: int, progress_fn, bar, task, target: int):
        super().__init__(env, expert)
        self.cfg, self.writer, self.indices, self.target = cfg, writer, indices, target
        self.recorder = EpisodeRecorder(env.num_envs, image_keys=(RGB,), capacity=cfg.sim.max_steps)  # rgb as T,H,W,3
        self.pending: list = []
        self.start = self.written = writer.num_episodes
        self.n_success, self.new_steps = n_success, 0
        self.progress_fn, self.bar, self.task = progress_fn, bar, task
        self.t0 = self.last_flush = time.perf_counter()
        self._step: tuple | None = None

    def act(self, obs: dict, active: torch.Tensor) -> torch.Tensor:
        priv = self.env.privileged()
        label = self.policy.act(priv)  # B,4 clean expert label
        executed = self.policy.perturb(label)
        self._step = (label, priv)
        return executed

    def record(self, obs: dict, action: torch.Tensor, active: torch.Tensor, slot_episode: torch.Tensor) -> None:
        label, priv = self._step
        record_priv = {k: priv[k] for k in privileged_keys(self.cfg.sim.wrist)}
        record_priv["phase"] = self.policy.phase
        extras = {"executed_actions": action} if self.cfg.noise > 0 else None
        self.recorder.record(obs, label, record_priv, extras, active=active.cpu())

    def on_end(self, fin: Finished) -> None:
        attrs = [{"success": bool(s), "failure": FAILURE_NAMES[int(c)], "seed": int(seed),
                  "episode_index": int(self.indices[int(e)])}
                 for e, seed, s, c in zip(fin.episodes, fin.seeds, fin.success, fin.failure)]
        for ep in self.recorder.finish(fin.slots, attrs):
            if "target_kind" in ep.privileged:  # with the wrist: the episode's target kind by name
                ep.attrs["target_kind"] = KIND_NAMES[int(ep.privileged["target_kind"][0])]
            T = ep.num_samples
            ep.extras["rewards"] = np.zeros(T, np.float32)
            ep.extras["rewards"][-1] = float(ep.attrs["success"])
            ep.extras["dones"] = np.zeros(T, np.uint8)
            ep.extras["dones"][-1] = 1
            self.new_steps += T
            self.pending.append(ep)
        now = time.perf_counter()
        if self.written + len(self.pending) >= self.target or now - self.last_flush >= self.cfg.flush_seconds:
            self.commit()
            self.last_flush = now

    def commit(self) -> None:
        if not self.pending:
            return
        self.writer.append(self.pending)
        self.written += len(self.pending)
        self.n_success += sum(bool(ep.attrs["success"]) for ep in self.pending)
        self.pending = []
        rate = (self.written - self.start) / max(time.perf_counter() - self.t0, 1e-9)
        succ = self.n_success / self.written
        self.bar.update(self.task, completed=self.written, eps=rate, succ=f"{100 * succ:.1f}%")
        if self.progress_fn is not None:
            self.progress_fn({"episodes": self.written, "target": self.target, "success": succ,
                              "episodes_per_s": rate})


def _todo(cfg: CollectConfig, previous: list[dict]) -> list[int]:
    """Indices (in the run's ``train`` episode stream) of the episodes still missing: the file holds
    episodes 0..episodes-1 when done, whatever order they finished in and however often the run resumed."""
    have = {int(a["episode_index"]) for a in previous if "episode_index" in a}
    need = cfg.episodes - len(previous)
    todo, k = [], 0
    while len(todo) < need:
        if k not in have:
            todo.append(k)
        k += 1
    return todo


def _run(cfg: CollectConfig, writer: EpisodeWriter, device: torch.device, indices: list[int],
         n_success: int, progress_fn: Callable[[dict], None] | None, target: int,
         show_progress: bool) -> tuple[int, int, int, int]:
    """Collect episodes ``indices`` of the ``train`` stream into ``writer`` (which holds ``target`` episodes when
    done). Returns (new episodes, their steps, scene steps simulated, successes in the writer's file)."""
    seeds = [episode_seeds(cfg.seed, "train", k, 1)[0] for k in indices]
    B = min(cfg.num_envs, len(seeds))
    # every random number of an episode comes from its episode seed (graspsim.rng); the driver resets every slot
    # from those seeds before the first step, so the env needs no seed of its own
    env = GraspEnv(cfg.sim, num_envs=B, device=device)
    expert = FSMExpert(cfg.sim, B, device, noise_std=cfg.noise)
    bar, task = _progress_bar(show_progress, target, writer.num_episodes)
    hooks = _ExpertRecording(env, expert, cfg, writer, indices, n_success, progress_fn, bar, task, target)
    with bar:
        try:
            out = run_episodes(env, seeds, hooks)
        except KeyboardInterrupt:
            hooks.commit()  # finished episodes are worth keeping
            raise
        hooks.commit()
    return hooks.written - hooks.start, hooks.new_steps, out.scene_steps, hooks.n_success


__all__ = ["CollectConfig", "collect"]
