"""The deployable controller: one wrist frame and the gripper senses in, one command out.

>>> ctl = Controller.from_checkpoints("vision/assets/segnet.pt", "runs/dg/policy.pt")   # or runtime="onnx"
>>> ctl.reset()                                   # at each episode start
>>> d = ctl.decide(rgb, gripper)                  # rgb H,W,3 uint8 (any size), gripper 3 float32
>>> d.command                                     # 4 float32: (vx, vy, vz) m/s, grip +1 closes / -1 opens

A control net trained on cubes or cylinders turns the wrist (``ctl.wrist``): it reads 5 gripper senses (the 3
above, then the sine and cosine of the wrist angle) and commands 5 numbers, ``(vx, vy, vz, wz, grip)`` with the
wrist yaw rate ``wz`` in rad/s. Such a net trained with ``SimConfig.fingertip_pixels`` (the default) also reads
where the fingertips appear in the frame: constants of the camera mount, given once (``fingertip=``, measured as
docs/deploy.md shows; default the nominal mount) and appended to the robot's 5 senses by :meth:`Controller.decide`.

One decision is: resize the frame to the nets' input size (INTER_AREA when shrinking, as ``eval-real`` does; with
``frame_crop="square"`` its centred square first, for a camera whose training image is a square crop of its sensor),
segment it (the vision net and its stored threshold and frame gate), run the control net on the mask and the
gripper senses, then the safety rules that belong to the controller itself:

* **velocity clip**: each axis within the trained range ``+-max_speed``, and the wrist's yaw rate within
  ``+-max_yaw_rate`` (the net's tanh already keeps them there; a non-finite output becomes zero velocity and yaw
  rate, ``stop="non_finite"``);
* **gripper hysteresis**: an open gripper closes when the grip logit rises above ``grip_close``, a closed one
  opens when it falls below ``grip_open``; in between the gripper keeps its state (no chatter near 0);
* **lost target**: when no target pixel has been seen for ``lost_ticks`` decisions in a row while the gripper
  is open, the velocity is zero (``stop="target_lost"``) until the target is seen again. While the gripper is
  closed the rule is off, because a held target can hide between the fingers.

Rules that need the clock or the arm (stale frame, episode time limit, the workspace box, Ctrl-C) live in
the robot loop (:mod:`graspsim.robot.loop`).

Two runtimes give the same decisions: ``torch`` (:class:`graspsim.vision.infer.Segmenter`, which uses bf16 autocast
where the CPU has native bf16 and the checkpoint's probe frames agree, and :class:`graspsim.dagger.policy.MaskPolicy`)
and ``onnx`` (onnxruntime on the float32 graphs written by ``graspsim export``; their contract:
:mod:`graspsim.robot.onnx_contract`).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from graspsim.config import gripper_width
from graspsim.env import fingertip_senses
from graspsim.extras import require
from graspsim.validate import non_negative_int
from graspsim.vision.image_set import FRAME_CROPS, square_crop

from .onnx_contract import CONTRACT_FILE, CONTROL_ONNX, VISION_ONNX, control_gripper_width, read_contract

STOP_REASONS = ("", "non_finite", "target_lost", "stale_frame", "time_limit", "workspace", "shutdown")
"""Why a tick's velocity was forced (``""`` = not forced); the controller sets the first three, the loop the rest."""


@dataclass(frozen=True)
class SafetyConfig:
    """The controller's own safety rules (see the module docstring)."""

    grip_close: float = 0.5
    """An open gripper closes when the grip logit exceeds this."""
    grip_open: float = -0.5
    """A closed gripper opens when the grip logit falls below this (must be <= grip_close)."""
    lost_ticks: int = 10
    """Zero velocity after this many decisions in a row without a target pixel while the gripper is open (0 = off)."""

    def __post_init__(self) -> None:
        for name in ("grip_close", "grip_open"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"SafetyConfig.{name} must be a finite number; got {v!r}")
        if self.grip_open > self.grip_close:
            raise ValueError(f"SafetyConfig: grip_open ({self.grip_open}) must be <= grip_close ({self.grip_close})")
        non_negative_int("SafetyConfig", "lost_ticks", self.lost_ticks)


@dataclass
class Decision:
    """One tick's decision (numpy, batch 1 squeezed)."""

    command: np.ndarray
    """4 float32: (vx, vy, vz) m/s after the safety rules, grip +1 (close) or -1 (open); with the wrist 5, the yaw
    rate wz (rad/s) before the grip."""
    action: np.ndarray
    """4 (5 with the wrist) float32: the control net's action before the rules ((vx, vy, vz) m/s, [wz rad/s,] grip
    logit)."""
    mask: np.ndarray
    """S,S bool: the predicted target mask at the nets' input size."""
    visible: bool
    stop: str = ""
    times_ms: dict = field(default_factory=dict)
    """``vision`` and ``control`` wall times of this decision (ms)."""


def resize_frame(rgb: np.ndarray, size: int) -> np.ndarray:
    """``rgb`` H,W,3 uint8 -> size,size,3 uint8 (INTER_AREA when shrinking, else bilinear; non-square frames are
    stretched, as ``eval-real --frame-crop stretch`` does)."""
    if not isinstance(rgb, np.ndarray) or rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        desc = f"{rgb.dtype} {rgb.shape}" if isinstance(rgb, np.ndarray) else type(rgb).__name__
        raise ValueError(f"controller: a frame must be an H,W,3 uint8 RGB array; got {desc}")
    if rgb.shape[:2] == (size, size):
        return rgb
    import cv2

    interp = cv2.INTER_AREA if max(rgb.shape[:2]) > size else cv2.INTER_LINEAR
    return cv2.resize(rgb, (size, size), interpolation=interp)


def mask_from_logits(logits: np.ndarray, threshold: float, peak_threshold: float, one_region: bool = False) -> np.ndarray:
    """B,H,W float logits -> B,H,W bool, the rule of :meth:`graspsim.vision.infer.Segmenter.predict_mask`
    (:func:`graspsim.vision.metrics.logit_mask`): prob >= threshold in frames whose highest prob reaches
    ``peak_threshold`` (0 = no frame gate); with ``one_region`` only the region of those pixels around the frame's
    largest logit."""
    from graspsim.vision.metrics import logit_mask

    return logit_mask(torch.from_numpy(np.ascontiguousarray(logits)), threshold, peak_threshold, one_region).numpy()


def action_from_raw(raw: np.ndarray, max_speed: float, gripper: np.ndarray | None = None,
                    max_yaw_rate: float | None = None) -> np.ndarray:
    """Control-net raw outputs B,4 -> action B,4 float32 (:func:`graspsim.dagger.model.to_action` in numpy). With the
    wrist (``max_yaw_rate`` given): raw B,5 and the senses ``gripper`` B,5 -> (vx, vy, vz) in the world frame,
    wz rad/s, grip logit."""
    out = raw.astype(np.float32).copy()
    vel = np.tanh(out[:, :3]) * np.float32(max_speed)
    if max_yaw_rate is None:
        out[:, :3] = vel
        return out
    s, c = gripper[:, 3].astype(np.float32), gripper[:, 4].astype(np.float32)
    out[:, 0] = c * vel[:, 0] - s * vel[:, 1]
    out[:, 1] = s * vel[:, 0] + c * vel[:, 1]
    out[:, 2] = vel[:, 2]
    out[:, 3] = np.tanh(out[:, 3]) * np.float32(max_yaw_rate)
    return out


# ------------------------------------------------------------------------------------------ the checkpoints
def check_image_sizes(vision_size: int, control_size: int) -> None:
    """ValueError unless the vision net (``vision_size`` px) and the control net (``control_size`` px) work at one
    image size, as the controller (and an export's contract) needs."""
    if int(control_size) != int(vision_size):
        raise ValueError(f"the vision net works at {vision_size} px but the control net at "
                         f"{control_size} px; use checkpoints trained at one image size")


def load_nets(vision: str | os.PathLike, policy: str | os.PathLike, precision: str = "fp32", device: str = "cpu"):
    """``(Segmenter, MaskPolicy)`` from the two checkpoints (kinds checked by their loaders, image sizes by
    :func:`check_image_sizes`). ``precision``: the Segmenter's (``fp32`` for export, ``auto`` for deploy). The torch
    runtime (:class:`TorchNets`) and ``graspsim export`` both load through it."""
    from graspsim.vision.infer import Segmenter

    from graspsim.dagger.policy import MaskPolicy

    seg = Segmenter.from_checkpoint(vision, device=device, precision=precision)
    pol = MaskPolicy.from_checkpoint(policy, device=device)
    check_image_sizes(seg.image_size, pol.cfg.image_size)
    return seg, pol


# ------------------------------------------------------------------------------------------ the two runtimes
class TorchNets:
    """Vision + control in torch: ``mask(rgb 1,3,S,S uint8) -> 1,S,S bool``, ``action(mask, gripper 1,3) -> 1,4``."""

    runtime = "torch"

    def __init__(self, vision: str | os.PathLike, policy: str | os.PathLike, precision: str = "auto",
                 device: str = "cpu"):
        self.seg, self.policy = load_nets(vision, policy, precision=precision, device=device)
        self.image_size = self.seg.image_size
        self.max_speed = float(self.policy.cfg.max_speed)
        self.wrist = bool(self.policy.cfg.wrist)
        self.max_yaw_rate = float(self.policy.cfg.max_yaw_rate)
        self.gripper_dim = int(self.policy.cfg.gripper_dim)
        self.fingertip = self.policy.fingertip
        self.precision = "bf16" if self.seg.bf16 else "fp32"
        self.mirror_tta = bool(self.seg.mirror_tta)

    def mask(self, rgb: np.ndarray) -> np.ndarray:
        return self.seg.predict_mask(torch.from_numpy(rgb)).numpy()

    def action(self, mask: np.ndarray, gripper: np.ndarray) -> np.ndarray:
        return self.policy.act(torch.from_numpy(mask), torch.from_numpy(gripper)).cpu().numpy()


def _session(ort, path: Path, opts, providers):
    """An onnxruntime session of the graph ``path``; ValueError naming the file when onnxruntime cannot load it
    (truncated, damaged, not ONNX)."""
    try:
        return ort.InferenceSession(str(path), opts, providers=providers)
    except Exception as e:  # onnxruntime's own types (InvalidProtobuf, Fail, ...), whatever the version
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{path}: onnxruntime cannot load this graph ({type(e).__name__}: {reason[:200]}); export "
                         "again with 'graspsim export'") from None


def _check_graph_shapes(folder: Path, contract: dict, vision, control) -> None:
    """ValueError naming the graph when its inputs or outputs disagree with the contract's image size S and gripper
    width (a contract and graphs from different exports), found before the robot is opened or homed."""
    S, width = int(contract["vision"]["image_size"]), control_gripper_width(contract)
    wide = 5 if contract["control"].get("wrist") else 4
    expected = {(VISION_ONNX, "rgb"): [3, S, S], (VISION_ONNX, "logits"): [S, S], (CONTROL_ONNX, "mask"): [S, S],
                (CONTROL_ONNX, "gripper"): [width], (CONTROL_ONNX, "raw"): [wide]}
    for graph, session in ((VISION_ONNX, vision), (CONTROL_ONNX, control)):
        for node in [*session.get_inputs(), *session.get_outputs()]:
            want = expected.get((graph, node.name))
            got = list(node.shape)[1:]
            if want is not None and [g if isinstance(g, int) else None for g in got] != want:
                raise ValueError(f"{folder / graph}: its {node.name!r} is {['batch', *got]} but the contract "
                                 f"({CONTRACT_FILE}) says {['batch', *want]} (image_size {S}); the graphs and the "
                                 "contract come from different exports: export again with 'graspsim export'")


class OnnxNets:
    """Vision + control in onnxruntime from a ``graspsim export`` folder (same interface as :class:`TorchNets`)."""

    runtime = "onnx"

    def __init__(self, folder: str | os.PathLike, threads: int = 0):
        require("onnxruntime", "deploy", "--inference onnx")
        import onnxruntime as ort
        folder = Path(folder)
        self.contract = read_contract(folder)
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = int(threads)
        opts.log_severity_level = 3
        providers = ["CPUExecutionProvider"]
        self.vision = _session(ort, folder / VISION_ONNX, opts, providers)
        self.control = _session(ort, folder / CONTROL_ONNX, opts, providers)
        _check_graph_shapes(folder, self.contract, self.vision, self.control)
        v, c = self.contract["vision"], self.contract["control"]
        self.image_size = int(v["image_size"])
        self.threshold, self.peak_threshold = float(v["threshold"]), float(v["peak_threshold"])
        self.max_speed = float(c["max_speed"])
        self.wrist = bool(c.get("wrist", False))  # contracts from before the wrist drive spheres only
        self.max_yaw_rate = float(c.get("max_yaw_rate", 0.0))
        self.gripper_dim = control_gripper_width(self.contract)  # read_contract checked it against wrist, fingertip
        self.fingertip = c.get("fingertip")  # contracts from before the fingertip senses: none
        self.precision = "fp32"
        self.mirror_tta = bool(v["mirror_tta"])
        self.one_region = bool(v.get("one_region", False))  # contracts from before the rule: off

    def logits(self, rgb: np.ndarray) -> np.ndarray:
        return self.vision.run(None, {"rgb": np.ascontiguousarray(rgb)})[0]

    def raw(self, mask: np.ndarray, gripper: np.ndarray) -> np.ndarray:
        return self.control.run(None, {"mask": mask.astype(np.float32), "gripper": gripper.astype(np.float32)})[0]

    def mask(self, rgb: np.ndarray) -> np.ndarray:
        return mask_from_logits(self.logits(rgb), self.threshold, self.peak_threshold, self.one_region)

    def action(self, mask: np.ndarray, gripper: np.ndarray) -> np.ndarray:
        return action_from_raw(self.raw(mask, gripper), self.max_speed, gripper,
                               self.max_yaw_rate if self.wrist else None)


# ------------------------------------------------------------------------------------------ the controller
class Controller:
    """Frame + gripper senses -> :class:`Decision` (see the module docstring). Holds the per-episode state
    (gripper hysteresis, lost-target count): call :meth:`reset` at every episode start."""

    def __init__(self, nets, safety: SafetyConfig | None = None, clock: Callable[[], float] = time.perf_counter,
                 fingertip: Sequence[float] | None = None, frame_crop: str = "stretch"):
        self.nets = nets
        if frame_crop not in FRAME_CROPS:
            raise ValueError(f"controller: frame_crop must be one of {', '.join(FRAME_CROPS)}; got {frame_crop!r}")
        self.frame_crop = frame_crop
        """How a frame is fitted to the nets' square input (:data:`graspsim.vision.image_set.FRAME_CROPS`)."""
        self.safety = safety or SafetyConfig()
        self.image_size = int(nets.image_size)
        self.max_speed = float(nets.max_speed)
        self.wrist = bool(getattr(nets, "wrist", False))
        """Whether the control net turns the wrist (5 senses in, ``(vx, vy, vz, wz, grip)`` out)."""
        self.max_yaw_rate = float(getattr(nets, "max_yaw_rate", 0.0))
        self.gripper_dim = gripper_width(self.wrist, False)
        """How many gripper senses :meth:`decide` takes: the robot's own 3, or 5 with the wrist."""
        self.calibration = getattr(nets, "fingertip", None)
        """For a net that reads the fingertip senses: ``nominal``, ``low`` and ``high`` fingertip points (fractions,
        :func:`graspsim.env.fingertip_calibration` of its training scenes); None for other nets."""
        self.fingertip: tuple[float, ...] | None = None
        """The fingertip points in use, ``(x0, y0, x1, y1)`` fractions of the frame (:meth:`set_fingertip`)."""
        self.fingertip_source = ""
        self._tip = np.zeros(0, np.float32)
        self._clock = clock
        self.set_fingertip(fingertip, "--fingertip")
        self.reset()

    @classmethod
    def from_checkpoints(cls, vision: str | os.PathLike, policy: str | os.PathLike, *, precision: str = "auto",
                         device: str = "cpu", safety: SafetyConfig | None = None,
                         fingertip: Sequence[float] | None = None, frame_crop: str = "stretch") -> "Controller":
        return cls(TorchNets(vision, policy, precision, device), safety, fingertip=fingertip, frame_crop=frame_crop)

    @classmethod
    def from_export(cls, folder: str | os.PathLike, *, threads: int = 0, safety: SafetyConfig | None = None,
                    fingertip: Sequence[float] | None = None, frame_crop: str = "stretch") -> "Controller":
        return cls(OnnxNets(folder, threads), safety, fingertip=fingertip, frame_crop=frame_crop)

    @property
    def reads_fingertip(self) -> bool:
        """Whether the control net reads the fingertip senses (then :meth:`decide` appends them to the robot's 5)."""
        return self.calibration is not None

    def set_fingertip(self, fractions: Sequence[float] | None, source: str) -> None:
        """Use ``fractions`` ``(x0, y0, x1, y1)``: where the fingertip centre and the point 2 cm above it (along the
        fingers) appear in the camera's frame, as fractions of its width and height (x right, y down), measured on
        the robot (docs/deploy.md). None: the nominal mount of the net's training scenes. ``source`` names where the
        values came from, for errors and the summary. ValueError naming ``source`` when they are not 4 finite numbers
        or lie outside the range the net was trained on; for a net without fingertip senses they are not used."""
        if not self.reads_fingertip:
            self.fingertip, self.fingertip_source = None, ""
            return
        cal = self.calibration
        if fractions is None:
            fractions, source = cal["nominal"], "the nominal camera mount of the training scenes"
        try:
            v = np.asarray(fractions, np.float64).reshape(-1)
        except (TypeError, ValueError):
            v = np.zeros(0)
        if v.shape != (4,) or not np.isfinite(v).all():
            raise ValueError(f"{source}: the fingertip points must be 4 finite numbers x0 y0 x1 y1 (fractions of the "
                             f"frame); got {fractions!r}")
        lo, hi = np.asarray(cal["low"]), np.asarray(cal["high"])
        bad = [i for i in range(4) if not lo[i] <= v[i] <= hi[i]]
        if bad:
            names = ("x0", "y0", "x1", "y1")
            got = ", ".join(f"{names[i]} = {v[i]:.3f} (trained {lo[i]:.3f}-{hi[i]:.3f})" for i in bad)
            raise ValueError(f"{source}: fingertip points outside what the policy was trained on: {got}. Measure "
                             "again (docs/deploy.md), or train with your camera's --sim.camera-offset and "
                             "--sim.randomization.fov")
        self.fingertip, self.fingertip_source = tuple(float(x) for x in v), source
        self._tip = fingertip_senses(v).astype(np.float32)

    @property
    def runtime(self) -> str:
        return self.nets.runtime

    def reset(self) -> None:
        """Start an episode: gripper open, target not yet lost."""
        self.closed = False
        self.lost = 0

    def decide(self, rgb: np.ndarray, gripper: np.ndarray) -> Decision:
        """``rgb`` H,W,3 uint8, ``gripper`` 3 float32 (finger gap / open gap, last close command, table contact),
        with the wrist 5 (then the sine and cosine of the wrist angle). A net that reads the fingertip senses gets
        them appended (:meth:`set_fingertip`)."""
        gripper = np.asarray(gripper, np.float32).reshape(-1)
        if gripper.shape != (self.gripper_dim,) or not np.isfinite(gripper).all():
            raise ValueError(f"controller: gripper senses must be {self.gripper_dim} finite numbers"
                             + (" (the 3 senses, then sin and cos of the wrist angle)" if self.wrist else "")
                             + f"; got {gripper.tolist()}")
        if self.frame_crop == "square" and isinstance(rgb, np.ndarray) and rgb.ndim == 3:
            rgb = square_crop(rgb)
        x = resize_frame(rgb, self.image_size)
        t0 = self._clock()
        mask = self.nets.mask(np.ascontiguousarray(x.transpose(2, 0, 1)[None]))  # 1,S,S bool
        t1 = self._clock()
        senses = np.concatenate([gripper, self._tip]) if self._tip.size else gripper
        action = self.nets.action(mask, senses[None])[0].astype(np.float32)
        t2 = self._clock()
        return self._rules(action, mask[0], {"vision": 1e3 * (t1 - t0), "control": 1e3 * (t2 - t1)})

    def _rules(self, action: np.ndarray, mask: np.ndarray, times: dict) -> Decision:
        s = self.safety
        visible = bool(mask.any())
        stop = ""
        vel = action[:3].copy()
        wz = np.float32(action[3]) if self.wrist else None
        grip = float(action[-1])
        if not np.isfinite(action).all():
            vel[:] = 0.0
            wz = np.float32(0.0) if self.wrist else None
            grip = 0.0  # keep the gripper as it is
            stop = "non_finite"
        vel = np.clip(vel, -self.max_speed, self.max_speed)
        if self.wrist:
            wz = np.clip(wz, -self.max_yaw_rate, self.max_yaw_rate)
        if not self.closed and grip > s.grip_close:
            self.closed = True
        elif self.closed and grip < s.grip_open:
            self.closed = False
        self.lost = 0 if (visible or self.closed) else self.lost + 1
        if not stop and s.lost_ticks and self.lost >= s.lost_ticks:
            vel[:] = 0.0
            wz = np.float32(0.0) if self.wrist else None
            stop = "target_lost"
        turn = [wz] if self.wrist else []
        command = np.array([*vel, *turn, 1.0 if self.closed else -1.0], np.float32)
        return Decision(command=command, action=action, mask=mask, visible=visible, stop=stop, times_ms=times)


__all__ = ["Controller", "Decision", "FRAME_CROPS", "OnnxNets", "STOP_REASONS", "SafetyConfig", "TorchNets",
           "action_from_raw", "check_image_sizes", "load_nets", "mask_from_logits", "resize_frame"]
