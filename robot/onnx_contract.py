"""The ONNX contract: the one module that writes and reads a ``graspsim export`` folder's ``contract.json``.

An export folder holds::

    vision.onnx     rgb B,3,S,S uint8            -> logits B,S,S float32
    control.onnx    mask B,S,S float32 (0/1), gripper B,3 float32 -> raw B,4 float32 (B,5 -> B,5 with the wrist;
                    B,9 -> B,5 with the wrist and the fingertip senses)
    contract.json   kind, format_version, opset, the sources' sha256, the two graphs' inputs and outputs, the
                    constants that turn outputs into decisions (image_size S, threshold, peak_threshold,
                    mirror_tta, max_speed; with the wrist max_yaw_rate), the action layout (action_names) and,
                    after the parity check, ``parity``

Writers call :func:`build_contract` and :func:`write_contract`; readers call :func:`read_contract`, which checks the
kind, the format version, the keys readers use (:data:`REQUIRED_KEYS`) and that both graphs are present (and not
empty); :func:`check_sources` compares the checkpoints a contract was exported from with the ones a caller names.
:func:`load_nets` loads the two checkpoints behind a contract and checks that they work at one image size (the
contract has one ``S``); the export and the torch runtime of :mod:`graspsim.robot.controller` both load through it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from graspsim.config import gripper_width
from graspsim.fileio import atomic_write_text

CONTRACT_FILE = "contract.json"
"""Name of the JSON beside the ONNX graphs (their inputs, outputs, constants)."""
VISION_ONNX = "vision.onnx"
CONTROL_ONNX = "control.onnx"
CONTRACT_KIND = "graspsim-onnx-contract"
CONTRACT_VERSION = 1
"""Format version written, and the only one read."""
OUTPUTS = (VISION_ONNX, CONTROL_ONNX, CONTRACT_FILE)
"""Everything an export writes into its folder (and replaces as a whole with --overwrite)."""
REQUIRED_KEYS = ("sources.vision.sha256", "sources.policy.sha256", "vision.image_size", "vision.threshold",
                 "vision.peak_threshold", "vision.mirror_tta", "control.max_speed", "control.inputs")
"""Dotted keys of a contract that readers use; :func:`read_contract` refuses a contract without one of them."""


# ------------------------------------------------------------------------------------------ the checkpoints behind it
def check_image_sizes(vision_size: int, control_size: int) -> None:
    """ValueError unless the vision net (``vision_size`` px) and the control net (``control_size`` px) work at one
    image size, as a contract (and the controller) needs."""
    if int(control_size) != int(vision_size):
        raise ValueError(f"the vision net works at {vision_size} px but the control net at "
                         f"{control_size} px; use checkpoints trained at one image size")


def load_nets(vision: str | os.PathLike, policy: str | os.PathLike, precision: str = "fp32", device: str = "cpu"):
    """``(Segmenter, MaskPolicy)`` from the two checkpoints (kinds checked by their loaders, image sizes by
    :func:`check_image_sizes`). ``precision``: the Segmenter's (``fp32`` for export, ``auto`` for deploy)."""
    from graspsim.vision.infer import Segmenter

    from graspsim.dagger.policy import MaskPolicy

    seg = Segmenter.from_checkpoint(vision, device=device, precision=precision)
    pol = MaskPolicy.from_checkpoint(policy, device=device)
    check_image_sizes(seg.image_size, pol.cfg.image_size)
    return seg, pol


def sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a file (the contract's record of its source checkpoints)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ------------------------------------------------------------------------------------------ writing
def build_contract(*, opset: int, vision_path: str | os.PathLike, policy_path: str | os.PathLike,
                   policy_iteration: int, image_size: int, threshold: float, peak_threshold: float, mirror_tta: bool,
                   max_speed: float, max_yaw_rate: float | None = None,
                   fingertip: dict | None = None) -> dict:
    """The contract of one export (format version :data:`CONTRACT_VERSION`). ``image_size`` S in px,
    ``threshold``/``peak_threshold`` probabilities of the vision net's mask rule, ``max_speed`` m/s; ``max_yaw_rate``
    rad/s for a control net that turns the wrist (None: a sphere-only net). The control section names the action
    layout (``action_names``): ``vx, vy, vz, grip``, or ``vx, vy, vz, wz, grip`` with the wrist. ``fingertip``
    (:func:`graspsim.env.fingertip_calibration`) for a wrist net that reads the 4 fingertip senses: the gripper input
    is then 9 wide, and the contract keeps the nominal fingertip points and the range the net was trained on."""
    S = int(image_size)
    wrist = max_yaw_rate is not None
    width = gripper_width(wrist, fingertip is not None)
    if wrist:
        senses = ("finger gap / open gap, last close command 0/1, table contact 0/1, sin and cos of the wrist angle")
        if fingertip is not None:
            senses += (", then (2 * f - 1) * 10 for the fractions f = (x0, y0, x1, y1) of the image where the fingertip "
                       "centre and a point 2 cm above it appear (control.fingertip: nominal and trained range)")
        raw = "pre-tanh velocity in the gripper frame (3), pre-tanh wrist yaw rate (1) and grip logit (1)"
        rule = ("velocity (gripper frame) = tanh(raw[:3]) * max_speed, turned into the base frame by the wrist angle "
                "(vx = c*gx - s*gy, vy = s*gx + c*gy with s, c = gripper[3], gripper[4]); wz rad/s = tanh(raw[3]) * "
                "max_yaw_rate; raw[4] > 0 asks to close (graspsim.robot.controller adds hysteresis)")
    else:
        senses = "finger gap / open gap, last close command 0/1, table contact 0/1"
        raw = "pre-tanh velocity (3) and grip logit (1)"
        rule = ("velocity m/s = tanh(raw[:3]) * max_speed (gripper-aligned base frame); raw[3] > 0 asks to close "
                "(graspsim.robot.controller adds hysteresis)")
    extra = {"wrist": True, "max_yaw_rate": float(max_yaw_rate)} if wrist else {"wrist": False}
    if fingertip is not None:
        extra["fingertip"] = {k: [float(v) for v in fingertip[k]] for k in ("nominal", "low", "high")}
    return {
        "kind": CONTRACT_KIND,
        "format_version": CONTRACT_VERSION,
        "opset": opset,
        "sources": {"vision": {"path": str(vision_path), "sha256": sha256(vision_path)},
                    "policy": {"path": str(policy_path), "sha256": sha256(policy_path),
                               "iteration": policy_iteration}},
        "vision": {
            "file": VISION_ONNX,
            "inputs": [{"name": "rgb", "shape": ["batch", 3, S, S], "dtype": "uint8",
                        "meaning": "RGB wrist frames resized to SxS (INTER_AREA when shrinking), channels first"}],
            "outputs": [{"name": "logits", "shape": ["batch", S, S], "dtype": "float32",
                         "meaning": "target logit per pixel"}],
            "image_size": S, "threshold": threshold, "peak_threshold": peak_threshold,
            "mirror_tta": bool(mirror_tta),
            "mask_rule": "target = logit >= logit(threshold), in frames whose largest logit >= logit(peak_threshold) "
                         "(peak_threshold 0: no frame gate)",
        },
        "control": {
            "file": CONTROL_ONNX,
            "inputs": [{"name": "mask", "shape": ["batch", S, S], "dtype": "float32", "meaning": "target mask 0/1"},
                       {"name": "gripper", "shape": ["batch", width], "dtype": "float32",
                        "meaning": senses}],
            "outputs": [{"name": "raw", "shape": ["batch", 5 if wrist else 4], "dtype": "float32", "meaning": raw}],
            "max_speed": float(max_speed),
            **extra,
            "action_names": ["vx", "vy", "vz", "wz", "grip"] if wrist else ["vx", "vy", "vz", "grip"],
            "action_rule": rule,
        },
    }


def write_contract(folder: str | os.PathLike, contract: dict) -> None:
    """Write ``contract`` atomically as ``folder/contract.json``."""
    atomic_write_text(Path(folder) / CONTRACT_FILE, json.dumps(contract, indent=2))


# ------------------------------------------------------------------------------------------ reading
def read_contract(folder: str | os.PathLike) -> dict:
    """The contract of an export folder; ValueError naming what is missing, of the wrong kind or version."""
    folder = Path(folder)
    path = folder / CONTRACT_FILE
    if not path.is_file():
        raise ValueError(f"{folder} is not a 'graspsim export' folder: {CONTRACT_FILE} is missing")
    try:
        contract = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e})") from None
    if not isinstance(contract, dict) or contract.get("kind") != CONTRACT_KIND:
        kind = contract.get("kind") if isinstance(contract, dict) else None
        raise ValueError(f"{path} is not a graspsim ONNX contract (kind {kind!r})")
    if contract.get("format_version") != CONTRACT_VERSION:
        raise ValueError(f"{path}: contract format_version {contract.get('format_version')!r}; this version reads "
                         f"{CONTRACT_VERSION}; export again with 'graspsim export'")
    missing = [k for k in REQUIRED_KEYS if _lookup(contract, k) is None]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)}; export again with 'graspsim export'")
    width = control_gripper_width(contract)
    expected = gripper_width(bool(contract["control"].get("wrist")), "fingertip" in contract["control"])
    if width != expected:
        raise ValueError(f"{path}: the control graph's gripper input is {width} wide, but its wrist and fingertip "
                         f"entries say {expected}; export again with 'graspsim export'")
    for name in (VISION_ONNX, CONTROL_ONNX):
        if not (folder / name).is_file():
            raise ValueError(f"{folder}: {name} is missing; export again with 'graspsim export'")
        if (folder / name).stat().st_size == 0:
            raise ValueError(f"{folder / name} is empty; export again with 'graspsim export'")
    return contract


def control_gripper_width(contract: dict) -> int | None:
    """Width of the control graph's ``gripper`` input as the contract states it (None when it does not)."""
    for inp in contract["control"].get("inputs") or []:
        if isinstance(inp, dict) and inp.get("name") == "gripper":
            shape = inp.get("shape")
            if isinstance(shape, list) and len(shape) == 2 and isinstance(shape[1], int):
                return shape[1]
    return None


def _lookup(d: dict, dotted: str):
    for k in dotted.split("."):
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def check_sources(folder: str | os.PathLike, contract: dict, vision: str | os.PathLike,
                  policy: str | os.PathLike) -> None:
    """ValueError unless the contract of ``folder`` was exported from the checkpoints ``vision`` and ``policy``
    (same sha256): an export of other checkpoints (e.g. before a calibration) carries their threshold and weights.
    The message names both files."""
    path = Path(folder) / CONTRACT_FILE
    for role, flag, given in (("vision", "--vision", vision), ("policy", "--policy", policy)):
        src = contract["sources"][role]
        if src["sha256"] != sha256(given):
            raise ValueError(f"{path} was exported from the {role} checkpoint {src.get('path', '?')}, not from "
                             f"{flag} {given} (their sha256 differ); export {given} again ('graspsim export' or "
                             f"deploy without --onnx) or give {flag} the checkpoint the export came from")


__all__ = ["CONTRACT_FILE", "CONTRACT_KIND", "CONTRACT_VERSION", "CONTROL_ONNX", "OUTPUTS", "REQUIRED_KEYS",
           "VISION_ONNX", "build_contract", "check_image_sizes", "check_sources", "control_gripper_width", "load_nets",
           "read_contract",
           "sha256", "write_contract"]
