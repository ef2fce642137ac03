"""The ONNX contract: the one module that writes and reads a ``graspsim export`` folder's ``contract.json``.

An export folder holds::

    vision.onnx     rgb B,3,S,S uint8            -> logits B,S,S float32
    control.onnx    mask B,S,S float32 (0/1), gripper B,3 float32 -> raw B,4 float32 (B,5 -> B,5 with the wrist;
                    B,9 -> B,5 with the wrist and the fingertip senses)
    contract.json   kind, format_version, opset, the sources' sha256, the two graphs' inputs and outputs, the
                    constants that turn outputs into decisions (image_size S, threshold, peak_threshold,
                    mirror_tta, max_speed; with the wrist max_yaw_rate), the action layout (action_names) and,
                    after the parity check, ``parity``

Writers call :func:`build_contract` and :func:`write_contract`, which records the sha256 of both graphs
(``graphs``) and then of the contract itself (``contract_sha256``, over its canonical JSON without that key).
Readers call :func:`read_contract`, which checks, before anything runs: the kind and format version; that the
contract is the one written (its checksum: a hand-edited ``max_speed`` or threshold is refused); the keys readers use
(:data:`REQUIRED_KEYS`); every constant within its range (:data:`RANGES`: a ``max_speed`` of 5 m/s or -0.1, a
threshold of 0 or 2 are refused even in a contract whose checksum was recomputed); the gripper width against the
wrist and fingertip entries; and that both graphs are present, not empty and the ones exported with it (a
``vision.onnx`` copied from another export is refused). :func:`check_sources` compares the checkpoints a contract was
exported from with the ones a caller names. The checkpoints themselves are loaded beside the controller
(:func:`graspsim.robot.controller.load_nets`); this module only writes and reads the contract.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

from graspsim.config import gripper_width
from graspsim.fileio import atomic_write_text

CONTRACT_FILE = "contract.json"
"""Name of the JSON beside the ONNX graphs (their inputs, outputs, constants)."""
VISION_ONNX = "vision.onnx"
CONTROL_ONNX = "control.onnx"
CONTRACT_KIND = "graspsim-onnx-contract"
CONTRACT_VERSION = 2
"""Format version written for a vision net without the one-region rule (1: before the checksums; export again)."""
ONE_REGION_VERSION = 3
"""Format version written when the vision net's mask rule includes the one-region rule (``vision.one_region``): a
graspsim that reads only version 2 would ignore that key and make other masks than the export's, so it refuses these
contracts instead. Version 2 contracts stay readable by it."""
READ_VERSIONS = (CONTRACT_VERSION, ONE_REGION_VERSION)
"""Format versions :func:`read_contract` reads."""
HASH_KEY = "contract_sha256"
"""Key of the contract's own checksum (sha256 of its canonical JSON without this key)."""
GRAPHS_KEY = "graphs"
"""Key of the graphs' checksums: ``{"vision": {"file": "vision.onnx", "sha256": ...}, "control": {...}}``."""
_GRAPHS = {"vision": VISION_ONNX, "control": CONTROL_ONNX}
MAX_SPEED = 1.0
"""Largest ``control.max_speed`` a contract may carry (m/s): the simulator's arms are trained at 0.1 m/s; an arm's
own limit is about 1 m/s."""
MAX_YAW_RATE = 2 * math.pi
"""Largest ``control.max_yaw_rate`` (rad/s): a turn a second."""
FINGERTIP_RANGE = (-1.0, 2.0)
"""Allowed fractions of the frame for the fingertip points (0..1 is inside it). A point may project outside the view:
the SO-101's camera sees its pad centre near the bottom edge, so its trained range reaches 1.16 down the frame."""
RANGES = {
    "vision.image_size": ("an int from 16 to 1024 (px)", lambda v: _is_int(v) and 16 <= v <= 1024),
    "vision.threshold": ("a probability strictly between 0 and 1", lambda v: _is_num(v) and 0.0 < v < 1.0),
    "vision.peak_threshold": ("a probability from 0 (no frame gate) to below 1", lambda v: _is_num(v) and 0.0 <= v < 1.0),
    "vision.mirror_tta": ("true or false", lambda v: isinstance(v, bool)),
    "control.max_speed": (f"a speed above 0 and at most {MAX_SPEED:g} m/s",
                          lambda v: _is_num(v) and 0.0 < v <= MAX_SPEED),
}
"""Each constant a reader turns into commands: what it must be, and the test."""
OUTPUTS = (VISION_ONNX, CONTROL_ONNX, CONTRACT_FILE)
"""Everything an export writes into its folder (and replaces as a whole with --overwrite)."""
REQUIRED_KEYS = ("sources.vision.sha256", "sources.policy.sha256", "vision.image_size", "vision.threshold",
                 "vision.peak_threshold", "vision.mirror_tta", "control.max_speed", "control.inputs",
                 f"{GRAPHS_KEY}.vision.sha256", f"{GRAPHS_KEY}.control.sha256")
"""Dotted keys of a contract that readers use; :func:`read_contract` refuses a contract without one of them."""


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a file (the contract's record of its source checkpoints)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ------------------------------------------------------------------------------------------ writing
def build_contract(*, opset: int, vision_path: str | os.PathLike, policy_path: str | os.PathLike,
                   policy_iteration: int, image_size: int, threshold: float, peak_threshold: float, mirror_tta: bool,
                   max_speed: float, one_region: bool = False, max_yaw_rate: float | None = None,
                   fingertip: dict | None = None) -> dict:
    """The contract of one export (format version :data:`CONTRACT_VERSION`; :data:`ONE_REGION_VERSION` with
    ``one_region``). ``image_size`` S in px, ``threshold``/``peak_threshold`` probabilities and ``one_region`` of the
    vision net's mask rule, ``max_speed`` m/s; ``max_yaw_rate``
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
        "format_version": ONE_REGION_VERSION if one_region else CONTRACT_VERSION,
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
            "mirror_tta": bool(mirror_tta), "one_region": bool(one_region),
            "mask_rule": "target = logit >= logit(threshold), in frames whose largest logit >= logit(peak_threshold) "
                         "(peak_threshold 0: no frame gate); with one_region, only the 8-connected region of target "
                         "pixels that holds the frame's largest logit",
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


def contract_digest(contract: dict) -> str:
    """sha256 of ``contract``'s canonical JSON (sorted keys, no spaces) without :data:`HASH_KEY`."""
    body = {k: v for k, v in contract.items() if k != HASH_KEY}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def write_contract(folder: str | os.PathLike, contract: dict) -> None:
    """Write ``contract`` atomically as ``folder/contract.json``, after recording in it (in place) the sha256 of the
    two graphs already in ``folder`` and then its own checksum."""
    folder = Path(folder)
    contract[GRAPHS_KEY] = {role: {"file": name, "sha256": sha256(folder / name)} for role, name in _GRAPHS.items()}
    contract.pop(HASH_KEY, None)
    contract[HASH_KEY] = contract_digest(contract)
    atomic_write_text(folder / CONTRACT_FILE, json.dumps(contract, indent=2))


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
    version = contract.get("format_version")
    if version not in READ_VERSIONS:
        older = " (written before contracts carried checksums)" if version == 1 else ""
        raise ValueError(f"{path}: contract format_version {version!r}{older}; this version reads "
                         f"{' and '.join(map(str, READ_VERSIONS))}; export again with 'graspsim export'")
    missing = [k for k in REQUIRED_KEYS if _lookup(contract, k) is None]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)}; export again with 'graspsim export'")
    if contract.get(HASH_KEY) != contract_digest(contract):
        raise ValueError(f"{path} was changed after it was exported (its {HASH_KEY} does not match its contents); "
                         "its constants turn the nets' outputs into commands, so an edited one is not used: export "
                         "again with 'graspsim export'")
    check_constants(contract, path)
    width = control_gripper_width(contract)
    expected = gripper_width(bool(contract["control"].get("wrist")), "fingertip" in contract["control"])
    if width != expected:
        raise ValueError(f"{path}: the control graph's gripper input is {width} wide, but its wrist and fingertip "
                         f"entries say {expected}; export again with 'graspsim export'")
    for role, name in _GRAPHS.items():
        if not (folder / name).is_file():
            raise ValueError(f"{folder}: {name} is missing; export again with 'graspsim export'")
        if (folder / name).stat().st_size == 0:
            raise ValueError(f"{folder / name} is empty; export again with 'graspsim export'")
        if sha256(folder / name) != contract[GRAPHS_KEY][role]["sha256"]:
            raise ValueError(f"{folder / name} is not the graph {path} was exported with (their sha256 differ: a "
                             "graph copied from another export, or changed); export again with 'graspsim export'")
    return contract


def check_constants(contract: dict, path: str | os.PathLike = CONTRACT_FILE) -> None:
    """ValueError naming the key and its value when a constant of ``contract`` is outside :data:`RANGES` (or, for
    a wrist net, ``control.max_yaw_rate`` outside (0, :data:`MAX_YAW_RATE`]; the fingertip points outside
    :data:`FINGERTIP_RANGE` or not low <= nominal <= high)."""
    def bad(key: str, value, what: str) -> ValueError:
        return ValueError(f"{path}: {key} is {value!r}; it must be {what}; export again with 'graspsim export'")

    for key, (what, ok) in RANGES.items():
        value = _lookup(contract, key)
        if not ok(value):
            raise bad(key, value, what)
    if not isinstance(contract["vision"].get("one_region", False), bool):  # absent before the rule: off
        raise bad("vision.one_region", contract["vision"].get("one_region"), "true or false")
    control = contract["control"]
    if not isinstance(control.get("wrist", False), bool):
        raise bad("control.wrist", control.get("wrist"), "true or false")
    if control.get("wrist"):
        v = control.get("max_yaw_rate")
        if not (_is_num(v) and 0.0 < v <= MAX_YAW_RATE):
            raise bad("control.max_yaw_rate", v, f"a rate above 0 and at most {MAX_YAW_RATE:.4g} rad/s")
    tip = control.get("fingertip")
    if tip is not None:
        try:
            lo, mid, hi = ([float(x) for x in tip[k]] for k in ("low", "nominal", "high"))
            ok = all(len(v) == 4 for v in (lo, mid, hi)) and all(
                FINGERTIP_RANGE[0] <= a <= b <= c <= FINGERTIP_RANGE[1] for a, b, c in zip(lo, mid, hi))
        except (TypeError, ValueError, KeyError):
            ok = False
        if not ok:
            raise bad("control.fingertip", tip, "low <= nominal <= high, 4 fractions of the frame each (0..1 inside it; "
                      f"{FINGERTIP_RANGE[0]:g}..{FINGERTIP_RANGE[1]:g} allowed)")


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


__all__ = ["CONTRACT_FILE", "CONTRACT_KIND", "CONTRACT_VERSION", "CONTROL_ONNX", "FINGERTIP_RANGE", "GRAPHS_KEY", "HASH_KEY",
           "MAX_SPEED", "MAX_YAW_RATE", "OUTPUTS", "RANGES", "REQUIRED_KEYS", "VISION_ONNX", "build_contract",
           "check_constants", "check_sources", "contract_digest", "control_gripper_width", "read_contract", "sha256",
           "write_contract"]
