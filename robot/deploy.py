"""The ``graspsim deploy`` verb's library: the closed loop outside our simulator, camera -> controller -> robot at a
fixed rate. The tick itself is :mod:`graspsim.robot.loop`.

>>> graspsim deploy --vision vision/assets/segnet.pt --policy runs/dg/policy.pt --camera bullet --robot bullet \\
...     --out runs/deploy --episodes 50 --hz 0

Each tick (one control period, ``1/hz`` s):

1. **capture**: the camera's latest frame and its capture time (:mod:`graspsim.robot.cameras`); the robot's senses;
2. **stale frame**: a frame older than two periods is not acted on: the robot gets zero velocity
   (gripper unchanged), ``stop=stale_frame``;
3. **vision + control**: :class:`graspsim.robot.controller.Controller` (segmentation, control net, velocity clip to the
   trained range, gripper hysteresis, lost-target stop);
4. **workspace**: where the adapter reports the fingertip position and a workspace box, velocity components that
   would leave the box within one period are cut to reach its face (zero at the face), ``stop=workspace``;
5. **send**: the adapter executes the command and returns what it actually sent (:mod:`graspsim.robot.robots`).

Before the first tick the nets are warmed up on a blank frame (``--warmup`` decisions, not timed). The loop
sleeps to the next tick; a tick whose work takes longer than the period counts as an **overrun** (warned).
An episode ends when the robot says so (a simulated robot: success or failure) or at the time limit
(``--time-limit`` seconds of control time), and every episode end sends ``stop()``. On Ctrl-C, any other stop
signal (:mod:`graspsim.interrupts`: SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, ...) or any error the robot is stopped
**first**, then the outputs are written (a further signal meanwhile is held, with a warning), then the error is
reported (no traceback for a camera or adapter fault); the camera and the robot are closed last, each ``close()``
within :data:`graspsim.robot.cameras.CLOSE_TIMEOUT` s. The
camera is read in a worker thread under a watchdog (:func:`graspsim.robot.loop.capture_deadlines`): a read
still running after two control periods gets the robot a ``stop()``, one still running after ``--frame-timeout``
+ 0.5 s ends the run with an error. Every robot adapter method is called from the thread that called
:func:`deploy`. Values the camera and the adapter return are checked (an error names the class and the method).

Episodes run through the one rollout driver (:func:`graspsim.rollout.run_episodes`) with the ``test`` seeds of
``--seed``, so against the simulated ``bullet`` robot the scenes are those of
``graspsim eval-sim --backend bullet --seed S``.

Outputs (:data:`OUTPUTS`): ``OUT/summary.json`` (episodes, success_rate where the robot can tell, achieved_hz,
overruns, capture stalls, latency_ms p50/p99 per stage and end to end, stop counts, per-episode outcomes, the error
that ended the run), ``OUT/ticks.csv`` (one row per tick: senses, the net's action, the command, what was sent, stop
reason, stage times) and, with ``--inference onnx`` without ``--onnx``, ``OUT/onnx`` (the export used). They are
written into a hidden staging folder beside OUT and replace an earlier run's outputs as a whole once the run ends
(also after Ctrl-C or a fault); a run refused before it starts (a camera that does not open) leaves OUT as it was.
Under torchrun (``WORLD_SIZE`` > 1) deploy is refused before anything opens. ``--record DIR`` writes the
frames as an image set (:mod:`graspsim.vision.image_set`: ``images/``, and ``masks/`` with the exact masks where the
camera is simulated) plus the same per-tick CSV, written as the run goes into a hidden staging folder beside DIR and
moved into DIR when the run ends, also after Ctrl-C or an adapter error, so an interrupted real run keeps what it
recorded (after a hard kill it is in ``.DIR.*.staging``). With ``--overwrite`` the new recording replaces an earlier
one as a whole.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional, Tuple

import numpy as np
import torch
import tyro

from graspsim import SimConfig, compat, interrupts
from graspsim.distributed import single_process
from graspsim.extras import MissingExtra, installed, require
from graspsim.fileio import atomic_write_text, check_in_file, check_out_dir, staged_dir
from graspsim.rollout import run_episodes
from graspsim.runtime import Runtime, RuntimeConfig
from graspsim.seeds import episode_seeds
from graspsim.stats import wilson
from graspsim.validate import finite_non_negative, finite_positive, int_in, non_negative_int

from .cameras import (SIM_CAMERAS, Camera, CameraReader, EndOfStream, check_source, close_camera, close_within,
                      device_index, open_camera)
from .controller import Controller, SafetyConfig
from .loop import (CSV_FIELDS, STAGES, STALE_PERIODS, TICKS_CSV, DeployError, RobotEnv, TickHooks, TickLog,
                         adapter_name, capture_deadlines, guarded, latency_stats, read_fingertip, stop_first,
                         workspace_guard)
from .cameras import load_class
from .robots import SIM_ROBOTS, Robot, SimRobot, SimWorld, open_robot
from .so101 import INSTALL_HINT as SO101_INSTALL, So101Config

log = logging.getLogger(__name__)

SUMMARY_JSON = "summary.json"
ONNX_DIR = "onnx"
OUTPUTS = (SUMMARY_JSON, TICKS_CSV, ONNX_DIR)
"""What deploy writes into --out (and replaces as a whole with --overwrite; a stale onnx/ of an earlier run goes)."""
ONE_PROCESS = "open the camera and the robot, send every command again and write the same --out"
"""What every rank of a torchrun job would do (why deploy refuses to run under torchrun)."""
RECORD_OUTPUTS = ("images", "masks", TICKS_CSV)
"""What ``--record`` writes into its folder (and replaces as a whole with --overwrite)."""
MAX_HZ = 1000.0
"""Largest --hz (a real arm's loop runs at 10-100 Hz; the time limit counts ticks, so 1e6 Hz would mean hours)."""
MAX_TIME_LIMIT = 3600.0
"""Largest --time-limit (s): one episode of an hour."""
MAX_EPISODES = 100_000
"""Largest --episodes of one deploy run."""
LEGACY_RUNTIME_KEYS = tuple(compat.LEGACY_TOP_LEVEL["deploy"])
"""Settings that were DeployConfig's own fields before they moved into ``runtime`` (a RuntimeConfig); a stored config
or a caller that still gives them at the top level is read as if they were grouped (:mod:`graspsim.compat`)."""


def _deploy_runtime() -> RuntimeConfig:
    """Deploy's runtime defaults: one thread, because a batch of one frame gains little from more, and on a shared
    CPU two OpenMP threads measured p99 latencies 10-100x worse (benchmarks/bench_latency.py)."""
    return RuntimeConfig(threads=1)


@dataclass(frozen=True)
class DeployConfig:
    """Run the vision net and the policy closed-loop on a camera and a robot at a fixed rate."""

    vision: Path
    """Vision checkpoint (graspsim train-vision; e.g. vision/assets/segnet.pt)."""
    policy: Path
    """Policy checkpoint (graspsim dagger: policy.pt or best.pt)."""
    camera: str
    """Camera: an OpenCV device index, a video file, an image folder (replay), 'sim', 'bullet', 'mujoco' (the simulated
    world of the same --robot), 'lerobot:...' (a LeRobot camera), or module:Class."""
    robot: str
    """Robot adapter: 'bullet' (Franka Panda in pybullet), 'sim' (torch simulator), 'mujoco' (the SO-101 in MuJoCo, with
    --sim.embodiment so101), 'dry-run', 'so101' (a real SO-101 through LeRobot, see --so101.*), or module:Class."""
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
    inference: Literal["torch", "onnx"] = "torch"
    """Where the nets run: torch, or onnxruntime on graphs exported from the same checkpoints (before 0.2.0:
    --runtime)."""
    onnx: Optional[Path] = None
    """With --inference onnx: a 'graspsim export' folder to use (default: export the checkpoints into OUT/onnx)."""
    precision: Literal["auto", "fp32"] = "auto"
    """Torch vision precision: auto (bf16 where the CPU has native bf16 and the checkpoint's probe agrees) or fp32."""
    seed: int = 0
    """Seed of the scenes of a simulated robot (test stream, as eval-sim) and of its dynamics noise."""
    frame_timeout: float = 2.0
    """Seconds the camera's read may wait for a frame before giving up with an error; a read that has not returned
    0.5 s after that is cut off by the capture watchdog (which already sent the robot a stop after two periods)."""
    warmup: int = 5
    """Untimed decisions on a blank frame before the first tick."""
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    """The controller's safety rules (gripper hysteresis, lost-target stop)."""
    fingertip: Optional[Tuple[float, float, float, float]] = None
    """For a wrist net with fingertip senses (trained on cubes or cylinders): where the fingertip centre and a point
    2 cm above it appear in your camera's frame (its centred square with --frame-crop square), x0 y0 x1 y1 as
    fractions of its width and height (docs/deploy.md, "Measuring the fingertip points"). None: the adapter's
    fingertip() if it has one (the simulated robots report their scene's), else the nominal mount of the training
    scenes. Other nets ignore it."""
    frame_crop: Literal["auto", "stretch", "square"] = "auto"
    """How a camera frame becomes the nets' square input: 'square' keeps its centred square (for an embodiment whose
    wrist image is the square crop of a wider sensor, as the SO-101's is), 'stretch' resizes the whole frame; 'auto'
    takes the embodiment the policy was trained for ('square' for so101, 'stretch' for floating). The fingertip points
    are fractions of the image after this step."""
    runtime: Runtime = field(default_factory=_deploy_runtime)
    """Device of torch inference (--inference onnx runs on the CPU), torch and onnxruntime intra-op threads (one by
    default: see benchmarks/bench_latency.py), and --progress (one log line per finished episode)."""
    overwrite: bool = False
    """Replace the outputs of an earlier run in --out (and --record)."""
    sim: SimConfig = field(default_factory=SimConfig)
    """Simulator configuration of the sim/bullet world (and the control rate used at --hz 0)."""
    so101: So101Config = field(default_factory=So101Config)
    """The real SO-101 of --robot so101 (LeRobot's driver): --so101.port, --so101.id, --so101.dry-run, --so101.speed
    (docs/so101_real_arm.md). Other robots ignore it."""
    threads: tyro.conf.Suppress[Optional[int]] = None
    """Older spelling of runtime.threads (no flag): given, it replaces runtime.threads."""
    progress: tyro.conf.Suppress[Optional[bool]] = None
    """Older spelling of runtime.progress (no flag): given, it replaces runtime.progress."""
    run: tyro.conf.Suppress[Optional[RuntimeConfig]] = None
    """The name of ``runtime`` before 0.2.0 (no flag): refused with a ValueError naming ``runtime``."""

    def __post_init__(self) -> None:
        self._check_renamed_fields()
        self._group_legacy_runtime()
        for name in ("vision", "policy", "out"):
            object.__setattr__(self, name, Path(getattr(self, name)))
        for name in ("record", "onnx"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, Path(getattr(self, name)))
        check_in_file(self.vision, "DeployConfig.vision", "vision checkpoint", inside="checkpoint.pt")
        check_in_file(self.policy, "DeployConfig.policy", "policy checkpoint", inside="policy.pt")
        finite_non_negative("DeployConfig", "hz", self.hz, unit="Hz")
        if self.hz > MAX_HZ:
            raise ValueError(f"DeployConfig.hz must be at most {MAX_HZ:g} Hz (0 = as fast as possible, simulated and "
                             f"dry-run robots only); got {self.hz!r}")
        int_in("DeployConfig", "episodes", self.episodes, 1, MAX_EPISODES)
        finite_positive("DeployConfig", "time_limit", self.time_limit, unit="s")
        if self.time_limit > MAX_TIME_LIMIT:
            raise ValueError(f"DeployConfig.time_limit must be at most {MAX_TIME_LIMIT:g} s (one episode); got "
                             f"{self.time_limit!r}")
        finite_positive("DeployConfig", "frame_timeout", self.frame_timeout, unit="s")
        non_negative_int("DeployConfig", "warmup", self.warmup)
        non_negative_int("DeployConfig", "seed", self.seed)
        self._check_runtime()
        single_process("deploy", ONE_PROCESS)
        cam, rob = str(self.camera).strip(), str(self.robot).strip()
        check_source(cam, "--camera")  # '' would replay the PNGs of the current folder
        if not rob:
            raise ValueError("DeployConfig: --robot is empty; give 'sim', 'bullet', 'mujoco', 'so101', 'dry-run' or "
                             "module:Class")
        device_index(cam, "--camera")  # a bad device number is refused before OpenCV sees it
        if cam in SIM_CAMERAS and rob != cam:
            raise ValueError(f"DeployConfig: --camera {cam} shows the simulated world of --robot {cam}; got --robot {rob}")
        if rob == "mujoco" and self.sim.embodiment != "so101":
            raise ValueError(f"DeployConfig: --robot mujoco is the SO-101 in MuJoCo; give --sim.embodiment so101 (and nets "
                             f"trained for it), not {self.sim.embodiment!r}")
        if self.hz == 0 and rob not in (*SIM_ROBOTS, "dry-run"):
            raise ValueError(f"DeployConfig: --hz 0 (as fast as possible) is for simulated and dry-run robots; "
                             f"give robot {rob!r} a real rate such as --hz 10")
        if rob == "so101":  # before the nets load: a missing port, id or LeRobot is a one-line refusal
            self.so101.check_ready()
            if not installed("lerobot"):
                raise MissingExtra(f"deploy --robot so101 drives the arm through LeRobot, which is not installed: "
                                   f"{SO101_INSTALL}")
        if self.record is not None:
            rec, out = self.record.resolve(), self.out.resolve()
            if rec == out:
                raise ValueError("DeployConfig: --record must be another folder than --out")
            if out in rec.parents or rec in out.parents:  # one would be swapped into the other at the run's end
                inner, outer = ("--record", "--out") if out in rec.parents else ("--out", "--record")
                raise ValueError(f"DeployConfig: --record {self.record} and --out {self.out} are nested ({inner} "
                                 f"lies inside {outer}), so the run's outputs would be refused at its end; give "
                                 "two folders side by side")

    def _check_renamed_fields(self) -> None:
        """ValueError naming today's field where a caller used a name of before 0.2.0 (:mod:`graspsim.compat`):
        ``run=`` (now ``runtime``) or ``runtime="torch"|"onnx"`` (now ``inference``)."""
        renamed = compat.RENAMED_FIELDS["DeployConfig"]
        if self.run is not None:
            raise ValueError(f"DeployConfig.run is now DeployConfig.{renamed['run'].new} (a RuntimeConfig, as in every "
                             f"verb); give {renamed['run'].new}=")
        if isinstance(self.runtime, str):
            raise ValueError(f"DeployConfig.runtime is now the RuntimeConfig (device, threads, progress); the "
                             f"torch|onnx choice is DeployConfig.{renamed['runtime'].new}: give "
                             f"{renamed['runtime'].new}={self.runtime!r}")

    def _group_legacy_runtime(self) -> None:
        """Move top-level ``threads``/``progress`` (the settings' place before ``runtime``) into ``runtime``."""
        runtime = self.runtime if isinstance(self.runtime, RuntimeConfig) else RuntimeConfig(**dict(self.runtime))
        old = {k: getattr(self, k) for k in LEGACY_RUNTIME_KEYS if getattr(self, k) is not None}
        if old:
            runtime = dataclasses.replace(runtime, **old)
        object.__setattr__(self, "runtime", runtime)
        for k in LEGACY_RUNTIME_KEYS:
            object.__setattr__(self, k, None)

    def _check_runtime(self) -> None:
        if self.inference not in ("torch", "onnx"):
            raise ValueError(f"DeployConfig.inference must be 'torch' or 'onnx'; got {self.inference!r}")
        if self.onnx is not None and self.inference != "onnx":
            raise ValueError("DeployConfig: --onnx DIR needs --inference onnx")
        if self.inference == "onnx":
            if self.runtime.device != "cpu":
                raise ValueError(f"DeployConfig: --inference onnx runs on the CPU; got --device {self.runtime.device}")
            require("onnxruntime", "deploy", "deploy --inference onnx")
            if self.onnx is None:  # the checkpoints are exported first
                require("onnx", "deploy", "deploy --inference onnx (without --onnx DIR, which exports the checkpoints)")
        if self.precision not in ("auto", "fp32"):
            raise ValueError(f"DeployConfig.precision must be 'auto' or 'fp32'; got {self.precision!r}")

    @property
    def period(self) -> float:
        """Seconds per tick (0 at --hz 0)."""
        return 1.0 / self.hz if self.hz > 0 else 0.0

    @property
    def capture_deadlines(self) -> tuple[float, float]:
        """The capture watchdog's (stop, give-up) deadlines in s after a tick's camera read starts
        (:func:`graspsim.robot.loop.capture_deadlines`)."""
        return capture_deadlines(self.period, self.frame_timeout)

    @property
    def max_ticks(self) -> int:
        return max(1, int(round(self.time_limit * (self.hz if self.hz > 0 else self.sim.control_hz))))

    def to_dict(self) -> dict:
        d = json.loads(json.dumps(dataclasses.asdict(self), default=str))
        for k in (*LEGACY_RUNTIME_KEYS, "run"):  # always None after construction: their values are in "runtime"
            d.pop(k, None)
        return d


# ------------------------------------------------------------------------------------------ the run
def build_controller(cfg: DeployConfig, out: Path) -> Controller:
    """The controller ``cfg`` asks for: torch on the checkpoints, or onnxruntime on ``cfg.onnx`` (refused unless its
    contract names ``cfg.vision`` and ``cfg.policy`` by their sha256; default: the checkpoints exported into
    ``out/onnx`` first)."""
    if cfg.inference == "torch":
        return Controller.from_checkpoints(cfg.vision, cfg.policy, precision=cfg.precision, device=cfg.runtime.device,
                                           safety=cfg.safety, fingertip=cfg.fingertip, frame_crop=frame_crop(cfg))
    folder = cfg.onnx
    if folder is None:
        from .export import ExportConfig, export

        folder = out / ONNX_DIR
        export(ExportConfig(vision=cfg.vision, policy=cfg.policy, out=folder, overwrite=True, check=False))
    else:
        from .onnx_contract import check_sources, read_contract

        check_sources(folder, read_contract(folder), cfg.vision, cfg.policy)
    return Controller.from_export(folder, threads=cfg.runtime.threads, safety=cfg.safety, fingertip=cfg.fingertip,
                                  frame_crop=frame_crop(cfg))


def deploy(cfg: DeployConfig, *, camera: Camera | None = None, robot: Robot | None = None,
           controller: Controller | None = None) -> dict:
    """Run ``cfg.episodes`` episodes and write the outputs; returns the summary (also ``OUT/summary.json``).

    ``camera``, ``robot`` and ``controller`` replace the ones ``cfg`` names (for tests and for callers that build
    their own; those are not closed here).

    Order at the end of a run, whatever ended it: ``stop()``; ``summary.json`` and ``ticks.csv`` written and swapped
    into OUT (and the recording into its folder); only then the camera and the robot closed, each ``close()`` given
    :data:`graspsim.robot.cameras.CLOSE_TIMEOUT` s. Under the command (:func:`graspsim.interrupts.install`) stop
    signals arriving from the first ``stop()`` until the outputs are in place are held (with a warning) and do not
    cut that short."""
    single_process("deploy", ONE_PROCESS)  # also for library callers, whose config may predate the environment
    if cfg.runtime.threads:
        torch.set_num_threads(cfg.runtime.threads)
    out = check_out_dir(cfg.out, overwrite=cfg.overwrite)  # writability included: before any command is sent
    recording = None
    if cfg.record is not None:  # checked now (nothing written until the run starts)
        from graspsim.vision.image_set import ImageSetWriter

        recording = ImageSetWriter(cfg.record, overwrite=cfg.overwrite, masks=cfg.camera.strip() in SIM_CAMERAS,
                                   meta_file=TICKS_CSV, meta_key=None, flag="--record")
    parts = _Parts(own_camera=camera is None, own_robot=robot is None, camera=camera, robot=robot)
    # the outputs (and an onnx export) go to a staging folder that replaces OUT's earlier outputs when the run ends;
    # an error before the run (a camera that does not open) leaves OUT as it was
    with contextlib.ExitStack() as closing:
        closing.callback(parts.close, cfg)  # after the outputs are in place: a close() that hangs cannot lose them
        with contextlib.ExitStack() as ending:  # the shield from the run's end until the outputs are in place
            with staged_dir(out, OUTPUTS.__contains__) as stage:
                summary, error = _open_and_run(cfg, stage, parts, controller, recording, ending)
    if error is not None:
        raise error
    interrupts.check()  # a stop signal held while the outputs were written: the run ends as interrupted
    return summary


class _Parts:
    """The camera, the robot and the simulated world of a run, and which of them the run opened (and closes)."""

    def __init__(self, *, own_camera: bool, own_robot: bool, camera=None, robot=None):
        self.own_camera, self.own_robot = own_camera, own_robot
        self.camera, self.robot = camera, robot
        self.world = None
        self.reader: CameraReader | None = None

    def close(self, cfg: DeployConfig) -> None:
        """Close what the run opened: the camera once no read is running in it (a read cut short by a signal is
        given a second, a hung one a tenth; a camera still blocked then is left open, and the world it renders),
        then the robot; each ``close()`` within :data:`graspsim.robot.cameras.CLOSE_TIMEOUT` s (one still running
        then is abandoned, named in a warning). Shielded from stop signals: the robot's close() is always reached."""
        from .cameras import CLOSE_TIMEOUT

        with interrupts.shielded("the camera and the robot were being closed"):
            reader = self.reader
            free = True
            if reader is not None:
                wait = 0.1 if reader.hung else (1.0 if reader.in_flight else cfg.capture_deadlines[1])
                free = close_camera(None, reader, wait)
            if self.own_camera and self.camera is not None and free:  # else close_camera warned: left open
                close_camera(self.camera, None)
            if self.own_robot and callable(getattr(self.robot, "close", None)):
                close_within(self.robot.close, CLOSE_TIMEOUT, adapter_name(self.robot, "close"))
            if self.world is not None and free:  # closing twice is harmless
                close_within(self.world.close, CLOSE_TIMEOUT, f"the simulated world ({self.world.backend})")


def _open_and_run(cfg: DeployConfig, stage: Path, parts: _Parts, controller, recording,
                  ending: contextlib.ExitStack) -> tuple[dict, BaseException | None]:
    """Build the controller, open the robot and the camera (those not given), run. ``ending`` receives the shield
    that holds stop signals from the run's end until the caller has put the outputs in place."""
    ctl = controller
    if ctl is None:
        ctl = build_controller(cfg, stage)  # checkpoints first: a wrong kind is an error before any hardware moves
    check_net_kinds(cfg)
    cam_name, rob_name = str(cfg.camera).strip(), str(cfg.robot).strip()
    if parts.own_robot and rob_name in SIM_ROBOTS:
        check_world_kinds(cfg.sim, ctl, cfg)
        parts.world = SimWorld(rob_name, cfg.sim)
    if parts.own_robot and controller is None and rob_name == "so101":
        check_embodiment("so101", cfg.policy, cfg.vision)  # before the arm is connected
    if parts.own_robot and controller is None and ":" in rob_name:  # a user's adapter class that names its arm
        declared = getattr(load_class(rob_name, "robot"), "embodiment", None)
        if isinstance(declared, str):  # checked on the class: its constructor may already connect the arm
            check_embodiment(declared, cfg.policy, cfg.vision, f"robot {rob_name}")
    if parts.own_robot:
        parts.robot = open_robot(rob_name, parts.world, ctl.wrist, cfg.period or 1.0 / cfg.sim.control_hz,
                                 so101=cfg.so101, sim=cfg.sim)
    robot = parts.robot
    if controller is None and rob_name != "so101" and isinstance(getattr(robot, "embodiment", None), str):
        check_embodiment(robot.embodiment, cfg.policy, cfg.vision, adapter_name(robot, "send"))
    check_wrist(robot, ctl.wrist)
    if parts.own_camera:
        parts.camera = open_camera(cam_name, parts.world)
    parts.reader = CameraReader(parts.camera)
    # every way the episodes end stops the robot (_run_episodes); a refusal before them (fingertip points) sends nothing
    if recording is None:
        return _run(cfg, stage, parts.camera, robot, ctl, TickLog(wrist=ctl.wrist), parts.reader, ending)
    with recording:  # the recording replaces an earlier one as a whole (--overwrite), also when the run ends early
        return _run(cfg, stage, parts.camera, robot, ctl, TickLog(recording, ctl.wrist), parts.reader, ending)


def frame_crop(cfg: DeployConfig) -> str:
    """``cfg.frame_crop``, with 'auto' resolved from the embodiment the control checkpoint was trained for: 'square'
    when its wrist image is the square crop of a wider sensor (``Embodiment.sensor_aspect`` != 1), else 'stretch'
    (:func:`graspsim.vision.image_set.resolve_frame_crop`, which eval-real and calibrate use too)."""
    if cfg.frame_crop != "auto":
        return cfg.frame_crop
    from graspsim import runs
    from graspsim.dagger.policy import load_checkpoint as load_control
    from graspsim.vision.image_set import resolve_frame_crop

    trained = runs.trained_embodiment(load_control(cfg.policy).get("config"))
    crop = resolve_frame_crop("auto", trained, "DeployConfig")
    log.info("deploy: camera frames are fitted to the nets' input by %s (--frame-crop auto, the %s embodiment)",
             "their centred square" if crop == "square" else "stretching", trained)
    return crop


def check_net_kinds(cfg: DeployConfig) -> None:
    """ValueError unless the vision net was trained on every target kind the control net was trained on (a cube
    net steered by a sphere-only vision net sees no cube), for every robot, real or simulated."""
    from graspsim import runs
    from graspsim.dagger.policy import load_checkpoint as load_control
    from graspsim.vision.checkpoint import load_checkpoint as load_vision

    control = runs.trained_kinds(load_control(cfg.policy).get("config"))
    vision = runs.trained_kinds(load_vision(cfg.vision).get("config"))
    missing = [k for k in control if k not in vision]
    if missing:
        raise ValueError(f"vision checkpoint {cfg.vision} was trained on {','.join(vision)}, but control checkpoint "
                         f"{cfg.policy} on {','.join(control)}: the vision net would not see a "
                         f"{' or '.join(missing)}; give a vision net trained on {','.join(control)} (e.g. "
                         "vision/assets/segnet_kinds.pt)")


def check_embodiment(embodiment: str, policy: Path, vision: Path | None = None, who: str = "--robot so101") -> None:
    """ValueError naming the checkpoint and both embodiments when the control checkpoint ``policy`` (or the vision
    checkpoint ``vision``) was trained for another simulator embodiment than the robot's (``embodiment``: its camera
    mount, gripper and reach differ). Runs from before embodiments existed were trained for ``floating``."""
    from graspsim import runs
    from graspsim.dagger.policy import load_checkpoint as load_control
    from graspsim.vision.checkpoint import load_checkpoint as load_vision

    nets = [("control", policy, load_control)] + ([("vision", vision, load_vision)] if vision is not None else [])
    for kind, path, load in nets:
        trained = runs.trained_embodiment(load(path).get("config"))
        if trained != embodiment:
            raise ValueError(f"{kind} checkpoint {path} was trained for the {trained!r} embodiment; {who} is the "
                             f"{embodiment!r} one: train for it with --sim.embodiment {embodiment}")


def check_world_kinds(sim: SimConfig, ctl: Controller, cfg: DeployConfig) -> None:
    """ValueError unless the simulated world's target kinds (``sim``) suit the control net (the rule of
    :func:`graspsim.dagger.policy.check_fits_scenes`, with the kinds its checkpoint was trained on) and the vision
    net was trained on every kind of the world."""
    from graspsim import runs

    from graspsim.dagger.masks import check_vision_kinds
    from graspsim.dagger.policy import check_fits_scenes, load_checkpoint as load_control

    config = load_control(cfg.policy).get("config")
    check_fits_scenes(ctl, sim, f"policy checkpoint {cfg.policy}", runs.trained_kinds(config),
                      runs.trained_embodiment(config))
    check_vision_kinds(cfg.vision, sim)


def adapter_fingertip(cfg: DeployConfig, ctl: Controller, robot, guard) -> bool:
    """Whether the loop asks ``robot.fingertip()`` at each episode start: the net reads the fingertip senses, no
    --fingertip was given and the adapter has the method. Its points are read and checked once here, before the first
    episode moves the arm (a simulated robot, which knows them only once its scene is built, is checked at each
    episode start). Logs which fingertip points a run uses."""
    if not ctl.reads_fingertip:
        if cfg.fingertip is not None:
            log.warning("deploy: --fingertip is ignored: this policy reads no fingertip senses")
        return False
    if cfg.fingertip is None and callable(getattr(robot, "fingertip", None)):
        read_fingertip(ctl, robot, guard, allow_none=isinstance(robot, SimRobot))
        log.info("deploy: fingertip points from %s at each episode start", adapter_name(robot, "fingertip"))
        return True
    points = " ".join(f"{v:.3f}" for v in ctl.fingertip)
    if cfg.fingertip is None and str(cfg.robot).strip() not in (*SIM_ROBOTS, "dry-run"):
        log.warning("deploy: no --fingertip and %s has no fingertip(): using the nominal mount's points %s; measure "
                    "your camera's if you can to within 0.01 of the frame (docs/deploy.md, 'Measuring the fingertip "
                    "points')", adapter_name(robot, "senses"), points)
    else:
        log.info("deploy: fingertip points %s (%s)", points, ctl.fingertip_source)
    return False


def check_wrist(robot, wrist: bool) -> None:
    """ValueError naming the adapter when the control net turns the wrist and the adapter has none (``wrist`` not
    True): it could not turn the fingers to a cube's faces."""
    if wrist and getattr(robot, "wrist", False) is not True:
        raise ValueError(f"{adapter_name(robot, 'send')} has no wrist (its attribute wrist is not True) but the control "
                         "net turns the wrist (trained on cubes or cylinders); give an adapter with wrist = True whose "
                         "send() takes (vx, vy, vz, wz, grip) and whose senses() add sin and cos of the wrist angle "
                         "(docs/deploy.md)")


def _run(cfg: DeployConfig, out: Path, camera, robot, ctl: Controller, tick_log: TickLog,
         reader: CameraReader, ending: contextlib.ExitStack) -> tuple[dict, BaseException | None]:
    """Run the episodes; returns the summary (written to ``out``) and the error or Ctrl-C that ended the run early,
    for the caller to raise once the outputs and the recording are in place. From the run's end on, stop signals
    are held (``ending``, released by the caller once the outputs are in place)."""
    guard = guarded(robot, camera)
    env = RobotEnv(robot, cfg.max_ticks, guard, cfg.sim)
    hooks = TickHooks(camera, robot, ctl, env, guard, tick_log, period=cfg.period,
                      fallback_period=1.0 / cfg.sim.control_hz, frame_timeout=cfg.frame_timeout, warmup=cfg.warmup,
                      progress=cfg.runtime.progress, reader=reader,
                      adapter_fingertip=adapter_fingertip(cfg, ctl, robot, guard))
    seeds = episode_seeds(cfg.seed, "test", 0, cfg.episodes)
    t0 = time.perf_counter()
    interrupts.drain_held()
    try:
        ended, error = _run_episodes(env, seeds, hooks, robot)
    finally:
        ending.enter_context(interrupts.shielded("the run's summary was being written"))
        tick_log.close()
    seconds = time.perf_counter() - t0
    for ep, seed in zip(hooks.episodes, seeds):
        ep["seed"] = seed
    summary = _summary(cfg, hooks, ctl, camera, robot, seconds, ended, error)
    if hooks.stale_ticks and hooks.stale_ticks == summary["ticks"] and error is None:
        log.warning("deploy: every tick's frame was stale (older than %g control periods): the robot was never "
                    "driven by the nets; check the camera's frame rate and its frame times", STALE_PERIODS)
    atomic_write_text(out / TICKS_CSV, tick_log.text())
    atomic_write_text(out / SUMMARY_JSON, json.dumps(summary, indent=2))
    if error is not None:
        return summary, error
    sr = summary["success_rate"]
    log.info("deploy: %d episodes, success %s, %.1f Hz achieved (target %s), decision p99 %.1f ms, %d overruns",
             summary["episodes"], "n/a" if sr is None else f"{100 * sr:.1f}%", summary["achieved_hz"] or 0.0,
             cfg.hz or "max", summary["latency_ms"]["decision"]["p99"] or 0.0, summary["overruns"])
    return summary, None


def _run_episodes(env: RobotEnv, seeds: list[int], hooks: TickHooks, robot) -> tuple[str, BaseException | None]:
    """The episodes through the rollout driver; returns how the run ended early ("" = it did not: camera_ended,
    interrupted, error) and the error to raise once the outputs are written. Every early end stops the robot first.
    An episode that ends early counts the ticks whose command went out and was logged (``hooks.tick``: its
    ``ticks.csv`` rows), not the driver's steps, which a signal could interrupt between the two."""
    try:
        run_episodes(env, seeds, hooks)
    except EndOfStream as e:
        note = stop_first(robot)
        hooks.close_episode("camera_ended", False, hooks.tick)
        if not hooks.stats.times["tick"]:  # not a single tick: the run did nothing, which is no success
            return "error", DeployError(f"{hooks.reader.who} gave no frame: its source ended before the first tick "
                                        f"({e}); {note}")
        log.info("%s; %s", e, note)
        return "camera_ended", None
    except KeyboardInterrupt as e:  # Ctrl-C, or any stop signal under the graspsim command (graspsim.interrupts)
        note = stop_first(robot)  # shielded: a second signal does not cut it short
        signum = interrupts.taken()
        log.warning("interrupted%s: %s", f" ({interrupts.signal_name(signum)})" if signum else "", note)
        hooks.close_episode("interrupted", False, hooks.tick)
        hooks.signal = interrupts.signal_name(signum) if signum else "SIGINT"
        return "interrupted", e
    except DeployError as e:
        note = stop_first(robot)
        hooks.close_episode("error", False, hooks.tick)
        return "error", DeployError(f"{e}; {note}")
    except (ValueError, OSError) as e:  # e.g. a controller's refusal: reported like an adapter fault
        note = stop_first(robot)
        hooks.close_episode("error", False, hooks.tick)
        return "error", DeployError(f"{e}; {note}")
    except Exception as e:  # our own bug: stop the arm first, keep the summary, then let it surface (traceback)
        log.error("%s: %s; %s", type(e).__name__, e, stop_first(robot))
        hooks.close_episode("error", False, hooks.tick)
        return "error", e
    except BaseException:
        stop_first(robot)
        raise
    return "", None


def _summary(cfg: DeployConfig, hooks: TickHooks, ctl: Controller, camera, robot, seconds: float,
             ended: str, error: BaseException | None = None) -> dict:
    """``summary.json``: outcomes (success rate with its 95% Wilson interval where the robot can tell), rate,
    latencies (ms) per stage, stops, and what ran (see the module docstring)."""
    eps = hooks.episodes
    known = [e for e in eps if e["success"] is not None]
    k = sum(bool(e["success"]) for e in known)
    rate = k / len(known) if known else None
    iv = np.asarray(hooks.pacer.intervals)
    return {
        "episodes": len(eps),
        "success_rate": rate,
        "num_success": k if known else None,
        "success_ci95": list(wilson(k, len(known))) if known else None,
        "achieved_hz": float(1.0 / iv.mean()) if iv.size else None,
        "target_hz": cfg.hz,
        "overruns": hooks.stats.overruns,
        "capture_stalls": hooks.stats.stalls,
        "capture_deadlines_s": [hooks.stall_after, hooks.give_up_after],
        "ticks": sum(e["ticks"] for e in eps),
        "latency_ms": {s: latency_stats(v) for s, v in hooks.stats.times.items()},
        "stops": dict(hooks.stats.stops),
        "ended": ended or "completed",
        "signal": getattr(hooks, "signal", None),
        "signals_while_stopping": [interrupts.signal_name(s) for s in interrupts.drain_held()],
        "error": None if error is None or isinstance(error, KeyboardInterrupt) else f"{error}",
        "per_episode": eps,
        "inference": ctl.runtime,
        "vision_precision": getattr(ctl.nets, "precision", None),
        "mirror_tta": getattr(ctl.nets, "mirror_tta", None),
        "frame_crop": getattr(ctl, "frame_crop", None),
        "fingertip": None if ctl.fingertip is None else {
            "points": None if hooks.adapter_fingertip else list(ctl.fingertip),  # else in per_episode
            "source": ctl.fingertip_source},
        "camera": getattr(camera, "name", str(cfg.camera)),
        "robot": getattr(robot, "name", str(cfg.robot)),
        "seconds": seconds,
        "torch_threads": torch.get_num_threads(),
        "load_average": list(os.getloadavg()),
        "config": cfg.to_dict(),
    }


__all__ = ["CSV_FIELDS", "DeployConfig", "DeployError", "OUTPUTS", "RECORD_OUTPUTS", "STAGES", "STALE_PERIODS",
           "build_controller",
           "deploy", "workspace_guard"]
