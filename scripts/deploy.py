"""``graspsim deploy``: the closed loop outside our simulator, camera -> controller -> robot at a fixed rate.

>>> graspsim deploy --vision vision/assets/segnet.pt --policy runs/dg/policy.pt --camera bullet --robot bullet \\
...     --out runs/deploy --episodes 50 --hz 0

Each tick (one control period, ``1/hz`` s):

1. **capture**: the camera's latest frame and its capture time (:mod:`graspsim.cli.cameras`); the robot's senses;
2. **stale frame**: a frame older than two periods is not acted on: the robot gets zero velocity
   (gripper unchanged), ``stop=stale_frame``;
3. **vision + control**: :class:`graspsim.dagger.controller.Controller` (segmentation, control net, velocity clip to the
   trained range, gripper hysteresis, lost-target stop);
4. **workspace**: where the adapter reports the fingertip position and a workspace box, velocity components that
   would leave the box within one period are cut to reach its face (zero at the face), ``stop=workspace``;
5. **send**: the adapter executes the command and returns what it actually sent (:mod:`graspsim.cli.robots`).

Before the first tick the nets are warmed up on a blank frame (``--warmup`` decisions, not timed). The loop
sleeps to the next tick; a tick whose work takes longer than the period counts as an **overrun** (warned).
An episode ends when the robot says so (a simulated robot: success or failure) or at the time limit
(``--time-limit`` seconds of control time), and every episode end sends ``stop()``. On Ctrl-C or any error
the robot is stopped **first**, then the error is reported (no traceback for a camera or adapter fault).

Episodes run through the one rollout driver (:func:`graspsim.rollout.run_episodes`) with the ``test`` seeds of
``--seed``, so against the simulated ``bullet`` robot the scenes are those of
``graspsim eval-sim --backend bullet --seed S``.

Outputs: ``OUT/summary.json`` (episodes, success_rate where the robot can tell, achieved_hz, overruns,
latency_ms p50/p99 per stage and end to end, stop counts, per-episode outcomes), ``OUT/ticks.csv`` (one row per
tick: senses, the net's action, the command, what was sent, stop reason, stage times). ``--record DIR`` writes the
frames in the eval-real format (``images/``, and ``masks/`` with the exact masks where the camera is simulated)
plus the same per-tick CSV, written as the run goes into a hidden staging folder beside DIR and moved into DIR when
the run ends, also after Ctrl-C or an adapter error, so an interrupted real run keeps what it recorded (after a hard
kill it is in ``.DIR.*.staging``). With ``--overwrite`` the new recording replaces an earlier one as a whole.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

import numpy as np
import torch

from graspsim.dagger.controller import Controller, Decision, SafetyConfig
from graspsim import FAILURE_NAMES, SimConfig
from graspsim.extras import require
from graspsim.fileio import atomic_write_text, check_in_file, check_out_dir, staged_dir
from graspsim.rollout import Finished, Hooks, run_episodes
from graspsim.seeds import derive_seed, episode_seeds
from graspsim.validate import finite_non_negative, finite_positive, non_negative_int, positive_int

from .cameras import Camera, CameraError, EndOfStream, Frame, SIM_CAMERAS, open_camera
from .robots import SIM_ROBOTS, Robot, SimWorld, open_robot

log = logging.getLogger(__name__)

STALE_PERIODS = 2.0
"""A frame older than this many control periods is stale."""
STAGES = ("capture", "vision", "control", "decision", "send", "tick")
"""Timed stages: capture (camera read + senses), vision, control, decision (frame in -> command out: resize,
vision, control, safety rules), send, tick (capture to send)."""
CSV_FIELDS = ("episode", "tick", "image", "frame_age_ms", "gap", "close_sense", "contact",
              "act_vx", "act_vy", "act_vz", "act_grip", "cmd_vx", "cmd_vy", "cmd_vz", "cmd_grip",
              "sent_vx", "sent_vy", "sent_vz", "sent_grip", "visible", "mask_px", "stop",
              "capture_ms", "vision_ms", "control_ms", "decision_ms", "send_ms", "tick_ms")


class DeployError(ValueError):
    """A fault during the run (camera, adapter); the robot has been sent a stop first."""


RECORD_OUTPUTS = ("images", "masks", "ticks.csv")
"""What ``--record`` writes into its folder (and replaces as a whole with --overwrite)."""


@dataclass(frozen=True)
class DeployConfig:
    """Run the vision and control nets closed-loop on a camera and a robot at a fixed rate."""

    vision: Path
    """Vision checkpoint (graspsim train-vision; e.g. vision/assets/segnet.pt)."""
    policy: Path
    """Control checkpoint (graspsim dagger: policy.pt or best.pt)."""
    camera: str
    """Camera: an OpenCV device index, a video file, an image folder (replay), 'sim', 'bullet', or module:Class."""
    robot: str
    """Robot adapter: 'bullet' (Franka Panda in pybullet), 'sim' (torch simulator), 'dry-run', or module:Class."""
    out: Path
    """Output folder: summary.json and ticks.csv. A non-empty folder is refused unless --overwrite is given."""
    hz: float = 10.0
    """Control rate (Hz). 0 = as fast as possible (simulated and dry-run robots only; no stale-frame check)."""
    episodes: int = 1
    """Episodes to run."""
    time_limit: float = 12.0
    """Episode time limit in seconds of control time (ticks = time_limit x rate; at --hz 0 the simulator's rate)."""
    record: Optional[Path] = None
    """Also record the run into this folder: images/ (+ masks/ for simulated cameras) and ticks.csv."""
    runtime: Literal["torch", "onnx"] = "torch"
    """Inference runtime: torch, or onnxruntime on graphs exported from the same checkpoints."""
    onnx: Optional[Path] = None
    """With --runtime onnx: a 'graspsim export' folder to use (default: export the checkpoints into OUT/onnx)."""
    precision: Literal["auto", "fp32"] = "auto"
    """Torch vision precision: auto (bf16 where the CPU has native bf16 and the checkpoint's probe agrees) or fp32."""
    seed: int = 0
    """Seed of the scenes of a simulated robot (test stream, as eval-sim) and of its dynamics noise."""
    frame_timeout: float = 2.0
    """Seconds to wait for a camera frame before giving up with an error."""
    warmup: int = 5
    """Untimed decisions on a blank frame before the first tick."""
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    """The controller's safety rules (gripper hysteresis, lost-target stop)."""
    threads: int = 1
    """torch.set_num_threads and onnxruntime intra-op threads for the run (0 = leave the default). One thread is
    the default because a batch of one frame gains little from more, and on a shared CPU two OpenMP threads
    measured p99 latencies 10-100x worse (benchmarks/bench_latency.py)."""
    progress: bool = True
    """Log one line per finished episode."""
    overwrite: bool = False
    """Replace the outputs of an earlier run in --out (and --record)."""
    sim: SimConfig = field(default_factory=SimConfig)
    """Simulator configuration of the sim/bullet world (and the control rate used at --hz 0)."""

    def __post_init__(self) -> None:
        for name in ("vision", "policy", "out"):
            object.__setattr__(self, name, Path(getattr(self, name)))
        for name in ("record", "onnx"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, Path(getattr(self, name)))
        check_in_file(self.vision, "DeployConfig.vision", "vision checkpoint", inside="checkpoint.pt")
        check_in_file(self.policy, "DeployConfig.policy", "control checkpoint", inside="policy.pt")
        finite_non_negative("DeployConfig", "hz", self.hz, unit="Hz")
        positive_int("DeployConfig", "episodes", self.episodes)
        finite_positive("DeployConfig", "time_limit", self.time_limit, unit="s")
        finite_positive("DeployConfig", "frame_timeout", self.frame_timeout, unit="s")
        non_negative_int("DeployConfig", "warmup", self.warmup)
        non_negative_int("DeployConfig", "seed", self.seed)
        non_negative_int("DeployConfig", "threads", self.threads)
        if self.runtime not in ("torch", "onnx"):
            raise ValueError(f"DeployConfig.runtime must be 'torch' or 'onnx'; got {self.runtime!r}")
        if self.onnx is not None and self.runtime != "onnx":
            raise ValueError("DeployConfig: --onnx DIR needs --runtime onnx")
        if self.runtime == "onnx":
            require("onnxruntime", "deploy", "deploy --runtime onnx")
            if self.onnx is None:  # the checkpoints are exported first
                require("onnx", "deploy", "deploy --runtime onnx (without --onnx DIR, which exports the checkpoints)")
        if self.precision not in ("auto", "fp32"):
            raise ValueError(f"DeployConfig.precision must be 'auto' or 'fp32'; got {self.precision!r}")
        cam, rob = str(self.camera).strip(), str(self.robot).strip()
        if cam in SIM_CAMERAS and rob != cam:
            raise ValueError(f"DeployConfig: --camera {cam} shows the simulated world of --robot {cam}; got --robot {rob}")
        if self.hz == 0 and rob not in (*SIM_ROBOTS, "dry-run"):
            raise ValueError(f"DeployConfig: --hz 0 (as fast as possible) is for simulated and dry-run robots; "
                             f"give robot {rob!r} a real rate such as --hz 10")
        if self.record is not None and self.record.resolve() == self.out.resolve():
            raise ValueError("DeployConfig: --record must be another folder than --out")

    @property
    def period(self) -> float:
        """Seconds per tick (0 at --hz 0)."""
        return 1.0 / self.hz if self.hz > 0 else 0.0

    @property
    def max_ticks(self) -> int:
        return max(1, int(round(self.time_limit * (self.hz if self.hz > 0 else self.sim.control_hz))))

    def to_dict(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self), default=str))


# ------------------------------------------------------------------------------------------ the robot as an env
class _RobotEnv:
    """The env protocol of :mod:`graspsim.rollout` over a robot adapter, batch 1, so deploy episodes run through the
    one rollout driver. The hooks send the commands; ``step`` only ends the episode where the robot says so or at
    the time limit."""

    num_envs = 1
    device = torch.device("cpu")

    def __init__(self, robot, max_ticks: int, guard):
        self.robot, self.max_ticks, self.guard = robot, max_ticks, guard
        self.ticks = 0
        self.end = ""

    @contextlib.contextmanager
    def rendering(self, on: bool):
        yield self

    def reset(self, env_ids=None, seeds=None) -> dict:
        self.guard("start_episode", self.robot.start_episode, int(seeds[0]) if seeds else 0)
        self.ticks, self.end = 0, ""
        return {}

    def observe(self) -> dict:
        return {}

    def step(self, action):
        self.ticks += 1
        out = self.guard("outcome", self.robot.outcome)
        done = bool(out.done) or self.ticks >= self.max_ticks
        success = bool(out.success) if out.done else False
        reason = out.reason if out.done else "time_limit"
        code = FAILURE_NAMES.index(reason) if reason in FAILURE_NAMES else FAILURE_NAMES.index("timeout")
        self.end = reason if done else ""
        self.success_known = out.success is not None
        info = {"success": torch.tensor([success]), "failure": torch.tensor([code])}
        return {}, torch.zeros(1), torch.tensor([done]), info

    def privileged(self) -> dict:
        return {"steps": torch.tensor([self.ticks])}


def workspace_guard(vel: np.ndarray, tcp: np.ndarray | None, box, period: float) -> tuple[np.ndarray, bool]:
    """Cut velocity components that would carry the fingertip ``tcp`` (3, m) out of ``box`` = (low 3, high 3)
    within ``period`` s: at most the distance to the face per period, zero at or beyond it. Returns (velocity,
    whether anything was cut)."""
    if tcp is None or box is None:
        return vel, False
    lo, hi = (np.asarray(b, np.float64) for b in box)
    tcp = np.asarray(tcp, np.float64)
    up = np.maximum(hi - tcp, 0.0) / period
    down = -np.maximum(tcp - lo, 0.0) / period
    out = np.clip(vel.astype(np.float64), down, up).astype(np.float32)
    return out, bool((np.abs(out - vel) > 1e-9).any())


class _Csv:
    """Per-tick CSV rows, optionally also streamed to a record folder as they come."""

    def __init__(self, stream_to: Path | None):
        self.rows: list[dict] = []
        self.file = None
        if stream_to is not None:
            self.file = open(stream_to, "w", newline="")
            self.writer = csv.DictWriter(self.file, CSV_FIELDS)
            self.writer.writeheader()

    def add(self, row: dict) -> None:
        self.rows.append(row)
        if self.file is not None:
            self.writer.writerow(row)
            self.file.flush()

    def text(self) -> str:
        buf = io.StringIO()
        w = csv.DictWriter(buf, CSV_FIELDS)
        w.writeheader()
        w.writerows(self.rows)
        return buf.getvalue()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def _fmt(x: float) -> str:
    return f"{x:.6g}"


class _DeployHooks(Hooks):
    """One tick per driver step (see the module docstring)."""

    def __init__(self, cfg: DeployConfig, camera: Camera, robot, controller: Controller, env: _RobotEnv,
                 guard, csv_rows: _Csv, record: Path | None, clock=time.perf_counter, sleep=time.sleep):
        self.cfg, self.camera, self.robot, self.ctl, self.env = cfg, camera, robot, controller, env
        self.guard, self.csv, self.record_dir = guard, csv_rows, record
        self.clock, self.sleep = clock, sleep
        self.period = cfg.period
        self.times: dict[str, list[float]] = {s: [] for s in STAGES}
        self.intervals: list[float] = []
        self.stops: dict[str, int] = {}
        self.overruns = 0
        self.episodes: list[dict] = []
        self.episode = -1
        self.tick = 0
        self.box = None
        self.warmed = False
        self.next_t: float | None = None
        self.last_start: float | None = None

    # ---------------------------------------------------------------- episode boundaries
    def on_start(self, slots, episodes) -> None:
        if not self.warmed:
            blank = np.zeros((self.ctl.image_size, self.ctl.image_size, 3), np.uint8)
            for _ in range(self.cfg.warmup):
                self.ctl.decide(blank, np.array([1.0, 0.0, 0.0], np.float32))
            self.box = self.guard("workspace", self.robot.workspace) if hasattr(self.robot, "workspace") else None
            self.warmed = True
        self.ctl.reset()
        self.episode = int(episodes[0])
        self.tick = 0
        self.next_t = None
        self.last_start = None
        self.ep_stops: dict[str, int] = {}

    def on_end(self, fin: Finished) -> None:
        self.guard("stop", self.robot.stop)
        self.close_episode(self.env.end or "time_limit", bool(fin.success[0]), int(fin.steps[0]))

    def close_episode(self, end: str, success: bool, ticks: int) -> None:
        if self.episode < len(self.episodes):  # no episode open (it never started, or it was closed already)
            return
        known = getattr(self.env, "success_known", False)
        ep = {"episode": self.episode, "seed": None, "ticks": ticks, "success": success if known else None,
              "end": end, "stops": dict(self.ep_stops)}
        self.episodes.append(ep)
        if self.cfg.progress:
            log.info("episode %d: %s after %d ticks%s", self.episode, end, ticks,
                     f" (stops {self.ep_stops})" if self.ep_stops else "")

    # ---------------------------------------------------------------- one tick
    def _pace(self) -> float:
        now = self.clock()
        if self.period > 0 and self.next_t is not None and now < self.next_t:
            self.sleep(self.next_t - now)
            now = self.clock()
        if self.last_start is not None:
            self.intervals.append(now - self.last_start)
        self.last_start = now
        # the next tick is due one period after this one was due (sleep overshoot does not accumulate); after an
        # overrun of more than a period it starts at once, without a burst of ticks to catch up
        due = (now if self.next_t is None else self.next_t) + self.period
        self.next_t = due if due >= now else now
        return now

    def act(self, obs, active):
        cfg, ctl = self.cfg, self.ctl
        t0 = self._pace()
        frame: Frame = self.guard("camera", self.camera.read, cfg.frame_timeout)
        senses = self.guard("senses", self.robot.senses)
        t1 = self.clock()
        gripper = np.asarray(senses.gripper, np.float32).reshape(-1)
        age = time.monotonic() - frame.t
        keep = 1.0 if ctl.closed else -1.0
        if self.period > 0 and age > STALE_PERIODS * self.period:
            d = Decision(command=np.array([0.0, 0.0, 0.0, keep], np.float32),
                         action=np.full(4, np.nan, np.float32), mask=np.zeros((1, 1), bool), visible=False,
                         stop="stale_frame", times_ms={"vision": math.nan, "control": math.nan})
        else:
            d = ctl.decide(frame.rgb, gripper)
        command = d.command.copy()
        stop = d.stop
        command[:3], cut = workspace_guard(command[:3], getattr(senses, "tcp", None), self.box,
                                           self.period or 1.0 / cfg.sim.control_hz)
        if cut and not stop:
            stop = "workspace"
        t2 = self.clock()
        sent = self.guard("send", self.robot.send, command)
        sent = command if sent is None else np.asarray(sent, np.float32).reshape(-1)
        t3 = self.clock()
        if stop:
            self.stops[stop] = self.stops.get(stop, 0) + 1
            self.ep_stops[stop] = self.ep_stops.get(stop, 0) + 1
        ms = {"capture": 1e3 * (t1 - t0), "vision": d.times_ms["vision"], "control": d.times_ms["control"],
              "decision": 1e3 * (t2 - t1), "send": 1e3 * (t3 - t2), "tick": 1e3 * (t3 - t0)}
        for k, v in ms.items():
            if not math.isnan(v):
                self.times[k].append(v)
        if self.period > 0 and t3 - t0 > self.period:
            self.overruns += 1
            if self.overruns <= 5 or self.overruns % 100 == 0:
                log.warning("overrun: tick %d of episode %d took %.1f ms, the period is %.1f ms (%d overruns so far)",
                            self.tick, self.episode, 1e3 * (t3 - t0), 1e3 * self.period, self.overruns)
        self._log_row(frame, gripper, age, d, command, sent, stop, ms)
        self.tick += 1
        return torch.from_numpy(sent[None].astype(np.float32))

    def _log_row(self, frame: Frame, gripper, age, d: Decision, command, sent, stop, ms) -> None:
        image = ""
        if self.record_dir is not None:
            from graspsim.vision.io import write_png

            image = f"ep{self.episode:03d}_t{self.tick:04d}.png"
            write_png(self.record_dir / "images" / image, frame.rgb)
            if frame.mask is not None:
                write_png(self.record_dir / "masks" / image, frame.mask)
        row = {"episode": self.episode, "tick": self.tick, "image": image, "frame_age_ms": _fmt(1e3 * age),
               "gap": _fmt(gripper[0]), "close_sense": _fmt(gripper[1]), "contact": _fmt(gripper[2]),
               "visible": int(d.visible), "mask_px": int(d.mask.sum()), "stop": stop}
        for prefix, vec in (("act", d.action), ("cmd", command), ("sent", sent)):
            for name, v in zip(("vx", "vy", "vz", "grip"), vec):
                row[f"{prefix}_{name}"] = _fmt(float(v))
        for k, v in ms.items():
            row[f"{k}_ms"] = _fmt(v)
        self.csv.add(row)


def _stats(values: list[float]) -> dict:
    if not values:
        return {"p50": None, "p99": None, "mean": None, "max": None, "n": 0}
    a = np.asarray(values)
    return {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)), "mean": float(a.mean()),
            "max": float(a.max()), "n": int(a.size)}


def _guard(robot):
    """``guard(what, fn, *args)``: call a camera or adapter method; any exception from it becomes a DeployError
    naming the part (the caller stops the robot before reporting it). EndOfStream passes through."""
    def guard(what: str, fn, *args):
        try:
            return fn(*args)
        except (EndOfStream, KeyboardInterrupt, DeployError):
            raise
        except CameraError as e:
            raise DeployError(str(e)) from None
        except Exception as e:
            part = "camera" if what == "camera" else f"robot adapter {getattr(robot, 'name', '?')!r} ({what})"
            raise DeployError(f"{part} raised {type(e).__name__}: {e}") from None
    return guard


def _stop_first(robot) -> str:
    """Send the robot a stop; returns a note for the error message when that fails too."""
    try:
        robot.stop()
        return "the robot was sent a stop command"
    except Exception as e:
        log.error("robot stop failed: %s: %s", type(e).__name__, e)
        return f"sending the robot a stop FAILED too ({type(e).__name__}: {e}); stop the arm by hand"


def build_controller(cfg: DeployConfig, out: Path) -> Controller:
    if cfg.runtime == "torch":
        return Controller.from_checkpoints(cfg.vision, cfg.policy, precision=cfg.precision, safety=cfg.safety)
    folder = cfg.onnx
    if folder is None:
        from .export import ExportConfig, export

        folder = out / "onnx"
        export(ExportConfig(vision=cfg.vision, policy=cfg.policy, out=folder, overwrite=True, check=False))
    return Controller.from_export(folder, threads=cfg.threads, safety=cfg.safety)


def deploy(cfg: DeployConfig, *, camera: Camera | None = None, robot: Robot | None = None,
           controller: Controller | None = None) -> dict:
    """Run ``cfg.episodes`` episodes and write the outputs; returns the summary (also ``OUT/summary.json``).

    ``camera``, ``robot`` and ``controller`` replace the ones ``cfg`` names (for tests and for callers that build
    their own)."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = check_out_dir(cfg.out, overwrite=cfg.overwrite)
    if cfg.record is not None:
        check_out_dir(cfg.record, flag="--record", overwrite=cfg.overwrite)
    ctl = controller
    if ctl is None:
        ctl = build_controller(cfg, out)  # checkpoints first: a wrong kind is an error before any hardware moves
    world = None
    cam_name, rob_name = str(cfg.camera).strip(), str(cfg.robot).strip()
    opened: list = []
    try:
        if robot is None and rob_name in SIM_ROBOTS:
            world = SimWorld(rob_name, cfg.sim, seed=derive_seed(cfg.seed, 0xDE9107))
        if robot is None:
            robot = open_robot(rob_name, world)
            opened.append(robot)
        if camera is None:
            camera = open_camera(cam_name, world)
            opened.append(camera)
        if cfg.record is None:
            summary, error = _run(cfg, out, camera, robot, ctl, None)
        else:  # the recording replaces an earlier one as a whole (--overwrite), also when the run ends early
            with staged_dir(cfg.record, lambda name: name in RECORD_OUTPUTS) as stage:
                summary, error = _run(cfg, out, camera, robot, ctl, stage)
        if error is not None:
            raise error
        return summary
    finally:
        for part in reversed(opened):
            with contextlib.suppress(Exception):
                part.close()
        if world is not None:  # closing twice is harmless
            world.close()


def _run(cfg: DeployConfig, out: Path, camera, robot, ctl: Controller,
         record: Path | None) -> tuple[dict, BaseException | None]:
    """Run the episodes; returns the summary (written to ``out``) and the error or Ctrl-C that ended the run early,
    for the caller to raise once the recording (into ``record``) is in place."""
    if record is not None:
        (record / "images").mkdir(parents=True, exist_ok=True)
        if cfg.camera.strip() in SIM_CAMERAS:
            (record / "masks").mkdir(parents=True, exist_ok=True)
    rows = _Csv(record / "ticks.csv" if record is not None else None)
    guard = _guard(robot)
    env = _RobotEnv(robot, cfg.max_ticks, guard)
    hooks = _DeployHooks(cfg, camera, robot, ctl, env, guard, rows, record)
    seeds = episode_seeds(cfg.seed, "test", 0, cfg.episodes)
    ended, error = "", None
    t0 = time.perf_counter()
    try:
        run_episodes(env, seeds, hooks)
    except EndOfStream as e:
        note = _stop_first(robot)
        log.info("%s; %s", e, note)
        hooks.close_episode("camera_ended", False, env.ticks)
        ended = "camera_ended"
    except KeyboardInterrupt:
        note = _stop_first(robot)
        log.warning("interrupted: %s", note)
        hooks.close_episode("interrupted", False, env.ticks)
        ended, error = "interrupted", KeyboardInterrupt()
    except DeployError as e:
        note = _stop_first(robot)
        hooks.close_episode("error", False, env.ticks)
        ended, error = "error", DeployError(f"{e}; {note}")
    except BaseException:  # our own bug: stop the arm before anything else, then let it surface
        _stop_first(robot)
        raise
    finally:
        rows.close()
    seconds = time.perf_counter() - t0
    for ep, seed in zip(hooks.episodes, seeds):
        ep["seed"] = seed
    summary = _summary(cfg, hooks, ctl, camera, robot, seconds, ended)
    with contextlib.suppress(OSError):
        out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "ticks.csv", rows.text())
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2))
    if error is not None:
        return summary, error
    sr = summary["success_rate"]
    log.info("deploy: %d episodes, success %s, %.1f Hz achieved (target %s), decision p99 %.1f ms, %d overruns",
             summary["episodes"], "n/a" if sr is None else f"{100 * sr:.1f}%", summary["achieved_hz"] or 0.0,
             cfg.hz or "max", summary["latency_ms"]["decision"]["p99"] or 0.0, summary["overruns"])
    return summary, None


def _summary(cfg: DeployConfig, hooks: _DeployHooks, ctl: Controller, camera, robot, seconds: float,
             ended: str) -> dict:
    from graspsim.dagger.evaluate import wilson

    eps = hooks.episodes
    known = [e for e in eps if e["success"] is not None]
    k = sum(bool(e["success"]) for e in known)
    rate = k / len(known) if known else None
    iv = np.asarray(hooks.intervals)
    return {
        "episodes": len(eps),
        "success_rate": rate,
        "num_success": k if known else None,
        "success_ci95": list(wilson(k, len(known))) if known else None,
        "achieved_hz": float(1.0 / iv.mean()) if iv.size else None,
        "target_hz": cfg.hz,
        "overruns": hooks.overruns,
        "ticks": sum(e["ticks"] for e in eps),
        "latency_ms": {s: _stats(v) for s, v in hooks.times.items()},
        "stops": dict(hooks.stops),
        "ended": ended or "completed",
        "per_episode": eps,
        "runtime": ctl.runtime,
        "vision_precision": getattr(ctl.nets, "precision", None),
        "mirror_tta": getattr(ctl.nets, "mirror_tta", None),
        "camera": getattr(camera, "name", str(cfg.camera)),
        "robot": getattr(robot, "name", str(cfg.robot)),
        "seconds": seconds,
        "torch_threads": torch.get_num_threads(),
        "load_average": list(os.getloadavg()),
        "config": cfg.to_dict(),
    }


__all__ = ["CSV_FIELDS", "DeployConfig", "DeployError", "STAGES", "STALE_PERIODS", "deploy", "workspace_guard"]
