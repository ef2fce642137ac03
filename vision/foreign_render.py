"""Foreign-render transfer frames: the target drawn by pybullet's TinyRenderer over real photos.

The segmentation net is trained on composites drawn by our own torch ray-caster (``graspsim.render``).
This module draws the same kind of scene with a renderer that no training or validation code uses,
pybullet's CPU rasterizer (``ER_TINY_RENDERER``, DIRECT mode), so a net that only learned our
renderer's look shows it here. Each frame is a wrist-camera view (square, 64x64, horizontal FOV 60-75
degrees, looking 50-85 degrees below the horizon) of a table plane textured with a real photo, with

- the target: a sphere 1.25-1.5 cm across, 2.5-8 px across in the image, red to orange by default (HSV hue
  in [-0.04, 0.06], ``--target-hue``; saturation 0.6-1, value 0.45-1), matte to glossy, under a random,
  mildly tinted directional light with shadows on most frames; with ``--kinds`` also a cube (side 1.5-3 cm,
  random yaw) or an upright cylinder (diameter 1.2-2.5 cm, height 2-4 cm), the simulator's sizes
  (``graspsim.TargetConfig``), seen from the same camera distances as the sphere (so about 3-30 px across);
- 0-4 distractors (spheres, boxes, cylinders) of other hues (outside the target's band widened by 0.08 on
  each side: [-0.12, 0.14] by default) or grey/black/white;
- sometimes one or two grey/black fingers entering from the top, some covering part of the target;
- some targets partly out of frame;
- 25% target-free frames (every 4th index), half of them with distractors and half without.

The scene is rendered at 4x (256x256) and area-downsampled; the mask is the target's coverage of
pybullet's segmentation buffer, kept where it is at least 0.5. Sensor noise and a slight blur are added
afterwards in numpy with their own random stream. Frame ``k`` of seed ``s`` depends only on (s, k), so a
set of N frames is the first N frames of any longer set.

TinyRenderer facts that shaped this code (pybullet 3.2.x):

- shadows come from a depth map rendered from ``lightDirection * lightDistance`` towards the world
  origin with the camera's own projection matrix, and a point counts as shadowed only if the occluder is
  more than about ``0.05 - near`` (world units) closer to the light. With a near plane of a few
  centimetres that bias swallows the shadow of a 1.4 cm sphere. So the scene is centred on the origin
  (the target sits there), the light distance is the smallest that lets the shadow map cover the visible
  table, and the near plane is set per frame to 0.05 minus a bias of 2-8 mm, just above the depth step of
  one shadow texel on the table (smaller biases gave striped self-shadowing). Where the light would have
  to be farther than 0.6 (coarse shadow texels; shallow views of a far table) the frame has no shadows.
  A shadow only scales the diffuse and specular part by 0.8, so TinyRenderer shadows are low-contrast.
- the specular term has a fixed exponent and is multiplied by the surface colour, so glossy frames get a
  broad, colour-tinted brightening towards the light rather than a white pin-point; ``changeVisualShape``'s
  ``specularColor`` is set as the material's intent but TinyRenderer does not read it.
- the table texture is built per frame in image space (the photo warped through the table-to-image
  homography of a random placement: scale, rotation, offset, mirrored tiling) on a fine mesh whose
  texture coordinates stay inside [0, 1] (TinyRenderer leaves seams where coordinates wrap).

Command line (``graspsim render-transfer``, :class:`RenderTransferConfig`)::

    graspsim render-transfer --split val --n 1024 --seed 11 --out data/transfer/val
    graspsim render-transfer --split test --n 1024 --seed 23 --out data/transfer/test

For a target of another colour give its hue band, e.g. a blue one (the distractors' excluded band follows)::

    graspsim render-transfer --split val --n 1024 --seed 11 --target-hue 0.58 0.66 --out blue/val

The hue band is the only setting that differs from the shipped sets' command; with the default band the
frames are exactly the shipped ones. Match the band to ``--sim.randomization.target-hue`` of training.

Target kinds (``--kinds``, default ``sphere``: the shipped sets, byte for byte)::

    graspsim render-transfer --split val --n 1024 --seed 11 --kinds sphere,cube,cylinder --out kinds/val

Each target frame's kind is drawn uniformly from the mix, with the cube's side and yaw and the cylinder's
diameter and height, from a stream of its own (``frame_rng(seed, k, KIND_DRAW)``), so the rest of frame ``k``
(camera, photo, light, distractors, fingers) is drawn exactly as in the sphere-only set; a sphere frame and a
target-free frame of a mix are the sphere-only set's frames. The camera stands as far from the target's centre
as it would from the sphere, so a target's size in pixels follows its size in metres, as in the simulator's
wrist camera (cubes and cylinders about 3-30 px across, median 10-12 px). With more than spheres, ``meta.csv``
gets a ``kind`` column (:data:`graspsim.vision.image_set.KIND_COLUMN`: the kind's name, ``none`` for target-free
frames), and ``diameter_px`` is the equivalent diameter (same area) of the unoccluded target's projected outline.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Tuple

import numpy as np

from graspsim import TargetConfig
from graspsim.seeds import frame_rng
from graspsim.validate import positive_int

from .image_set import KIND_COLUMN, NO_KIND, ImageSetWriter, list_images, read_image
from .transfer_rules import TARGET_HUE, check_kinds, distractor_hue_gap

log = logging.getLogger(__name__)

IMAGE_SIZE = 64
SUPERSAMPLE = 4
RENDER_SIZE = IMAGE_SIZE * SUPERSAMPLE
DISTRACTOR_HUE_GAP = distractor_hue_gap(TARGET_HUE)  # (-0.12, 0.14): distractor hues stay outside this band
DIAMETER_PX = (2.5, 8.0)  # apparent target diameter at 64x64
TARGET_RADIUS_M = (0.00625, 0.0075)
HFOV_DEG = (60.0, 75.0)
PITCH_DEG = (50.0, 85.0)
MAX_LIGHT_DISTANCE = 0.6  # farther lights make shadow texels too coarse: such frames get no shadows
SHADOW_BIAS_MAX = 0.008
NEAR_MAX = 0.05 - 0.002  # the farthest a frame's near plane gets (0.05 minus the smallest shadow bias)
FAR = 100.0
TARGET_FREE_EVERY = 4  # index % 4 == 3 is target-free: exactly 25%
CAMERA_EFFECTS_DRAW = 1_000_003  # the draw tag of a frame's noise and blur stream (scene draws are 0, 1, ... < 50)
KIND_DRAW = 1_000_004  # the draw tag of a frame's target kind and shape (only with a mix beyond spheres)
SPHERE_ONLY = ("sphere",)
RENDERERS = ("pybullet", "mujoco")
"""Renderers of ``render-transfer --renderer``: this module's TinyRenderer scenes, or MuJoCo's SO-101 wrist view
(:mod:`graspsim.vision.mujoco_transfer`)."""
_SIM_TARGET = TargetConfig()
CUBE_SIDE_M = _SIM_TARGET.cube_side  # (0.015, 0.030): the simulator's cube sides
CYLINDER_DIAMETER_M = _SIM_TARGET.cylinder_diameter  # (0.012, 0.025)
CYLINDER_HEIGHT_M = _SIM_TARGET.cylinder_height  # (0.02, 0.04)
RIM_POINTS = 32  # points per rim of a cylinder's outline
META_FIELDS = (
    "name", "photo", "has_target", "diameter_px", "target_u", "target_v", "visible_px", "truncated", "occluded",
    "fingers", "n_distractors", "glossiness", "shadows",
)
"""Columns of a sphere-only set's ``meta.csv``; a set with more kinds adds :data:`KIND_COLUMN` at the end."""


@dataclass(frozen=True)
class TargetShape:
    """One frame's target: ``kind`` (sphere, cube, cylinder), ``half_width`` (m; a sphere's or cylinder's radius,
    half a cube's side), ``half_height`` (m; its centre's height over the table) and ``yaw`` (rad, a cube's turn
    about the vertical)."""

    kind: str
    half_width: float
    half_height: float
    yaw: float = 0.0

    def bound(self) -> float:
        """Radius of the smallest sphere about the centre that holds the target (m)."""
        if self.kind == "cube":
            return self.half_width * math.sqrt(3.0)
        return math.hypot(self.half_width, self.half_height) if self.kind == "cylinder" else self.half_width

    def footprint(self) -> float:
        """Radius of the target's footprint on the table (m), to keep distractors off it."""
        return self.half_width * math.sqrt(2.0) if self.kind == "cube" else self.half_width

    def outline_points(self) -> np.ndarray:
        """Points whose convex hull is the target (P,3, m, centre at the origin): a cube's 8 corners, a cylinder's
        two rims."""
        a, h = self.half_width, self.half_height
        if self.kind == "cube":
            c, s = math.cos(self.yaw), math.sin(self.yaw)
            xy = np.array([[x * c - y * s, x * s + y * c] for x in (-a, a) for y in (-a, a)])
        else:
            t = np.linspace(0.0, 2 * math.pi, RIM_POINTS, endpoint=False)
            xy = a * np.stack([np.cos(t), np.sin(t)], 1)
        return np.concatenate([np.c_[xy, np.full(len(xy), z)] for z in (-h, h)])


def draw_shape(kinds: tuple[str, ...], rng: np.random.Generator) -> TargetShape:
    """A frame's target kind, uniform over ``kinds``, and its shape in the simulator's ranges, from ``rng`` (the
    frame's :data:`KIND_DRAW` stream; always the same five draws, so the shape of a kind does not depend on the
    mix's other kinds' order of draws). A sphere's size is drawn with the rest of the frame (``TARGET_RADIUS_M``), so
    its ``half_width`` here is 0."""
    kind = kinds[int(rng.integers(len(kinds)))]
    side, yaw = rng.uniform(*CUBE_SIDE_M), rng.uniform(0.0, 2 * math.pi)
    diam, height = rng.uniform(*CYLINDER_DIAMETER_M), rng.uniform(*CYLINDER_HEIGHT_M)
    if kind == "cube":
        return TargetShape("cube", side / 2, side / 2, yaw)
    if kind == "cylinder":
        return TargetShape("cylinder", diam / 2, height / 2)
    return TargetShape("sphere", 0.0, 0.0)


@dataclass
class FrameMeta:
    name: str
    photo: str
    has_target: bool
    diameter_px: float  # apparent diameter the target would have unoccluded (0 when target-free)
    target_u: float  # image position of the target centre in 64x64 pixels (x right, y down; 0 when target-free)
    target_v: float
    visible_px: int  # target pixels in the 64x64 mask
    truncated: bool  # part of the target's disc lies outside the image
    occluded: bool  # a finger covers part of the target's disc
    fingers: int
    n_distractors: int
    glossiness: float  # 0 = matte .. 1 = glossy; the frame's TinyRenderer specular coefficient is 1.2 x this
    shadows: bool
    kind: str = "sphere"  # the target's kind (NO_KIND when target-free); written only for sets beyond spheres


def _hsv_to_rgb(h: float, s: float, v: float) -> list[float]:
    import colorsys

    return list(colorsys.hsv_to_rgb(h % 1.0, s, v))


def _quat_from_matrix(m: np.ndarray) -> list[float]:
    """(x, y, z, w) quaternion of a 3x3 rotation matrix whose columns are the body axes in world."""
    t = m[0, 0] + m[1, 1] + m[2, 2]
    if t > 0:
        s = math.sqrt(t + 1.0) * 2
        w, x, y, z = 0.25 * s, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s
    elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
        s = math.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2]) * 2
        w, x, y, z = (m[2, 1] - m[1, 2]) / s, 0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s
    elif m[1, 1] > m[2, 2]:
        s = math.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2]) * 2
        w, x, y, z = (m[0, 2] - m[2, 0]) / s, (m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s
    else:
        s = math.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1]) * 2
        w, x, y, z = (m[1, 0] - m[0, 1]) / s, (m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s
    return [x, y, z, w]


class _Camera:
    """Pinhole camera looking down at the table; pixel coordinates are in the 64x64 image (u right, v down)."""

    def __init__(self, hfov_deg: float, pitch_deg: float, yaw: float):
        self.hfov = hfov_deg
        self.f = (IMAGE_SIZE / 2) / math.tan(math.radians(hfov_deg) / 2)
        p = math.radians(pitch_deg)
        self.fwd = np.array([math.cos(p) * math.cos(yaw), math.cos(p) * math.sin(yaw), -math.sin(p)])
        right = np.cross(self.fwd, [0.0, 0.0, 1.0])
        self.right = right / np.linalg.norm(right)
        self.up = np.cross(self.right, self.fwd)
        self.eye = np.zeros(3)

    def ray(self, u, v) -> np.ndarray:
        """Unit ray directions (..., 3) through image points (u, v)."""
        u = np.asarray(u, dtype=np.float64)
        v = np.asarray(v, dtype=np.float64)
        c = IMAGE_SIZE / 2
        d = self.fwd + ((u - c) / self.f)[..., None] * self.right - ((v - c) / self.f)[..., None] * self.up
        return d / np.linalg.norm(d, axis=-1, keepdims=True)

    def table_point(self, u, v, z: float = 0.0) -> np.ndarray:
        """Where the rays through (u, v) meet the horizontal plane at height z."""
        d = self.ray(u, v)
        t = (z - self.eye[2]) / d[..., 2]
        return self.eye + t[..., None] * d

    def project(self, pts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Image (u, v) and depth along the view axis of world points (..., 3)."""
        rel = pts - self.eye
        z = rel @ self.fwd
        c = IMAGE_SIZE / 2
        return c + self.f * (rel @ self.right) / z, c - self.f * (rel @ self.up) / z, z


class ForeignRenderer:
    """Seeded TinyRenderer frame generator over the photos of one folder.

    ``frame(k)`` returns ``(rgb H,W,3 uint8, mask H,W bool, FrameMeta)`` and depends only on
    (``seed``, ``k``, ``target_hue``, ``kinds``). ``target_hue`` is the target's HSV hue band (mod 1); distractors
    avoid it widened by :data:`graspsim.vision.transfer_rules.DISTRACTOR_HUE_MARGIN`. ``kinds``: the target kinds
    drawn per frame (module docstring); spheres alone draw nothing more. Use as a context manager or call ``close()``.
    """

    def __init__(self, photo_dir: str | os.PathLike, seed: int, target_hue: tuple[float, float] = TARGET_HUE,
                 kinds=SPHERE_ONLY):
        import pybullet as p

        self.kinds = check_kinds(kinds, "ForeignRenderer")
        self.target_hue = (float(target_hue[0]), float(target_hue[1]))
        self.distractor_hue_gap = distractor_hue_gap(self.target_hue)
        self.p = p
        self.seed = int(seed)
        self.photo_paths = list_images(photo_dir)
        self.photos = [read_image(f) for f in self.photo_paths]
        self.client = p.connect(p.DIRECT)
        self._tmp = tempfile.mkdtemp(prefix="foreign_render_")
        self._frames_since_connect = 0
        self._tex_count = 0

    def close(self) -> None:
        if self.client is not None:
            self.p.disconnect(physicsClientId=self.client)
            self.client = None
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ----------------------------------------------------------------- one frame
    def frame(self, index: int) -> tuple[np.ndarray, np.ndarray, FrameMeta]:
        has_target = index % TARGET_FREE_EVERY != TARGET_FREE_EVERY - 1
        free_with_distractors = (index // TARGET_FREE_EVERY) % 2 == 0
        shape = None  # the sphere of the frame's main stream (target-free frames: exactly the sphere-only set's)
        if self.kinds != SPHERE_ONLY and has_target:
            shape = draw_shape(self.kinds, frame_rng(self.seed, index, KIND_DRAW))
            shape = None if shape.kind == "sphere" else shape
        for attempt in range(50):
            rng = frame_rng(self.seed, index, attempt)
            out = self._render(rng, index, has_target, free_with_distractors, shape)
            if out is not None:
                break
        else:  # pragma: no cover - 50 failed draws would be a bug in the sampler
            raise RuntimeError(f"frame {index}: no frame with a visible target after 50 draws")
        rgb, mask, meta = out
        if not has_target:
            meta.kind = NO_KIND
        return self._camera_effects(rgb, frame_rng(self.seed, index, CAMERA_EFFECTS_DRAW)), mask, meta

    def _camera_effects(self, rgb: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        import cv2

        img = rgb.astype(np.float32)
        if rng.random() < 0.25:
            img = cv2.GaussianBlur(img, (0, 0), float(rng.uniform(0.35, 0.75)))
        sigma = 0.03 * float(rng.uniform(0.0, 1.0)) ** 2 * 255.0  # 0-3% of full scale, mostly low
        img = img + rng.normal(0.0, 1.0, img.shape).astype(np.float32) * sigma
        return np.clip(np.rint(img), 0, 255).astype(np.uint8)

    def _render(self, rng, index, has_target, free_with_distractors, shape: TargetShape | None = None):
        """One draw of frame ``index`` from ``rng``: (rgb, mask, FrameMeta), or None to draw again. ``shape``: a cube
        or cylinder target in place of the sphere (None: the sphere); the stream's draws are the same either way."""
        import cv2

        p, cid = self.p, self.client
        # a fresh connection now and then returns the memory of the per-frame textures
        if self._frames_since_connect >= 64:
            p.disconnect(physicsClientId=cid)
            self.client = cid = p.connect(p.DIRECT)
            self._frames_since_connect = 0
        self._frames_since_connect += 1
        p.resetSimulation(physicsClientId=cid)

        # camera: place it so that the ray through the target's image point meets the target centre
        cam = _Camera(rng.uniform(*HFOV_DEG), rng.uniform(*PITCH_DEG), rng.uniform(0, 2 * math.pi))
        radius = rng.uniform(*TARGET_RADIUS_M)
        diam = rng.uniform(*DIAMETER_PX)
        dist = radius / math.sin(math.atan(diam / (2 * cam.f)))  # camera to target centre, as for the sphere
        if shape is not None:  # the same distance: the apparent size follows the size in metres
            diam = 2 * cam.f * math.tan(math.asin(min(shape.bound() / dist, 0.99)))  # the bounding sphere's
        truncated_wanted = has_target and rng.random() < 0.15
        if truncated_wanted:
            side = rng.integers(4)
            along = rng.uniform(4, IMAGE_SIZE - 4)
            across = rng.uniform(-0.3, 0.3) * diam  # centre from just outside to just inside the edge
            u, v = [(across, along), (IMAGE_SIZE - across, along), (along, across), (along, IMAGE_SIZE - across)][side]
        else:
            m = diam / 2 + 1
            u, v = rng.uniform(m, IMAGE_SIZE - m), rng.uniform(m, IMAGE_SIZE - m)
        centre = np.array([0.0, 0.0, radius if shape is None else shape.half_height])
        cam.eye = centre - dist * cam.ray(u, v)
        outline = None  # a cube's or cylinder's projected outline (convex polygon, 64x64 pixels) and its diameter
        if shape is not None:
            pu, pv, depth = cam.project(shape.outline_points() + centre)
            if depth.min() < 1.2 * NEAR_MAX:
                return None  # the near plane would cut the target: draw the frame again
            outline = cv2.convexHull(np.stack([pu, pv], 1).astype(np.float32))[:, 0]
            diam = 2 * math.sqrt(max(cv2.contourArea(outline), 1e-6) / math.pi)  # same area as the outline

        # light direction, shadow map and near plane. The shadow map looks at the origin with the
        # camera's field of view: the light is the nearest that covers the visible table. The near
        # plane sets TinyRenderer's shadow bias (about 0.05 - near): a bit more than the depth step of
        # one shadow texel on the table, so that there is no striped self-shadowing.
        el = math.radians(rng.uniform(35, 85))
        az = rng.uniform(0, 2 * math.pi)
        light_dir = [math.cos(el) * math.cos(az), math.cos(el) * math.sin(az), math.sin(el)]
        shadows = bool(rng.random() < 0.95)
        tan_half = math.tan(math.radians(cam.hfov) / 2)
        corners = cam.table_point(
            np.array([0.0, IMAGE_SIZE, 0.0, IMAGE_SIZE, 32.0]), np.array([0.0, 0.0, IMAGE_SIZE, IMAGE_SIZE, 0.0])
        )
        reach = float(np.hypot(corners[:, 0], corners[:, 1]).max())
        light_distance = max(0.2, 1.25 * reach / tan_half)
        if light_distance > MAX_LIGHT_DISTANCE:
            shadows, light_distance = False, MAX_LIGHT_DISTANCE
        texel = 2 * light_distance * tan_half / RENDER_SIZE
        bias = min(SHADOW_BIAS_MAX, max(0.002, 1.6 * texel / math.tan(el)))
        self._near = 0.05 - bias

        photo_i = int(rng.integers(len(self.photos)))
        if not self._table(rng, cam, self.photos[photo_i], dist):
            return None

        target_id = None
        if has_target:
            hue = rng.uniform(*self.target_hue)
            color = _hsv_to_rgb(hue, rng.uniform(0.6, 1.0), rng.uniform(0.45, 1.0))
            orn = [0.0, 0.0, 0.0, 1.0]
            if shape is None:
                vis = p.createVisualShape(p.GEOM_SPHERE, radius=radius, rgbaColor=color + [1.0], physicsClientId=cid)
            elif shape.kind == "cube":
                vis = p.createVisualShape(p.GEOM_BOX, halfExtents=[shape.half_width] * 3, rgbaColor=color + [1.0],
                                          physicsClientId=cid)
                orn = list(p.getQuaternionFromEuler([0.0, 0.0, shape.yaw]))
            else:  # an upright cylinder (pybullet's cylinder axis is z)
                vis = p.createVisualShape(p.GEOM_CYLINDER, radius=shape.half_width, length=2 * shape.half_height,
                                          rgbaColor=color + [1.0], physicsClientId=cid)
            target_id = p.createMultiBody(0, -1, vis, centre.tolist(), orn, physicsClientId=cid)

        glossiness = float(rng.uniform(0.0, 1.0) ** 1.5)
        if target_id is not None:
            spec = 0.1 + 0.9 * glossiness
            p.changeVisualShape(target_id, -1, specularColor=[spec] * 3, physicsClientId=cid)

        # distractors
        if has_target:
            n_dis = int(rng.integers(0, 5))
        else:
            n_dis = int(rng.integers(1, 5)) if free_with_distractors else 0
        placed = [(0.0, 0.0, radius if shape is None else shape.footprint())] if has_target else []
        n_placed = 0
        for _ in range(n_dis):
            n_placed += self._distractor(rng, cam, radius, placed)

        # fingers
        finger_ids = []
        if rng.random() < 0.35:
            finger_ids = self._fingers(rng, cam, u, v, diam, dist, has_target)

        # light colour and coefficients
        tint = np.clip(1.0 + rng.uniform(-0.12, 0.12, 3), 0.0, 1.0)
        tint = (tint / tint.max()).tolist()
        ka = rng.uniform(0.25, 0.55)
        kd = rng.uniform(0.45, 0.9)
        ks = 1.2 * glossiness
        # exposure of the table: the plane's brightness under this light is uniform, so the texture was
        # pre-scaled to show the photo at a random exposure; the objects keep TinyRenderer's shading
        plane_gain = ka + (kd * math.sin(el) + ks * math.sin(el) ** 2) * float(np.mean(tint))
        exposure = rng.uniform(0.8, 1.1)
        self._load_table_texture(exposure / plane_gain)

        view = p.computeViewMatrix(cam.eye.tolist(), (cam.eye + cam.fwd).tolist(), cam.up.tolist())
        proj = p.computeProjectionMatrixFOV(cam.hfov, 1.0, self._near, FAR)
        _, _, rgba, _, seg = p.getCameraImage(
            RENDER_SIZE, RENDER_SIZE, view, proj,
            lightDirection=light_dir, lightColor=tint, lightDistance=light_distance,
            shadow=int(shadows), lightAmbientCoeff=ka, lightDiffuseCoeff=kd, lightSpecularCoeff=ks,
            renderer=p.ER_TINY_RENDERER, physicsClientId=cid,
        )
        rgb_hi = np.asarray(rgba, dtype=np.uint8).reshape(RENDER_SIZE, RENDER_SIZE, 4)[..., :3]
        seg = np.asarray(seg).reshape(RENDER_SIZE, RENDER_SIZE)
        rgb = cv2.resize(rgb_hi, (IMAGE_SIZE, IMAGE_SIZE), interpolation=cv2.INTER_AREA)

        if target_id is None:
            mask = np.zeros((IMAGE_SIZE, IMAGE_SIZE), bool)
        else:
            cover = (seg == target_id).astype(np.float32)
            cover = cv2.resize(cover, (IMAGE_SIZE, IMAGE_SIZE), interpolation=cv2.INTER_AREA)
            mask = cover >= 0.5
        visible = int(mask.sum())
        truncated = occluded = False
        if target_id is not None:
            if visible == 0:
                return None  # fully hidden or out of view: draw the frame again
            r = diam / 2
            if outline is None:
                truncated = bool(u - r < 0 or v - r < 0 or u + r > IMAGE_SIZE or v + r > IMAGE_SIZE)
            else:
                truncated = bool((outline < 0).any() or (outline > IMAGE_SIZE).any())
            if finger_ids:
                if outline is None:
                    ys, xs = np.mgrid[0:RENDER_SIZE, 0:RENDER_SIZE]
                    disc = ((xs + 0.5) / SUPERSAMPLE - u) ** 2 + ((ys + 0.5) / SUPERSAMPLE - v) ** 2 <= r * r
                else:
                    disc = np.zeros((RENDER_SIZE, RENDER_SIZE), np.uint8)
                    cv2.fillConvexPoly(disc, np.round(outline * SUPERSAMPLE - 0.5).astype(np.int32), 1)
                    disc = disc.astype(bool)
                occluded = bool(np.isin(seg[disc], finger_ids).any())
        meta = FrameMeta(
            name=f"frame_{index:05d}", photo=self.photo_paths[photo_i].name, has_target=has_target,
            diameter_px=round(float(diam), 3) if has_target else 0.0,
            target_u=round(float(u), 3) if has_target else 0.0, target_v=round(float(v), 3) if has_target else 0.0,
            visible_px=visible,
            truncated=truncated, occluded=occluded, fingers=len(finger_ids), n_distractors=n_placed,
            glossiness=round(glossiness, 3), shadows=shadows, kind="sphere" if shape is None else shape.kind,
        )
        return rgb, mask, meta

    # ----------------------------------------------------------------- scene parts
    def _table(self, rng, cam: _Camera, photo: np.ndarray, dist: float) -> bool:
        """Table plane z=0 as a grid mesh covering the view; its texture is the photo seen through the camera.

        Returns False (nothing built) when the near plane would cut the table."""
        import cv2

        p, cid = self.p, self.client
        ext = 0.1 * IMAGE_SIZE  # the mesh reaches a little beyond the image on every side
        lo, hi = -ext, IMAGE_SIZE + ext
        n = 17
        g = np.linspace(lo, hi, n)
        gu, gv = np.meshgrid(g, g)
        verts = cam.table_point(gu, gv)
        if ((verts - cam.eye) @ cam.fwd).min() < 1.3 * self._near:
            return False  # the table would be cut by the near plane (camera too low): redraw
        uvs = np.stack([(gu - lo) / (hi - lo), (gv - lo) / (hi - lo)], axis=-1) * 0.99 + 0.005
        idx = []
        for i in range(n - 1):
            for j in range(n - 1):
                a, b, c, d = i * n + j, i * n + j + 1, (i + 1) * n + j + 1, (i + 1) * n + j
                idx += [a, c, b, a, d, c]  # counter-clockwise seen from above
        # texture in image space: texel -> table point -> photo pixel (random similarity, mirrored tiling)
        tex_n = int((hi - lo) * SUPERSAMPLE * 0.75)
        t = (np.arange(tex_n) + 0.5) / tex_n * 0.99 + 0.005
        tu, tv = np.meshgrid(lo + (t - 0.005) / 0.99 * (hi - lo), lo + (t - 0.005) / 0.99 * (hi - lo))
        pts = cam.table_point(tu, tv)
        view_width = 2 * dist * math.tan(math.radians(cam.hfov) / 2)
        px_per_m = max(photo.shape[:2]) / (view_width * rng.uniform(0.7, 3.0))
        th = rng.uniform(0, 2 * math.pi)
        c, s = math.cos(th), math.sin(th)
        off = rng.uniform(0, 1, 2) * np.array(photo.shape[1::-1])
        mx = (px_per_m * (c * pts[..., 0] - s * pts[..., 1]) + off[0]).astype(np.float32)
        my = (px_per_m * (s * pts[..., 0] + c * pts[..., 1]) + off[1]).astype(np.float32)
        # far from the image, reflect-padding needs coordinates within a few photo sizes
        h, w = photo.shape[:2]
        mx = np.mod(mx, 2 * w).astype(np.float32)
        mx = np.where(mx >= w, 2 * w - 1 - mx, mx).astype(np.float32)
        my = np.mod(my, 2 * h).astype(np.float32)
        my = np.where(my >= h, 2 * h - 1 - my, my).astype(np.float32)
        self._table_tex = cv2.remap(photo, mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT_101)
        vis = p.createVisualShape(
            p.GEOM_MESH, vertices=verts.reshape(-1, 3).tolist(), indices=idx, uvs=uvs.reshape(-1, 2).tolist(),
            normals=[[0.0, 0.0, 1.0]] * (n * n), physicsClientId=cid,
        )
        self._table_id = p.createMultiBody(0, -1, vis, [0, 0, 0], physicsClientId=cid)
        return True

    def _load_table_texture(self, gain: float) -> None:
        import cv2

        tex = np.clip(self._table_tex.astype(np.float32) * gain, 0, 255).astype(np.uint8)
        # pybullet caches textures by file name: every frame needs a file name of its own
        self._tex_count += 1
        path = os.path.join(self._tmp, f"table_{self._tex_count}.png")
        # TinyRenderer's texture v axis points up the image file: store the rows bottom to top
        cv2.imwrite(path, np.ascontiguousarray(tex[::-1, :, ::-1]), [cv2.IMWRITE_PNG_COMPRESSION, 0])
        tid = self.p.loadTexture(path, physicsClientId=self.client)
        os.remove(path)
        self.p.changeVisualShape(
            self._table_id, -1, textureUniqueId=tid, rgbaColor=[1, 1, 1, 1], physicsClientId=self.client
        )

    def _distractor(self, rng, cam: _Camera, target_r: float, placed: list) -> int:
        p, cid = self.p, self.client
        shape = int(rng.integers(3))
        size = target_r * rng.uniform(0.6, 1.8)
        kind = rng.random()
        if kind < 0.3:  # achromatic: dark, grey or white
            value = rng.uniform(*[(0.04, 0.2), (0.35, 0.65), (0.8, 1.0)][int(rng.integers(3))])
            color = _hsv_to_rgb(0.0, 0.0, value)
        else:
            lo, hi = self.distractor_hue_gap
            hue = rng.uniform(hi, 1.0 + lo)  # mod 1 in _hsv_to_rgb
            color = _hsv_to_rgb(hue, rng.uniform(0.35, 1.0), rng.uniform(0.3, 1.0))
        for _ in range(20):
            pt = cam.table_point(rng.uniform(-4, IMAGE_SIZE + 4), rng.uniform(-4, IMAGE_SIZE + 4))
            if all(math.hypot(pt[0] - x, pt[1] - y) > r + 1.5 * size + 0.003 for x, y, r in placed):
                break
        else:
            return 0
        yaw = rng.uniform(0, 2 * math.pi)
        if shape == 0:
            vis = p.createVisualShape(p.GEOM_SPHERE, radius=size, rgbaColor=color + [1.0], physicsClientId=cid)
            pos, orn = [pt[0], pt[1], size], [0, 0, 0, 1]
        elif shape == 1:
            half = [size * rng.uniform(0.7, 1.3), size * rng.uniform(0.7, 1.3), size * rng.uniform(0.6, 1.4)]
            vis = p.createVisualShape(p.GEOM_BOX, halfExtents=half, rgbaColor=color + [1.0], physicsClientId=cid)
            pos, orn = [pt[0], pt[1], half[2]], p.getQuaternionFromEuler([0, 0, yaw])
        else:
            length = size * rng.uniform(1.2, 3.0)
            vis = p.createVisualShape(
                p.GEOM_CYLINDER, radius=size, length=length, rgbaColor=color + [1.0], physicsClientId=cid
            )
            if rng.random() < 0.4:  # lying on its side
                pos, orn = [pt[0], pt[1], size], p.getQuaternionFromEuler([math.pi / 2, 0, yaw])
            else:
                pos, orn = [pt[0], pt[1], length / 2], [0, 0, 0, 1]
        body = p.createMultiBody(0, -1, vis, list(map(float, pos)), list(orn), physicsClientId=cid)
        p.changeVisualShape(body, -1, specularColor=[float(rng.uniform(0, 1))] * 3, physicsClientId=cid)
        placed.append((float(pt[0]), float(pt[1]), 1.5 * size))
        return 1

    def _fingers(self, rng, cam: _Camera, u, v, diam, dist, has_target) -> list[int]:
        """One or two dark boxes hanging into the top of the view, in front of the target."""
        p, cid = self.p, self.client
        target_depth = (np.array([0.0, 0.0, 0.0]) - cam.eye) @ cam.fwd
        n = 1 if rng.random() < 0.5 else 2
        width_px = rng.uniform(9, 20)
        occlude = has_target and rng.random() < 0.6 and v > 6
        if occlude:  # the tip crosses the target's row and an edge or the tip covers part of it
            tip = v + rng.uniform(-0.25, 0.35) * diam
            col = u + rng.choice([-1, 1]) * rng.uniform(0.1, 0.5) * (width_px + diam)
        else:
            tip = rng.uniform(6, 34)
            col = rng.uniform(0, IMAGE_SIZE)
        gap = rng.uniform(24, 40) * rng.choice([-1, 1])
        cols = [col] if n == 1 else [col, col + gap]
        ids = []
        for c in cols:
            table_depth = (cam.table_point(c, tip) - cam.eye) @ cam.fwd
            far = min(0.8 * target_depth, 0.85 * table_depth)
            thick = 0.008
            near = self._near + 0.006 + thick / 2
            if far <= near:
                continue
            z = rng.uniform(near, far)
            half_w = (width_px / 2) / cam.f * z
            y_tip = -(tip - IMAGE_SIZE / 2) / cam.f * z
            y_top = (IMAGE_SIZE / 2 + 24) / cam.f * z
            x_c = (c - IMAGE_SIZE / 2) / cam.f * z
            centre = cam.eye + z * cam.fwd + x_c * cam.right + 0.5 * (y_tip + y_top) * cam.up
            rot = np.stack([cam.right, cam.up, -cam.fwd], axis=1)
            grey = float(rng.uniform(0.05, 0.45))
            vis = p.createVisualShape(
                p.GEOM_BOX, halfExtents=[half_w, 0.5 * (y_top - y_tip), thick / 2],
                rgbaColor=[grey, grey, grey * rng.uniform(0.95, 1.05), 1.0], physicsClientId=cid,
            )
            ids.append(p.createMultiBody(0, -1, vis, centre.tolist(), _quat_from_matrix(rot), physicsClientId=cid))
        return ids


def generate(photo_dir: str | os.PathLike, n: int, seed: int, start: int = 0,
             target_hue: tuple[float, float] = TARGET_HUE, kinds=SPHERE_ONLY):
    """Frames ``start .. start+n-1``: (rgb N,64,64,3 uint8, masks N,64,64 bool, list of FrameMeta)."""
    rgbs, masks, metas = [], [], []
    with ForeignRenderer(photo_dir, seed, target_hue=target_hue, kinds=kinds) as r:
        for k in range(start, start + n):
            rgb, mask, meta = r.frame(k)
            rgbs.append(rgb)
            masks.append(mask)
            metas.append(meta)
    return np.stack(rgbs), np.stack(masks), metas


def write_set(out: Path, photo_dir: Path, n: int, seed: int, overwrite: bool = False,
              target_hue: tuple[float, float] = TARGET_HUE, kinds=SPHERE_ONLY) -> dict:
    """Write frames ``0 .. n-1`` as an image set (:class:`graspsim.vision.image_set.ImageSetWriter`: ``images/`` and
    ``masks/`` as compact PNGs named ``frame_00000.png`` ..., plus ``meta.csv`` with :data:`META_FIELDS`, and
    :data:`KIND_COLUMN` when ``kinds`` holds more than spheres) and return summary statistics. The set replaces an
    earlier one in ``out`` as a whole, and only with ``overwrite``."""
    gap = distractor_hue_gap(target_hue)  # a bad band fails before anything is written
    kinds = check_kinds(kinds)
    with_kind = kinds != SPHERE_ONLY
    fields = META_FIELDS + ((KIND_COLUMN,) if with_kind else ())
    metas = []
    t0 = time.perf_counter()
    with ImageSetWriter(out, overwrite=overwrite, masks=True, digits=5, compact=True, meta_fields=fields) as w, \
            ForeignRenderer(photo_dir, seed, target_hue=target_hue, kinds=kinds) as r:
        for k in range(n):
            rgb, mask, meta = r.frame(k)
            row = asdict(meta)
            if not with_kind:
                del row["kind"]
            w.add(rgb, mask, row, stem=meta.name)
            metas.append(meta)
    seconds = time.perf_counter() - t0
    per_kind = {"kinds": list(kinds), "target_frames_by_kind": summarize_kinds(metas)} if with_kind else {}
    return summarize(metas) | per_kind | {
        "target_hue": [float(x) for x in target_hue], "distractor_hue_gap": [round(x, 6) for x in gap],
        "seconds": round(seconds, 1), "frames_per_second": round(n / seconds, 1),
    }


def summarize_kinds(metas: list[FrameMeta]) -> dict:
    """Per target kind: its number of target frames and their min / median / max ``diameter_px`` and ``visible_px``."""
    out = {}
    for kind in sorted({m.kind for m in metas if m.has_target}):
        d = np.array([m.diameter_px for m in metas if m.has_target and m.kind == kind])
        vis = np.array([m.visible_px for m in metas if m.has_target and m.kind == kind])
        out[kind] = {"frames": int(d.size),
                     "diameter_px_min_median_max": [round(float(q), 2) for q in (d.min(), np.median(d), d.max())],
                     "visible_px_min_median_max": [int(vis.min()), float(np.median(vis)), int(vis.max())]}
    return out


def summarize(metas: list[FrameMeta]) -> dict:
    n = len(metas)
    tgt = [m for m in metas if m.has_target]
    free = [m for m in metas if not m.has_target]
    d = np.array([m.diameter_px for m in tgt]) if tgt else np.zeros(1)
    vis = np.array([m.visible_px for m in tgt]) if tgt else np.zeros(1, int)
    return {
        "frames": n,
        "target_free": len(free) / n,
        "target_free_with_distractors": sum(m.n_distractors > 0 for m in free) / max(len(free), 1),
        "with_distractors": sum(m.n_distractors > 0 for m in metas) / n,
        "with_fingers": sum(m.fingers > 0 for m in metas) / n,
        "truncated_of_targets": sum(m.truncated for m in tgt) / max(len(tgt), 1),
        "occluded_of_targets": sum(m.occluded for m in tgt) / max(len(tgt), 1),
        "shadows": sum(m.shadows for m in metas) / n,
        "diameter_px_min_median_max": [round(float(q), 2) for q in (d.min(), np.median(d), d.max())],
        "visible_px_min_median_max": [int(vis.min()), float(np.median(vis)), int(vis.max())],
    }


@dataclass(frozen=True)
class RenderTransferConfig:
    """Draw a foreign-render transfer set (pybullet TinyRenderer over real photos) in the eval-real folder format."""

    out: Path
    """Output folder: images/, masks/ and meta.csv. A non-empty folder is refused unless --overwrite is given."""
    split: str = "test"
    """Photo split under the shipped backgrounds, data/backgrounds (val or test; the shipped sets: val with seed 11,
    test with seed 23)."""
    photos: Optional[Path] = None
    """Folder of photos to texture the table with (overrides --split)."""
    n: int = 1024
    """Frames to draw (every 4th one is target-free)."""
    seed: int = 23
    """Seed of the set: frame k depends only on (seed, k), so a set of N frames is the first N of any longer one."""
    target_hue: Tuple[float, float] = TARGET_HUE
    """HSV hue band of the target (1.0 = full circle, negative wraps around red; default the red-orange of the
    shipped sets). Distractors avoid the band widened by 0.08 on each side. Use the band of
    --sim.randomization.target-hue in training."""
    kinds: Tuple[str, ...] = SPHERE_ONLY
    """Target kinds, one drawn per frame: ``sphere`` (the shipped sets), or a mix such as ``sphere,cube,cylinder``
    (also ``sphere cube cylinder``); cubes and cylinders take the simulator's sizes. Beyond spheres, meta.csv gets a
    ``kind`` column. Use the kinds of --sim.target.kinds in training."""
    overwrite: bool = False
    """Replace the set (images/, masks/, meta.csv) of a non-empty --out as a whole when the new one is complete."""
    renderer: str = "pybullet"
    """``pybullet``: TinyRenderer scenes with a free camera (the shipped data/transfer and data/transfer_kinds sets);
    ``mujoco``: the SO-101 wrist camera's view rendered by MuJoCo with the arm's own meshes (needs the mujoco extra;
    the data/transfer_so101 sets, graspsim.vision.mujoco_transfer)."""

    def __post_init__(self) -> None:
        positive_int("RenderTransferConfig", "n", self.n)
        if self.renderer not in RENDERERS:
            raise ValueError(f"RenderTransferConfig.renderer must be one of {', '.join(RENDERERS)}; "
                             f"got {self.renderer!r}")
        object.__setattr__(self, "kinds", check_kinds(self.kinds))
        try:
            distractor_hue_gap(tuple(self.target_hue))
        except ValueError as e:
            raise ValueError(f"RenderTransferConfig.{e}") from None

    def photo_dir(self) -> Path:
        """The folder of photos the tables are textured with."""
        from .backgrounds import DEFAULT_BACKGROUNDS

        return Path(self.photos) if self.photos is not None else DEFAULT_BACKGROUNDS / self.split


def render_transfer_set(cfg: RenderTransferConfig) -> dict:
    """``graspsim render-transfer``: write the set of ``cfg`` (:func:`write_set`, or with ``--renderer mujoco``
    :func:`graspsim.vision.mujoco_transfer.write_set`); returns and logs its statistics."""
    if cfg.renderer == "mujoco":
        from . import mujoco_transfer

        stats = mujoco_transfer.write_set(cfg.out, cfg.photo_dir(), cfg.n, cfg.seed, overwrite=cfg.overwrite,
                                          target_hue=(float(cfg.target_hue[0]), float(cfg.target_hue[1])),
                                          kinds=cfg.kinds)
        log.info("wrote %d MuJoCo SO-101 frames to %s: %s", cfg.n, cfg.out, json.dumps(stats))
        return stats
    stats = write_set(cfg.out, cfg.photo_dir(), cfg.n, cfg.seed, overwrite=cfg.overwrite,
                      target_hue=(float(cfg.target_hue[0]), float(cfg.target_hue[1])), kinds=cfg.kinds)
    log.info("wrote %d foreign-render frames to %s: %s", cfg.n, cfg.out, json.dumps(stats))
    return stats
