"""Typed, frozen configuration for the batched grasping simulator.

Every field carries a help line (the attribute docstring below it); ``tyro`` turns these into the
CLI flags of the ``graspsim`` command, so names here are the names users type.

Units: metres, seconds, radians, m/s. Colours are linear RGB in [0, 1].
All validation happens in ``__post_init__`` and raises ``ValueError`` naming the field and value.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Tuple

from .embodiment import Embodiment, get_embodiment
from .fileio import IMAGE_SUFFIXES
from .validate import (  # noqa: F401 (check_device is re-exported: configs elsewhere import it from here)
    check_device, finite_non_negative, finite_positive, int_in, positive_int, probability, value_range,
)

Range = Tuple[float, float]

def table_photo_files(folder: str | os.PathLike) -> tuple[Path, ...]:
    """The photos of ``folder`` (``RandomizationConfig.table_photos``), sorted by name, as listed the first time this
    process asked (the texture bank, the scene draws and the backends' copies all follow that one list). ValueError
    naming the field and the folder when it is missing, not a folder or holds no PNG or JPEG file."""
    return _photo_files(str(folder))


@functools.lru_cache(maxsize=8)
def _photo_files(folder: str) -> tuple[Path, ...]:
    path = Path(folder)
    if not path.is_dir():
        raise ValueError(f"RandomizationConfig.table_photos: {path} is not a folder" if path.exists() else
                         f"RandomizationConfig.table_photos: the folder {path} does not exist")
    files = sorted(f for f in path.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES and f.is_file())
    if not files:
        raise ValueError(f"RandomizationConfig.table_photos: {path} holds no PNG or JPEG photo")
    return tuple(files)

MAX_IMAGE_SIZE = 512
"""Largest wrist image side (px) the renderer draws (``SimConfig.image_size``)."""


@dataclass(frozen=True)
class RandomizationConfig:
    """Per-scene ranges sampled at every reset (uniform unless stated)."""

    # --- target ---
    sphere_diameter: Range = (0.0125, 0.0150)
    """Target sphere diameter (m); the reference experiment used 0.0137."""
    sphere_xy: Range = (-0.10, 0.10)
    """Target x and y on the table (m), each drawn from this range."""
    target_hue: Range = (-0.04, 0.06)
    """Hue band of the target colour (HSV hue, 1.0 = full circle; negative wraps): the target is the
    reddish-orange sphere, as a real target has a known colour. Distractors never take hues within
    ``distractor_hue_margin`` of this band."""
    target_saturation: Range = (0.6, 1.0)
    """Saturation of the target colour."""
    target_value: Range = (0.45, 1.0)
    """Brightness (HSV value) of the target colour."""
    distractor_hue_margin: float = 0.08
    """Hue distance kept between distractor colours and the target hue band."""
    target_speed: Range = (0.0, 0.0)
    """Drift speed of the target over the table (m/s); (0, 0) keeps it still. Direction is uniform."""
    # --- gripper start ---
    start_height: Range = (0.14, 0.22)
    """Initial fingertip height above the table (m)."""
    start_offset: Range = (-0.045, 0.045)
    """Initial x and y offset of the fingertips from the target (m)."""
    # --- distractors ---
    max_distractors: int = 4
    """Upper bound on distractor objects (boxes, cylinders, spheres); the count is uniform in 0..max."""
    distractor_size: Range = (0.008, 0.03)
    """Distractor half-size (m): box half-extent, cylinder or sphere radius."""
    distractor_min_gap: float = 0.03
    """Minimum centre distance (m) in the table plane between a distractor and the target."""
    # --- looks ---
    table_tint: Range = (0.6, 1.3)
    """Per-channel multiplier on the table texture colour."""
    texture_scale: Range = (1.0, 4.0)
    """Texture repeats per metre of table."""
    table_photos: Optional[str] = None
    """Folder of photos (PNG or JPEG) to draw the table from instead of the built-in bank (4 photos and 4 patterns):
    each scene's table is one of them (the centred square, tiled, tinted), in every backend. For checking a trained
    chain on tables like yours or on photos no training saw. The folder is listed once per process, when the first
    scenes are built. Default: the built-in bank."""
    light_elevation: Range = (0.6, 1.45)
    """Elevation of the directional light above the table plane (rad)."""
    light_intensity: Range = (0.6, 1.2)
    """Directional light intensity (diffuse multiplier)."""
    ambient: Range = (0.15, 0.45)
    """Ambient light level."""
    specular: Range = (0.0, 0.6)
    """Specular strength of objects (Blinn-Phong)."""
    shininess: Range = (8.0, 64.0)
    """Blinn-Phong exponent."""
    color_saturation: Range = (0.3, 1.0)
    """Saturation (HSV) of object colours."""
    color_value: Range = (0.3, 1.0)
    """Brightness (HSV value) of object colours."""
    # --- camera ---
    fov: Range = (1.10, 1.30)
    """Horizontal field of view (rad)."""
    mount_jitter_pos: float = 0.004
    """Camera mount position jitter (m), uniform in +/- this, per axis."""
    mount_jitter_rot: float = 0.04
    """Camera mount rotation jitter (rad), uniform in +/- this, per axis."""
    image_noise: Range = (0.0, 0.03)
    """Std of additive Gaussian pixel noise (fraction of full scale)."""
    blur: Range = (0.0, 1.0)
    """Blend weight of a 3x3 Gaussian blur applied to the image."""
    # --- dynamics ---
    action_gain: Range = (0.85, 1.15)
    """Multiplier between commanded and executed velocity."""
    latency_prob: float = 0.5
    """Probability that a scene executes every command one control step late."""
    action_noise: Range = (0.0, 0.005)
    """Std of Gaussian noise added to executed velocities (m/s)."""
    slip_rate: Range = (0.0, 0.05)
    """Per-step drop probability of a held sphere grasped at the very edge of the pads (scaled down for centred grasps)."""

    def __post_init__(self) -> None:
        owner = "RandomizationConfig"
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, tuple):
                value_range(owner, f.name, v)
        value_range(owner, "sphere_diameter", self.sphere_diameter, 0.002, 0.06)
        value_range(owner, "sphere_xy", self.sphere_xy, -0.2, 0.2)
        value_range(owner, "target_speed", self.target_speed, 0.0, 0.2)
        value_range(owner, "target_hue", self.target_hue, -0.5, 1.0)
        if self.target_hue[1] - self.target_hue[0] + 2 * self.distractor_hue_margin >= 0.9:
            raise ValueError(
                "RandomizationConfig.target_hue plus twice distractor_hue_margin must leave hues for distractors; "
                f"got target_hue={self.target_hue!r}, distractor_hue_margin={self.distractor_hue_margin!r}"
            )
        value_range(owner, "start_height", self.start_height, 0.02, 0.3)
        value_range(owner, "distractor_size", self.distractor_size, 0.001, 0.08)
        value_range(owner, "fov", self.fov, 0.2, 2.5)
        value_range(owner, "blur", self.blur, 0.0, 1.0)
        value_range(owner, "action_gain", self.action_gain, 0.0, 5.0)
        value_range(owner, "action_noise", self.action_noise, 0.0, 1.0)
        value_range(owner, "image_noise", self.image_noise, 0.0, 1.0)
        value_range(owner, "slip_rate", self.slip_rate, 0.0, 1.0)
        int_in(owner, "max_distractors", self.max_distractors, 0, 8)
        probability(owner, "latency_prob", self.latency_prob)
        finite_non_negative(owner, "distractor_min_gap", self.distractor_min_gap)
        finite_non_negative(owner, "distractor_hue_margin", self.distractor_hue_margin)
        finite_non_negative(owner, "mount_jitter_pos", self.mount_jitter_pos)
        finite_non_negative(owner, "mount_jitter_rot", self.mount_jitter_rot)
        if self.table_photos is not None:  # the folder is read when the first scenes are built (table_photo_files):
            # a stored config (a checkpoint's) must rebuild on machines without it, since the table changes no camera
            if not isinstance(self.table_photos, (str, os.PathLike)) or not str(self.table_photos):
                raise ValueError(f"RandomizationConfig.table_photos must be a folder path; got {self.table_photos!r}")
            object.__setattr__(self, "table_photos", str(self.table_photos))

    @classmethod
    def none(cls) -> "RandomizationConfig":
        """Nominal scene: no distractors, fixed looks and ideal dynamics (useful in tests)."""
        return cls(
            sphere_diameter=(0.0137, 0.0137), max_distractors=0, table_tint=(1.0, 1.0), texture_scale=(2.0, 2.0),
            light_elevation=(1.2, 1.2), light_intensity=(1.0, 1.0), ambient=(0.3, 0.3), specular=(0.3, 0.3),
            shininess=(32.0, 32.0), fov=(1.2, 1.2), mount_jitter_pos=0.0, mount_jitter_rot=0.0,
            image_noise=(0.0, 0.0), blur=(0.0, 0.0), action_gain=(1.0, 1.0), latency_prob=0.0,
            action_noise=(0.0, 0.0), slip_rate=(0.0, 0.0),
        )

TARGET_KINDS = ("sphere", "cube", "cylinder")
"""Target kinds the simulator knows, in the order of their codes in ``State.target_kind`` (see
:data:`graspsim.state.TARGET_KIND_CODES`)."""


@dataclass(frozen=True)
class TargetConfig:
    """What the robot grasps: the mix of target kinds and their size ranges (drawn per scene at reset).

    A sphere is grasped from any side; a cube only with the fingers across two opposite faces, so any kind
    other than the sphere turns the wrist on (``SimConfig.wrist``): actions become ``(vx, vy, vz, wz, grip)``
    and the gripper senses gain the wrist angle. The sphere's diameter stays in
    ``RandomizationConfig.sphere_diameter``; its colour band (``target_hue`` ...) is every kind's.
    """

    kinds: Tuple[str, ...] = ("sphere",)
    """Kinds drawn per scene, e.g. ``sphere`` or ``sphere cube cylinder`` (``sphere,cube,cylinder`` also parses);
    known: sphere, cube, cylinder. Uniformly unless ``weights`` says otherwise."""
    weights: Tuple[float, ...] = ()
    """Relative share of each kind in ``kinds``, in the same order, space-separated on the command line (e.g.
    ``--sim.target.weights 2 1 2``: spheres and cylinders twice as often as cubes); empty (the default) or equal
    weights draw the kinds uniformly, exactly as runs before this setting did. The mix also sets what ``train-vision``
    validates and tests on, so its operating point is chosen for that mix."""
    cube_side: Range = (0.015, 0.030)
    """Cube edge length (m); every cube gets a uniform random yaw."""
    cylinder_diameter: Range = (0.012, 0.025)
    """Upright cylinder diameter (m)."""
    cylinder_height: Range = (0.02, 0.04)
    """Upright cylinder height (m)."""

    def __post_init__(self) -> None:
        owner = "TargetConfig"
        kinds = (self.kinds,) if isinstance(self.kinds, str) else tuple(self.kinds)
        split = tuple(k.strip() for item in kinds for k in str(item).split(",") if k.strip())
        if not split:
            raise ValueError(f"{owner}.kinds must name at least one kind of {', '.join(TARGET_KINDS)}; got {self.kinds!r}")
        for k in split:
            if k not in TARGET_KINDS:
                raise ValueError(f"{owner}.kinds: unknown kind {k!r}; known kinds: {', '.join(TARGET_KINDS)}")
        if len(set(split)) != len(split):
            raise ValueError(f"{owner}.kinds lists a kind twice: {split!r}")
        object.__setattr__(self, "kinds", split)
        weights = (self.weights,) if isinstance(self.weights, (int, float, str)) else tuple(self.weights)
        try:
            weights = tuple(float(w) for item in weights for w in str(item).split(",") if w.strip())
        except ValueError:
            raise ValueError(f"{owner}.weights must be numbers, one per kind; got {self.weights!r}") from None
        if weights:
            if len(weights) != len(split):
                raise ValueError(f"{owner}.weights gives {len(weights)} numbers for {len(split)} kinds "
                                 f"({','.join(split)}); give one per kind, or none for a uniform mix")
            if not all(math.isfinite(w) and w > 0 for w in weights):
                raise ValueError(f"{owner}.weights must be finite and above 0 (drop a kind from kinds instead of "
                                 f"weighting it 0); got {weights!r}")
        # equal weights draw exactly as no weights do: stored as none, so such a run resumes as the uniform mix it is
        object.__setattr__(self, "weights", weights if len(set(weights)) > 1 else ())
        value_range(owner, "cube_side", self.cube_side, 0.002, 0.2)
        value_range(owner, "cylinder_diameter", self.cylinder_diameter, 0.002, 0.2)
        value_range(owner, "cylinder_height", self.cylinder_height, 0.004, 0.2)

    @property
    def wrist(self) -> bool:
        """True when the mix holds more than spheres (the wrist then turns; see :class:`SimConfig`)."""
        return self.kinds != ("sphere",)


def gripper_width(wrist: bool, fingertip_pixels: bool) -> int:
    """Width of the gripper senses: 3 (gap, close command, contact); with the wrist + 2 (sin, cos of its angle);
    with the wrist and the fingertip pixels + 4 more (:func:`graspsim.env.fingertip_senses`)."""
    return 3 + (2 + 4 * bool(fingertip_pixels)) * bool(wrist)


@dataclass(frozen=True)
class SimConfig:
    """The batched simulator: geometry, control limits, camera and episode length."""

    image_size: int = 64
    """Wrist image height and width (pixels)."""
    control_hz: float = 10.0
    """Control rate (Hz); one ``step`` advances 1/control_hz seconds."""
    max_steps: int = 120
    """Episode timeout in control steps."""
    max_speed: float = 0.10
    """Per-axis end-effector speed limit (m/s)."""
    max_accel: float = 1.0
    """Per-axis end-effector acceleration limit (m/s^2)."""
    finger_speed: float = 0.2
    """Finger opening/closing speed (m/s, change of the gap)."""
    open_width: float = 0.04
    """Gap between the finger pads when open (m)."""
    pad_width: float = 0.018
    """Extent of each finger pad along the gripper x axis (m)."""
    finger_length: float = 0.045
    """Finger length from tip to palm (m)."""
    finger_thickness: float = 0.008
    """Finger thickness across the closing (y) axis (m)."""
    camera_offset: Tuple[float, float, float] = (-0.045, 0.0, 0.11)
    """Camera position in the gripper frame, relative to the fingertip centre (m)."""
    lift_height: float = 0.05
    """Success: the held sphere's bottom is at least this far above the table (m)."""
    contact_height: float = 0.002
    """The gripper's table-contact sensor reports contact when the fingertips are at most this high (m) above
    the table: the guarded move a real arm does with its wrist force-torque sensor or joint-torque residuals."""
    workspace: float = 0.25
    """Half-size of the square workspace in x and y (m); the gripper is clamped inside it."""
    max_height: float = 0.35
    """Highest fingertip height (m)."""
    shadows: bool = True
    """Cast shadows from objects and fingers onto the scene."""
    max_yaw_rate: float = 1.5
    """Wrist yaw rate limit (rad/s); used when the wrist turns (``target.kinds`` beyond sphere)."""
    max_yaw_accel: float = 15.0
    """Wrist yaw acceleration limit (rad/s^2)."""
    max_wrist_yaw: float = 1.6
    """The wrist turns within +/- this angle (rad) from its start (a cube needs at most pi/4)."""
    pad_friction: float = 0.5
    """Friction coefficient between the finger pads and a cube: it sets the cube's yaw tolerance
    (:func:`graspsim.physics.cube_yaw_tolerance`)."""
    fingertip_pixels: bool = True
    """With the wrist, the gripper senses also say where the fingertip centre and a point 2 cm above it (along the
    fingers) appear in the wrist image (:func:`graspsim.env.fingertip_senses`). The camera mount is randomised per
    scene and a mask cannot show it; on a real arm these are constants measured once (docs/deploy.md). False gives
    the 5 senses of runs before this setting. Sphere-only scenes (no wrist) never carry them."""
    embodiment: str = "floating"
    """The arm: a preset of :data:`graspsim.embodiment.EMBODIMENTS` (``floating``: the floating parallel gripper of
    every run before embodiments; ``so101``: the SO-101 and its wrist camera). It sets the camera mount and lens, the
    gripper, the reach and the start pose: the settings it owns (:data:`EMBODIMENT_FIELDS`) take its values wherever
    they are left at the floating defaults (a value given otherwise is kept; ``RandomizationConfig.none()`` fixes the
    field of view at the floating lens's 1.2 rad, so give ``fov`` with it). A config stored without it is
    ``floating``."""
    randomization: RandomizationConfig = field(default_factory=RandomizationConfig)
    """Domain-randomization ranges."""
    target: TargetConfig = field(default_factory=TargetConfig)
    """Target kinds and sizes."""

    def __post_init__(self) -> None:
        owner = "SimConfig"
        body = get_embodiment(self.embodiment)
        if body.name != "floating":
            _apply_embodiment(self, body)
        int_in(owner, "image_size", self.image_size, 16, MAX_IMAGE_SIZE)
        positive_int(owner, "max_steps", self.max_steps)
        for name in ("control_hz", "max_speed", "max_accel", "finger_speed", "open_width", "pad_width",
                     "finger_length", "finger_thickness", "lift_height", "workspace", "max_height", "contact_height",
                     "max_yaw_rate", "max_yaw_accel", "max_wrist_yaw", "pad_friction"):
            finite_positive(owner, name, getattr(self, name))
        if not isinstance(self.fingertip_pixels, bool):
            raise ValueError(f"SimConfig.fingertip_pixels must be true or false; got {self.fingertip_pixels!r}")
        if len(self.camera_offset) != 3 or not all(math.isfinite(v) for v in self.camera_offset):
            raise ValueError(f"SimConfig.camera_offset must be three finite numbers; got {self.camera_offset!r}")
        if self.camera_offset[2] <= self.finger_length:
            raise ValueError(
                f"SimConfig.camera_offset z ({self.camera_offset[2]}) must be above the finger length ({self.finger_length})"
            )
        if self.open_width <= self.randomization.sphere_diameter[1]:
            raise ValueError(
                f"SimConfig.open_width ({self.open_width}) must exceed the largest sphere diameter "
                f"({self.randomization.sphere_diameter[1]})"
            )
        t = self.target
        if "cube" in t.kinds and t.cube_side[1] >= self.open_width:
            raise ValueError(f"TargetConfig.cube_side {t.cube_side!r}: a cube side must be below the gripper's open "
                             f"width SimConfig.open_width = {self.open_width} m")
        if "cylinder" in t.kinds and t.cylinder_diameter[1] >= self.open_width:
            raise ValueError(f"TargetConfig.cylinder_diameter {t.cylinder_diameter!r}: a cylinder diameter must be below "
                             f"the gripper's open width SimConfig.open_width = {self.open_width} m")
        if "cylinder" in t.kinds and t.cylinder_height[1] > 2 * self.finger_length:
            raise ValueError(f"TargetConfig.cylinder_height {t.cylinder_height!r}: at most twice the finger length "
                             f"({2 * self.finger_length} m) fits between the pads")

    @property
    def body(self) -> Embodiment:
        """The :class:`graspsim.embodiment.Embodiment` named by ``embodiment``."""
        return get_embodiment(self.embodiment)

    @property
    def wrist(self) -> bool:
        """Whether the wrist turns: the target mix holds more than spheres. Then actions are 5-D
        ``(vx, vy, vz, wz, grip)`` and the gripper senses 5-D (the wrist angle's sine and cosine appended);
        otherwise 4-D and 3-D as before kinds existed (4-D actions are accepted whenever no scene holds a cube)."""
        return self.target.wrist

    @property
    def action_dim(self) -> int:
        """Width of the actions this configuration's expert emits and its gymnasium env takes: 5 with the wrist, else 4."""
        return 5 if self.wrist else 4

    @property
    def gripper_dim(self) -> int:
        """Width of ``obs["gripper"]``: 3 without the wrist; with it 5 (plus sin and cos of the wrist angle), and 9
        with ``fingertip_pixels`` (plus the 4 fingertip senses)."""
        return gripper_width(self.wrist, self.fingertip_pixels)

    @property
    def dt(self) -> float:
        """Control period (s)."""
        return 1.0 / self.control_hz

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> "SimConfig":
        """Rebuild from ``to_dict`` output; unknown keys raise ValueError naming them."""
        return from_dict(cls, d)


EMBODIMENT_FIELDS = {
    "control_hz": "control_hz", "open_width": "open_width", "pad_width": "pad_width",
    "finger_length": "finger_length", "finger_thickness": "finger_thickness", "camera_offset": "camera_offset",
    "workspace": "workspace", "max_height": "max_height", "randomization.fov": "fov",
    "randomization.sphere_xy": "target_xy", "randomization.start_height": "start_height",
    "randomization.start_offset": "start_offset",
}
"""The :class:`SimConfig` settings an embodiment owns (dotted name -> :class:`graspsim.embodiment.Embodiment` field)."""


def _apply_embodiment(cfg: "SimConfig", body: Embodiment) -> None:
    """Give ``cfg``'s embodiment-owned settings still at their floating defaults the values of ``body`` (in place, in
    ``__post_init__``), so ``--sim.embodiment so101`` alone sets them and a stored config rebuilds as written."""
    floating = get_embodiment("floating")
    rand = {}
    for dotted, attr in EMBODIMENT_FIELDS.items():
        name = dotted.split(".")[-1]
        holder = cfg.randomization if dotted.startswith("randomization.") else cfg
        value = getattr(holder, name)
        if _same(value, getattr(floating, attr)):
            new = getattr(body, attr)
            if holder is cfg:
                object.__setattr__(cfg, name, new)
            else:
                rand[name] = new
    if rand:
        object.__setattr__(cfg, "randomization", dataclasses.replace(cfg.randomization, **rand))


def _same(a, b) -> bool:
    """Equal values, a list equal to a tuple of the same numbers."""
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return tuple(a) == tuple(b)
    return a == b


def from_dict(cls, d: dict):
    """Build the frozen dataclass ``cls`` from a plain dict, recursing into nested dataclasses.

    Unknown keys raise ``ValueError`` (a config typo must not pass silently); lists become tuples.
    """
    if not isinstance(d, dict):
        raise ValueError(f"{cls.__name__}: expected a mapping, got {type(d).__name__}")
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - set(names))
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown field(s) {unknown}; known: {sorted(names)}")
    kwargs = {}
    for k, v in d.items():
        f = names[k]
        sub = _dataclass_type(cls, f)
        if sub is not None and isinstance(v, dict):
            v = from_dict(sub, v)
        elif isinstance(v, list):
            v = tuple(v)
        kwargs[k] = v
    return cls(**kwargs)


def _dataclass_type(cls, f):
    import typing

    hints = typing.get_type_hints(cls)
    t = hints.get(f.name)
    return t if dataclasses.is_dataclass(t) else None
