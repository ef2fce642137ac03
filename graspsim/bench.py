"""``graspsim bench``: throughput of the batched torch simulator against the pybullet backend, in one run.

Measured side by side on the same machine in one process (``bench(cfg, act, extra) -> dict``; the
``graspsim bench`` verb is :func:`graspsim.dagger.throughput.run_bench`):

* **torch sim**: frames/s of ``GraspEnv.step`` (physics + RGB and mask render + blur/noise) at each batch
  size of ``batch_sizes`` and each torch thread count of ``threads``; one frame = one scene advanced one
  control step and rendered. The best (batch, threads) counts; later parts use its thread count.
* **bullet**: frames/s of ``BulletGraspEnv.step`` (IK + 240 Hz contact physics + TinyRenderer RGB and
  segmentation) for each ``(num_envs, workers)`` of ``bullet_configs``.
* **full loop** and **training** of the nets: supplied by the app layer through ``extra``
  (:mod:`graspsim.dagger.throughput`), since the simulator imports no learning code.
* **peak memory per scene**: for each in-process configuration, the rise of the process's peak resident
  set (Linux ``VmHWM``, reset through ``/proc/self/clear_refs`` after ``malloc_trim``) above the resident
  size just before the measurement, divided by the scene count. Worker processes are not included
  (their scenes live in other processes); where ``VmHWM`` cannot be reset, the field is null.

Every timing is preceded by ``warmup`` untimed steps. Scenes are driven by ``act`` (the FSM expert in
``graspsim bench``), so both backends render realistic approach / grasp / lift states; done scenes keep stepping (no resets inside
timed windows). ``speedup_vs_bullet`` = best torch frames/s over best bullet frames/s, both at
``image_size``; the configurations behind both numbers are recorded. Because the machine may be shared,
``speedup_paired`` re-times that best pair in alternating windows (same load for both) and gives the
median ratio. When it falls short of ``target_speedup``, the torch step is profiled: top operators
(``torch.profiler``), time per renderer function (cProfile) and render frames/s with features switched
off (shadows, blur/noise, distractors, fingers).
Outputs in ``out``: ``bench.json`` and ``fps_vs_batch.png``.
"""

from __future__ import annotations

import ctypes
import gc
import json
import logging
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional, Tuple

import torch

from .config import SimConfig, check_device
from .env import GraspEnv
from .fileio import atomic_write_text, check_in_file, check_out_dir, replace_atomically, staged_dir
from .validate import finite_positive, int_in, non_negative_int, positive_int

log = logging.getLogger(__name__)

OUTPUTS = ("bench.json", "fps_vs_batch.png")
"""The files bench writes into --out."""


@dataclass(frozen=True)
class BenchConfig:
    """Throughput benchmark: batched torch simulator vs the pybullet backend (see module docstring)."""

    out: Path = Path("runs/bench")
    """Output folder for bench.json and fps_vs_batch.png (created). A non-empty folder is refused unless --overwrite
    is given."""
    overwrite: bool = False
    """Replace the earlier bench outputs in --out as a whole (the new ones are swapped in when complete)."""
    image_size: int = 64
    """Wrist image size (pixels) for every measurement."""
    batch_sizes: Tuple[int, ...] = (1, 4, 16, 64, 256, 512, 1024)
    """Torch simulator batch sizes."""
    bullet_configs: Tuple[Tuple[int, int], ...] = ((1, 0), (8, 0), (8, 2))
    """pybullet (num_envs, workers) pairs; workers = 0 runs every client in this process."""
    paired_rounds: int = 3
    """Rounds of alternating torch / pybullet timing windows for the best pair (load-robust ratio; 0 = skip)."""
    loop_batch: int = 256
    """Batch size of the full loop (sim + vision + control inference)."""
    train_batch: int = 64
    """Synthetic batch size for the training-throughput measurement."""
    warmup: int = 1
    """Untimed steps before each timing."""
    min_steps: int = 2
    """At least this many timed steps per measurement."""
    seconds: float = 2.0
    """Time budget per measurement (s): timing stops after min_steps once this is exceeded."""
    threads: Tuple[int, ...] = (1, 2)
    """torch intra-op thread counts to sweep the torch simulator with (0 = torch's default). On a shared
    machine one thread can beat two by a wide margin (OpenMP barriers wait for a descheduled core), so
    both are measured and the best configuration counts; the rest of the run uses that thread count."""
    vision: Optional[Path] = None
    """Optional trained segmentation checkpoint for the full loop (random weights of the default net otherwise)."""
    policy: Optional[Path] = None
    """Optional trained policy checkpoint for the full loop (random weights of the default net otherwise)."""
    loop_rounds: int = 7
    """Rounds of alternating bare-simulator / full-loop timing windows at ``loop_batch`` (0 = skip): the median of
    the per-round ratios is the loop's cost over the simulator, robust to load that drifts over minutes. Taken at the
    run's thread count and again at each other count of ``threads`` (the one-thread ratio reproduces on a shared VM)."""
    target_speedup: float = 20.0
    """Speedup target of torch over pybullet; below it the torch step is profiled."""
    profile: bool = True
    """Profile the torch step when the speedup target is missed."""
    plot: bool = True
    """Write fps_vs_batch.png."""
    seed: int = 0
    """Seed of the scenes and of the synthetic batches."""
    device: str = "cpu"
    """Torch device of the batched simulator and the nets."""
    sim: SimConfig = field(default_factory=SimConfig)
    """Simulator configuration (image_size is overridden by the field above)."""

    def __post_init__(self) -> None:
        int_in("BenchConfig", "image_size", self.image_size, 16, 512)
        if not self.batch_sizes or any(not isinstance(b, int) or b <= 0 for b in self.batch_sizes):
            raise ValueError(f"BenchConfig.batch_sizes must be positive ints; got {self.batch_sizes!r}")
        for pair in self.bullet_configs:
            ok = len(pair) == 2 and all(isinstance(v, int) for v in pair) and pair[0] > 0 and pair[1] >= 0
            if not ok:
                raise ValueError(f"BenchConfig.bullet_configs entries must be (num_envs > 0, workers >= 0); "
                                 f"got {pair!r}")
        for name in ("loop_batch", "paired_rounds", "loop_rounds", "warmup"):  # 0 skips the loop / the paired rounds
            non_negative_int("BenchConfig", name, getattr(self, name))
        positive_int("BenchConfig", "train_batch", self.train_batch)
        positive_int("BenchConfig", "min_steps", self.min_steps)
        finite_positive("BenchConfig", "seconds", self.seconds, unit="s")
        if not self.threads or any(not isinstance(t, int) or t < 0 for t in self.threads):
            raise ValueError(f"BenchConfig.threads must be non-negative ints (0 = default); got {self.threads!r}")
        finite_positive("BenchConfig", "target_speedup", self.target_speedup)
        for name, inside in (("vision", "checkpoint.pt"), ("policy", "best.pt")):
            p = getattr(self, name)
            if p is not None:
                check_in_file(p, f"BenchConfig.{name}", "checkpoint", inside=inside)
        check_device("BenchConfig", self.device)


# ----------------------------------------------------------------------------- memory
_LIBC = None


def _trim() -> None:
    """Return freed heap pages to the OS so the resident size reflects live memory."""
    global _LIBC
    gc.collect()
    try:
        if _LIBC is None:
            _LIBC = ctypes.CDLL("libc.so.6")
        _LIBC.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _status_kb(key: str) -> Optional[int]:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class PeakMemory:
    """Context manager: peak resident-set rise (bytes) inside the block; ``None`` where unsupported."""

    def __enter__(self) -> "PeakMemory":
        _trim()
        self.ok = True
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # reset VmHWM to the current RSS
        except OSError:
            self.ok = False
        self.base = _status_kb("VmRSS")
        self.peak_bytes: Optional[int] = None
        return self

    def __exit__(self, *exc) -> None:
        hwm = _status_kb("VmHWM")
        if self.ok and hwm is not None and self.base is not None:
            self.peak_bytes = max(0, hwm - self.base) * 1024


# ----------------------------------------------------------------------------- timing
def time_steps(step: Callable[[], None], warmup: int, min_steps: int, seconds: float) -> tuple[int, float]:
    """Run ``step`` ``warmup`` times untimed, then at least ``min_steps`` times until ``seconds`` pass.
    Returns (timed steps, elapsed seconds)."""
    for _ in range(warmup):
        step()
    n, t0 = 0, time.perf_counter()
    while n < min_steps or time.perf_counter() - t0 < seconds:
        step()
        n += 1
    return n, time.perf_counter() - t0


Act = Callable[[dict, SimConfig], torch.Tensor]
"""The policy that drives the benchmarked scenes: ``act(privileged state, sim config) -> B,4 action``
(the app layer passes the FSM expert, :func:`expert.expert_action`)."""


def env_stepper(env, cfg: SimConfig, act: Act) -> Callable[[], None]:
    """One benchmark step of any env of the protocol (:class:`graspsim.protocol.GraspEnvProtocol`): ``act`` on its
    privileged state, then ``env.step``; what :func:`time_steps` times."""

    def step() -> None:
        env.step(act(env.privileged(), cfg))

    return step


def measure_torch_sim(act: Act, sim: SimConfig, batch: int, device: str, seed: int, warmup: int, min_steps: int,
                      seconds: float) -> dict:
    """Frames/s (and peak memory per scene) of the batched torch env stepping ``batch`` scenes."""
    with PeakMemory() as mem:
        env = GraspEnv(sim, num_envs=batch, device=device, seed=seed)
        env.reset()
        n, dt = time_steps(env_stepper(env, sim, act), warmup, min_steps, seconds)
    return {"batch": batch, "steps": n, "seconds": dt, "fps": batch * n / dt,
            "peak_mem_mb_per_scene": None if mem.peak_bytes is None else mem.peak_bytes / batch / 2**20,
            "load_avg_1min": os.getloadavg()[0]}


def measure_bullet(act: Act, sim: SimConfig, num_envs: int, workers: int, seed: int, warmup: int, min_steps: int,
                   seconds: float) -> dict:
    """Frames/s of the pybullet backend with ``num_envs`` clients over ``workers`` processes (0 = in-process)."""
    from .bullet import BulletGraspEnv

    with PeakMemory() as mem:
        t0 = time.perf_counter()
        env = BulletGraspEnv(sim, num_envs=num_envs, seed=seed, workers=workers)
        build = time.perf_counter() - t0
        try:
            env.reset()
            n, dt = time_steps(env_stepper(env, sim, act), warmup, min_steps, seconds)
        finally:
            env.close()
    per_scene = None if (mem.peak_bytes is None or workers > 0) else mem.peak_bytes / num_envs / 2**20
    return {"num_envs": num_envs, "workers": workers, "steps": n, "seconds": dt, "fps": num_envs * n / dt,
            "build_seconds": build, "peak_mem_mb_per_scene": per_scene, "load_avg_1min": os.getloadavg()[0]}


def measure_paired(act: Act, sim: SimConfig, batch: int, num_envs: int, workers: int, cfg: BenchConfig) -> dict:
    """Alternate timing windows of the torch sim (``batch``) and pybullet (``num_envs``, ``workers``),
    ``cfg.paired_rounds`` times with both envs alive, so both see the same machine load; returns the
    per-round frames/s and the median ratio."""
    from .bullet import BulletGraspEnv

    tenv = GraspEnv(sim, num_envs=batch, device=cfg.device, seed=cfg.seed)
    tenv.reset()
    with BulletGraspEnv(sim, num_envs=num_envs, seed=cfg.seed, workers=workers) as benv:
        benv.reset()
        pairs = timed_pairs(env_stepper(tenv, sim, act), batch, env_stepper(benv, sim, act), num_envs,
                            cfg.paired_rounds, cfg)
    rounds = [{"torch_fps": ft, "bullet_fps": fb, "ratio": ft / fb, "load_avg_1min": load} for ft, fb, load in pairs]
    return {"torch_batch": batch, "bullet_num_envs": num_envs, "bullet_workers": workers, "rounds": rounds,
            "median_ratio": median_ratio(rounds)}


def timed_pairs(first: Callable[[], None], first_frames: int, second: Callable[[], None], second_frames: int,
                rounds: int, cfg: BenchConfig) -> list[tuple[float, float, float]]:
    """``rounds`` rounds, each a timing window of ``first`` and then one of ``second`` (``cfg.seconds / 2`` each, after
    ``cfg.warmup`` untimed steps), so both halves of a round see the same machine load. Returns per round (frames/s of
    ``first``, frames/s of ``second``, 1-minute load average); a step advances ``*_frames`` frames."""
    out = []
    for _ in range(rounds):
        n1, dt1 = time_steps(first, cfg.warmup, cfg.min_steps, cfg.seconds / 2)
        n2, dt2 = time_steps(second, cfg.warmup, cfg.min_steps, cfg.seconds / 2)
        out.append((first_frames * n1 / dt1, second_frames * n2 / dt2, os.getloadavg()[0]))
    return out


def median_ratio(rounds: list[dict]) -> float:
    """The median of the rounds' ``ratio`` (the upper one of an even count)."""
    ratios = sorted(r["ratio"] for r in rounds)
    return ratios[len(ratios) // 2]


# ----------------------------------------------------------------------------- nets
# ----------------------------------------------------------------------------- profile
def profile_torch_step(act: Act, sim: SimConfig, batch: int, device: str, seed: int, top: int = 12) -> dict:
    """Where the time of one torch-sim step goes: top operators by self CPU time, and the share of
    ``render`` vs ``physics.step`` vs the rest."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from . import physics
    from .render import render

    env = GraspEnv(sim, num_envs=batch, device=device, seed=seed)
    env.reset()
    a = act(env.privileged(), sim)
    for _ in range(2):
        env.step(a)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            with record_function("physics.step"):
                state = physics.step(env.state, a, sim)
            with record_function("render"):
                render(state, sim)
    events = prof.key_averages()
    functions = _render_functions(env, a, sim)
    ablation = _render_ablation(env, a, sim)
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    parts = {e.key: e.cpu_time_total / 3 / 1e3 for e in events if e.key in ("physics.step", "render")}
    ops = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return {
        "batch": batch,
        "ms_per_step": parts,
        "render_functions_ms": functions,
        "render_ablation_fps": ablation,
        "top_ops": [{"op": e.key, "self_ms_per_step": e.self_cpu_time_total / 3 / 1e3, "calls_per_step": e.count / 3,
                     "share": e.self_cpu_time_total / total} for e in ops],
    }


def _render_ablation(env, action, sim: SimConfig, reps: int = 2) -> dict:
    """Render-only frames/s of the same states with parts switched off (shadows, distractors, fingers,
    blur/noise), to show which feature of the ray caster costs what."""
    from . import physics
    from .render import render

    state = physics.step(env.state, action, sim)
    variants = {"full": {}, "no_shadows": {"shadows": False}, "no_post": {"post": False},
                "no_distractors": {"distractors": False}, "no_fingers": {"fingers": False},
                "sphere_and_table_only": {"shadows": False, "post": False, "distractors": False, "fingers": False}}
    out = {}
    for name, kw in variants.items():
        render(state, sim, **kw)
        t0 = time.perf_counter()
        for _ in range(reps):
            render(state, sim, **kw)
        out[name] = state.batch_size * reps / (time.perf_counter() - t0)
    return out


def _render_functions(env, action, sim: SimConfig, reps: int = 2) -> dict:
    """Cumulative ms per step of the Python functions of ``graspsim/render.py`` (cProfile, no profiler
    overhead inside the ops), largest first: which stage of the ray caster costs what."""
    import cProfile
    import pstats

    from . import physics
    from .render import render

    state = physics.step(env.state, action, sim)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(reps):
        render(state, sim)
    pr.disable()
    stats = pstats.Stats(pr).stats  # (file, line, name) -> (cc, nc, tt, ct, callers)
    rows = {f"{name} (render.py:{line})": ct / reps * 1e3 for (file, line, name), (_, _, _, ct, _) in stats.items()
            if file.endswith(os.path.join("graspsim", "render.py"))}
    return dict(sorted(rows.items(), key=lambda kv: -kv[1]))


# ----------------------------------------------------------------------------- outputs
def _write_json(path: Path, data: dict) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, default=str))


def plot_fps(result: dict, path: Path) -> None:
    """fps versus batch size (log-log) for the torch sim, with the pybullet configurations as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    for k, th in enumerate(sorted({r["threads"] for r in result["torch_sim"]})):
        ts = [r for r in result["torch_sim"] if r["threads"] == th]
        ax.plot([r["batch"] for r in ts], [r["fps"] for r in ts], "o-", color=f"C{k}",
                label=f"torch sim (step + render), {th} thread{'s' if th > 1 else ''}")
    loop = result.get("full_loop") or {}
    if "fps" in loop:
        ax.plot([loop["batch"]], [loop["fps"]], "s", color="C7", label="torch sim + vision + control")
    for i, r in enumerate(result["bullet"]):
        ax.axhline(r["fps"], color=f"C{2 + i % 5}", ls="--", lw=1,
                   label=f"pybullet {r['num_envs']} env{'s' if r['num_envs'] > 1 else ''}, "
                         f"{'in-process' if r['workers'] == 0 else str(r['workers']) + ' workers'}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size (scenes)")
    ax.set_ylabel("frames / s")
    ax.set_title(f"{result['image_size']}x{result['image_size']}, {result['machine']['cpus']} CPUs "
                 f"(load {result['machine']['load_avg_at_start'][0]:.1f} at start)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    try:
        with replace_atomically(path) as tmp:
            fig.savefig(tmp, format="png")
    finally:
        plt.close(fig)


def bench(cfg: BenchConfig, act: Act, extra: Callable[[BenchConfig, SimConfig, Act], dict] | None = None) -> dict:
    """Run every measurement (see module docstring), write ``bench.json`` and the plot; return the dict.

    ``act`` drives the scenes (see :data:`Act`).
    ``extra(cfg, sim, act)`` (optional) returns more entries for the result (the app layer passes the full-loop
    and training measurements of :mod:`graspsim.dagger.throughput`); it runs after the simulator measurements with
    the best torch thread count, and gets ``cfg`` with ``threads`` as the counts measured (0 resolved)."""
    import dataclasses

    import pybullet

    out = check_out_dir(cfg.out, overwrite=cfg.overwrite)
    sim = dataclasses.replace(cfg.sim, image_size=cfg.image_size)
    old_threads = torch.get_num_threads()
    counts = tuple(t or old_threads for t in cfg.threads)  # 0 = torch's default, resolved once
    t_start = time.perf_counter()
    try:
        result: dict = {
            "config": json.loads(json.dumps(asdict(cfg), default=str)),
            "image_size": cfg.image_size,
            "machine": {
                "cpus": os.cpu_count(), "torch_default_threads": old_threads, "torch": torch.__version__,
                "pybullet_api": pybullet.getAPIVersion(), "platform": platform.platform(),
                "processor": platform.processor(), "load_avg_at_start": os.getloadavg(),
            },
            "notes": [
                "one frame = one scene advanced one control step and rendered (RGB + target mask)",
                "peak_mem_mb_per_scene = rise of peak RSS (VmHWM reset via /proc/self/clear_refs) over the RSS "
                "before the measurement, divided by the scenes; in-process only",
                "timings are wall-clock on a machine shared with other jobs; see load_avg_at_start",
            ],
        }
        _warm_caches(sim, cfg)
        result["torch_sim"] = []
        for th in counts:
            torch.set_num_threads(th)
            for b in cfg.batch_sizes:
                r = measure_torch_sim(act, sim, b, cfg.device, cfg.seed, cfg.warmup, cfg.min_steps, cfg.seconds)
                r["threads"] = torch.get_num_threads()
                log.info("torch sim batch %d, %d threads: %.0f frames/s", b, r["threads"], r["fps"])
                result["torch_sim"].append(r)
        # pybullet runs one scene at a time per process; its few torch ops are tiny
        torch.set_num_threads(max(counts))
        result["bullet"] = []
        for n, w in cfg.bullet_configs:
            r = measure_bullet(act, sim, n, w, cfg.seed, cfg.warmup, cfg.min_steps, cfg.seconds)
            log.info("pybullet %d envs, %d workers: %.0f frames/s", n, w, r["fps"])
            result["bullet"].append(r)
        best_t = max(result["torch_sim"], key=lambda r: r["fps"])
        best_b = max(result["bullet"], key=lambda r: r["fps"]) if result["bullet"] else None
        torch.set_num_threads(best_t["threads"])  # the rest of the run uses the best torch setting
        result["machine"]["torch_threads"] = best_t["threads"]
        if best_b is not None:
            result["speedup_vs_bullet"] = best_t["fps"] / best_b["fps"]
            result["speedup_detail"] = {
                "torch": {"batch": best_t["batch"], "threads": best_t["threads"], "fps": best_t["fps"]},
                "bullet": {"num_envs": best_b["num_envs"], "workers": best_b["workers"], "fps": best_b["fps"]},
                "image_size": cfg.image_size, "target": cfg.target_speedup,
                "met": result_met(best_t["fps"], best_b["fps"], cfg.target_speedup),
            }
            log.info("speedup vs pybullet at %dx%d: %.1fx", cfg.image_size, cfg.image_size, result["speedup_vs_bullet"])
            if cfg.paired_rounds > 0:
                pair = measure_paired(act, sim, best_t["batch"], best_b["num_envs"], best_b["workers"], cfg)
                result["speedup_paired"] = pair
                log.info("paired rounds (same load): median ratio %.1fx", pair["median_ratio"])
        else:
            result["speedup_vs_bullet"] = None

        if extra is not None:  # measurements of learning code, supplied by the app layer (no upward import)
            result.update(extra(dataclasses.replace(cfg, threads=counts), sim, act))
            loop = result.get("full_loop") or {}
            if "fps" in loop:
                loop.update(loop_vs_sim(loop, result["torch_sim"], best_t))
                log.info("full loop %.0f frames/s at batch %d: the bare simulator is %.1fx faster (%.1fx at the same "
                         "batch and threads)", loop["fps"], loop["batch"], loop["sim_best_over_loop"],
                         loop.get("sim_same_batch_over_loop", float("nan")))
        short = result["speedup_vs_bullet"] is not None and result["speedup_vs_bullet"] < cfg.target_speedup
        if cfg.profile and short:
            result["profile"] = profile_torch_step(act, sim, best_t["batch"], cfg.device, cfg.seed)
        result["total_seconds"] = time.perf_counter() - t_start
        with staged_dir(out, OUTPUTS.__contains__) as stage:  # replaces --out's earlier outputs as a whole
            _write_json(stage / "bench.json", result)
            if cfg.plot:
                plot_fps(result, stage / "fps_vs_batch.png")
        log.info("wrote %s in %.0f s", out / "bench.json", result["total_seconds"])
        return result
    finally:
        torch.set_num_threads(old_threads)


def loop_vs_sim(loop: dict, torch_sim: list[dict], best: dict) -> dict:
    """How far the full loop (``loop["fps"]`` at ``loop["batch"]``) stays behind the bare simulator: the best
    simulator frames/s over the loop's (``sim_best_over_loop``, the figure a user compares), and the simulator at the
    loop's batch and thread count over the loop's (``sim_same_batch_over_loop``, when that batch was measured)."""
    out = {"sim_best_fps": best["fps"], "sim_best_over_loop": best["fps"] / loop["fps"]}
    same = [r for r in torch_sim if r["batch"] == loop["batch"] and r["threads"] == best["threads"]]
    if same:
        out["sim_same_batch_fps"] = same[0]["fps"]
        out["sim_same_batch_over_loop"] = same[0]["fps"] / loop["fps"]
    return out


def _warm_caches(sim: SimConfig, cfg: BenchConfig) -> None:
    """One untimed step of each backend, so lazy imports and one-off caches (texture bank, URDF copy,
    texture PNGs) are neither timed nor counted as per-scene memory."""
    env = GraspEnv(sim, num_envs=1, device=cfg.device, seed=cfg.seed)
    env.step(torch.zeros(1, sim.action_dim, device=cfg.device))
    if cfg.bullet_configs:
        from graspsim.bullet import BulletGraspEnv

        with BulletGraspEnv(sim, num_envs=1, seed=cfg.seed) as benv:
            benv.step(torch.zeros(1, sim.action_dim))


def result_met(torch_fps: float, bullet_fps: float, target: float) -> bool:
    """True when the torch simulator reaches ``target`` times the pybullet frames/s."""
    return torch_fps >= target * bullet_fps
