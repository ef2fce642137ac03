"""Throughput of the learned parts, measured for ``graspsim bench`` (the app layer passes
:func:`measure_nets` to :func:`graspsim.bench.bench`):

* **full loop**: torch sim step + segmentation-net inference on the RGB + control-net inference on the
  predicted mask, at ``loop_batch`` scenes (random weights of the default nets unless checkpoints are given), with
  the share of wall time of each part, the vision net's MFLOP per frame and the GFLOP/s it achieved;
* **loop over simulator, paired**: ``loop_rounds`` rounds, each a window of the bare simulator (driven by the
  expert, as the simulator rows are) and a window of the full loop at the same batch and threads, one after the
  other; the median of the per-round ratios (``full_loop["paired"]["median_ratio"]``) is how many times slower
  than the simulator the learned loop runs, robust to load that drifts between measurements minutes apart. It is
  taken at the run's thread count and again at every other count of ``threads``
  (``full_loop["paired_by_threads"]``): on a shared VM the one-thread ratio is the reproducible one;
* **training**: samples/s of forward + backward + Adam for both nets on a synthetic batch.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable

import torch

from graspsim import GraspEnv, SimConfig
from graspsim.bench import Act, BenchConfig, _stepper, _timed, bench, median_ratio, timed_pairs
from graspsim.keys import GRIPPER, RGB

log = logging.getLogger(__name__)


def run_bench(cfg: BenchConfig) -> dict:
    """``graspsim bench``: the simulator benchmark of :func:`graspsim.bench.bench` driven by the FSM expert, with
    the learned parts measured here; writes ``bench.json`` and the plot into ``cfg.out`` and returns the result."""
    from graspsim.expert import expert_action

    return bench(cfg, act=expert_action, extra=measure_nets)


def measure_nets(cfg: BenchConfig, sim: SimConfig, act: Act) -> dict:
    """``{"full_loop": ..., "training": ...}`` for ``graspsim bench`` (see the module docstring); ``act`` drives the
    bare-simulator windows of the paired rounds."""
    seg, ctl, notes = load_nets(cfg, cfg.image_size, sim)
    out: dict = {}
    if cfg.loop_batch > 0:
        out["full_loop"] = measure_full_loop(cfg, sim, seg, ctl) | {"nets": notes}
        log.info("full loop batch %d: %.0f frames/s", cfg.loop_batch, out["full_loop"]["fps"])
        if cfg.loop_rounds > 0:
            out["full_loop"]["paired"], out["full_loop"]["paired_by_threads"] = paired_by_threads(cfg, sim, seg, ctl,
                                                                                                  act)
    else:
        out["full_loop"] = {"skipped": "loop_batch = 0"}
    out["training"] = measure_training(cfg, seg, ctl, cfg.image_size)
    return out


def load_nets(cfg: BenchConfig, image_size: int, sim: SimConfig | None = None) -> tuple[object, object, dict]:
    """(``graspsim.vision.infer.Segmenter``, ``graspsim.dagger.policy.MaskPolicy``, notes): from the checkpoints when given, else
    randomly initialised nets of the shapes users train by default (``train-vision``'s net and its mirror-averaging
    setting, bf16 where the CPU has it, as a trained checkpoint would run; ``train-dagger``'s control net, turning the
    wrist when ``sim`` holds cubes or cylinders), so the loop costs what a default run's nets cost. Raises ImportError
    when a module is missing, ValueError when the control checkpoint cannot drive ``sim``'s target kinds."""
    from graspsim.dagger.model import ControlNet, ControlNetConfig
    from graspsim.dagger.policy import MaskPolicy, check_fits_scenes
    from graspsim.vision.infer import Segmenter
    from graspsim.vision.model import SegNet, cpu_has_fast_bf16
    from graspsim.vision.train_config import DEFAULT_MIRROR_TTA, DEFAULT_MODEL

    dev = torch.device(cfg.device)
    if cfg.vision is not None:
        seg = Segmenter.from_checkpoint(cfg.vision, dev)
    else:
        with torch.random.fork_rng():  # seeded weights, the caller's random state untouched
            torch.manual_seed(cfg.seed)
            net = SegNet(DEFAULT_MODEL)
        bf16 = dev.type != "cpu" or cpu_has_fast_bf16()
        seg = Segmenter(net, image_size=image_size, device=dev, precision="bf16" if bf16 else "fp32",
                        mirror_tta=DEFAULT_MIRROR_TTA)
    if cfg.policy is not None:
        ctl = MaskPolicy.from_checkpoint(cfg.policy, dev)
        if sim is not None:
            check_fits_scenes(ctl.cfg, sim, f"--policy {cfg.policy}", embodiment=ctl.trained_embodiment)
    else:
        wrist = sim is not None and sim.wrist
        ctl = MaskPolicy(ControlNet(ControlNetConfig(image_size=image_size, wrist=wrist,
                                                     fingertip_pixels=wrist and sim.fingertip_pixels)), dev)
    notes = {"vision": str(cfg.vision or "random init, train-vision's default net"),
             "control": str(cfg.policy or "random init, train-dagger's default net"),
             "vision_arch": dataclasses.asdict(seg.model.cfg), "vision_mirror_tta": bool(seg.mirror_tta),
             "vision_bf16_inference": bool(seg.bf16)}
    return seg, ctl, notes


def _loop_stepper(env: GraspEnv, seg, ctl, timing: dict) -> Callable[[], None]:
    """One closed-loop step of ``env`` (segment its RGB, act on the mask, step), adding each part's seconds to
    ``timing["vision" | "control" | "sim"]``."""
    obs = {"v": env.reset()}

    @torch.inference_mode()
    def step() -> None:
        o = obs["v"]
        t0 = time.perf_counter()
        mask = seg.predict_mask(o[RGB])
        t1 = time.perf_counter()
        action = ctl.act(mask, o[GRIPPER])
        t2 = time.perf_counter()
        obs["v"], *_ = env.step(action)
        t3 = time.perf_counter()
        timing["vision"] += t1 - t0
        timing["control"] += t2 - t1
        timing["sim"] += t3 - t2

    return step


def measure_full_loop(cfg: BenchConfig, sim: SimConfig, seg, ctl) -> dict:
    """Frames/s of torch sim + segmentation inference (``Segmenter.predict_mask``) + control inference
    (``MaskPolicy.act``) in closed loop, with the share of wall time of each part."""
    B = cfg.loop_batch
    env = GraspEnv(sim, num_envs=B, device=cfg.device, seed=cfg.seed)
    timing = {"sim": 0.0, "vision": 0.0, "control": 0.0}
    step = _loop_stepper(env, seg, ctl, timing)
    for _ in range(cfg.warmup):
        step()
    for k in timing:
        timing[k] = 0.0
    n, dt = _timed(step, 0, cfg.min_steps, cfg.seconds)
    from graspsim.vision.infer import vision_mflop_per_frame

    mflop = vision_mflop_per_frame(seg, sim.image_size)
    return {"batch": B, "steps": n, "seconds": dt, "fps": B * n / dt, "share": {k: v / dt for k, v in timing.items()},
            "vision_mflop_per_frame": mflop, "vision_fps": B * n / timing["vision"],
            "vision_gflop_per_s": mflop * B * n / timing["vision"] / 1e3}


def paired_by_threads(cfg: BenchConfig, sim: SimConfig, seg, ctl, act: Act) -> tuple[dict, dict]:
    """:func:`measure_loop_paired` at the run's thread count (the best simulator setting, which ``bench`` has set) and
    then at each other count of ``cfg.threads``. Returns (the run's measurement, ``{threads: measurement}`` for all).

    Why both: on a machine whose second core is shared (a VM), the bare simulator's two-thread rate moves between runs
    by a third while the one-thread rate stays within a few per cent, so the one-thread ratio is the one two runs
    reproduce, and the best-thread ratio is the one a user gets."""
    run_threads = torch.get_num_threads()
    counts = [run_threads] + sorted(set(cfg.threads) - {run_threads})
    by_threads: dict[str, dict] = {}
    try:
        for th in counts:
            torch.set_num_threads(th)
            pair = measure_loop_paired(cfg, sim, seg, ctl, act)
            by_threads[str(pair["threads"])] = pair
            log.info("full loop vs bare simulator at batch %d, %d thread(s), %d paired rounds: the loop is %.2fx slower "
                     "(median; rounds %s)", cfg.loop_batch, pair["threads"], cfg.loop_rounds, pair["median_ratio"],
                     ", ".join(f"{r['ratio']:.2f}" for r in pair["rounds"]))
    finally:
        torch.set_num_threads(run_threads)
    return by_threads[str(run_threads)], by_threads


def measure_loop_paired(cfg: BenchConfig, sim: SimConfig, seg, ctl, act: Act) -> dict:
    """``cfg.loop_rounds`` rounds at ``cfg.loop_batch`` scenes, each a timing window of the bare simulator (stepped
    by ``act``, as the simulator rows are) and then one of the full loop, both envs alive throughout, so that both
    halves of a round see the same machine load. Returns the per-round frames/s and ratios and the median ratio
    (bare simulator frames/s over loop frames/s: how many times slower the learned loop runs)."""
    B = cfg.loop_batch
    bare = GraspEnv(sim, num_envs=B, device=cfg.device, seed=cfg.seed)
    bare.reset()
    sim_step = torch.inference_mode()(_stepper(bare, sim, act))
    loop_step = _loop_stepper(GraspEnv(sim, num_envs=B, device=cfg.device, seed=cfg.seed), seg, ctl,
                              {"sim": 0.0, "vision": 0.0, "control": 0.0})
    rounds = [{"sim_fps": fs, "loop_fps": fl, "ratio": fs / fl, "load_avg_1min": load}
              for fs, fl, load in timed_pairs(sim_step, B, loop_step, B, cfg.loop_rounds, cfg)]
    return {"batch": B, "threads": torch.get_num_threads(), "rounds": rounds, "median_ratio": median_ratio(rounds)}


def measure_training(cfg: BenchConfig, seg, ctl, image_size: int) -> dict:
    """Samples/s of forward + backward + Adam for each net on a synthetic batch of ``train_batch``.
    The segmentation net trains as ``graspsim.vision.train`` does on CPU (channels_last, bfloat16 autocast)."""
    dev, B, H = torch.device(cfg.device), cfg.train_batch, image_size
    g = torch.Generator(device=dev).manual_seed(cfg.seed)
    x = (torch.randint(0, 256, (B, 3, H, H), generator=g, device=dev).float() / 255.0)
    x = x.contiguous(memory_format=torch.channels_last)
    target = (torch.rand((B, H, H), generator=g, device=dev) < 0.02).float()
    mask = torch.rand((B, H, H), generator=g, device=dev) < 0.02
    grip_dim, act_dim = ctl.cfg.gripper_dim, ctl.cfg.action_dim
    grip = torch.rand((B, grip_dim), generator=g, device=dev)
    act = torch.rand((B, act_dim), generator=g, device=dev) * 2 - 1
    bce, mse = torch.nn.functional.binary_cross_entropy_with_logits, torch.nn.functional.mse_loss
    bf16 = dev.type == "cpu"

    def seg_loss():
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            out = seg.model(x)
        return bce(out.float(), target)

    out = {}
    for name, net, loss_fn in (("vision", seg.model, seg_loss),
                               ("control", ctl.model, lambda: mse(ctl.model(mask, grip).float(), act))):
        net.train()
        opt = torch.optim.Adam(net.parameters(), lr=1e-4)

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            loss_fn().backward()
            opt.step()

        n, dt = _timed(step, cfg.warmup, cfg.min_steps, cfg.seconds)
        net.eval()
        out[name] = {"batch": B, "steps": n, "seconds": dt, "samples_per_s": B * n / dt,
                     "params": sum(p.numel() for p in net.parameters()),
                     "precision": "bf16 autocast" if (name == "vision" and bf16) else "float32"}
    return out


__all__ = ["load_nets", "measure_full_loop", "measure_nets", "measure_training"]
