"""``MujocoGraspEnv``: the grasping task in MuJoCo with the SO-101 arm, behind the env protocol of
:class:`graspsim.GraspEnv` and :class:`graspsim.bullet.BulletGraspEnv`.

>>> env = MujocoGraspEnv(SimConfig(...), num_envs=2, seed=0)   # MUJOCO_GL=egl (or osmesa) without a display
>>> obs = env.reset(seeds=[0, 1])                # rgb 2,3,H,W uint8 (wrist camera); mask 2,H,W bool; gripper 2,G
>>> obs, reward, done, info = env.step(action)   # action 2,4 or 2,5: (vx, vy, vz, [wz,] grip)
>>> env.privileged(); env.close()

Scenes come from :func:`graspsim.randomization.sample_scenes` (the same seed gives the same target kind, size,
position and colour, distractors, table texture and tint, light as in the other backends). The arm is the SO-101 of
:mod:`graspsim.mujoco.model` (pan axis 0.195 m behind the workspace centre); the state's ``tcp_pos`` is the
simulator's TCP of the ``so101`` embodiment, the centre of the pads' lower edges (the grasp point of
:func:`graspsim.mujoco.model.so101_geometry` lowered by ``tcp_below_grasp``), ``wrist_yaw`` the yaw of
:mod:`graspsim.mujoco.ik` (0: camera in front of the jaws, fixed jaw at +y); the scene's camera mount and lens
are replaced by the arm's wrist camera (fixed mount; 48.5 degrees square, or the scene's drawn lens with the ``so101``
embodiment).

Each control step: the velocity command becomes a grasp-point target exactly as in the pybullet backend
(:func:`graspsim.physics.command`: latency, gain, noise, per-axis clip; :func:`graspsim.physics.move_toward`:
acceleration limit, workspace clamp; the target never runs more than :data:`graspsim.contact_env.MAX_LAG` ahead of
the measured TCP),
the wrist angle as in the torch simulator (:func:`graspsim.physics.wrist_command`); then the IK layer
(:class:`graspsim.mujoco.ik.CartesianIK`: reach band, straight-down solve) gives joint targets, which the position
servos follow, interpolated over the control period, for ``1/control_hz`` seconds of physics at the model's 2 ms step.
The jaw's servo target moves at ``finger_speed`` (in pad gap per second) towards closed or open (``open_width``).
A start pose outside the reach band (the floating preset starts 14-22 cm high; the SO-101 reaches 9 cm at most) is
moved into the band.

Bookkeeping in a :class:`graspsim.State`, so ``privileged()`` and the failure codes mean what they mean elsewhere:

* ``held``: both pads touch the target, its centre lies between the pads (across: within the pad's half-width; along
  the closing axis between the two pad faces; vertically overlapping the pads), the pad gap is at least the
  target's width minus ``HOLD_SLACK``, and the close command is on. Only friction holds it.
* ``success``: held with the target's bottom at least ``lift_height`` above the table (latched).
* ``pushed``: a pad touched the free target while it moved more than 1 mm in the step; ``missed``: the pads closed
  below ``MISS_GAP`` without holding; ``dropped``: a held target lost while the close command stayed on.
* distractors within ``BASE_CLEARANCE`` of the pan axis (inside the arm's base), or overlapping the target or an
  earlier distractor (the torch simulator lets them interpenetrate; rigid bodies would be blown apart), are left out.
* gripper senses: the layout of :func:`graspsim.env.gripper_obs` on the measured state (pad gap from the measured jaw
  angle, table contact = the measured TCP within ``contact_height`` of the table, as in the other backends), with the
  four fingertip-pixel senses measured here: the TCP and a point 2 cm above it projected through the MuJoCo camera.
* the pads never go below the table: the IK layer raises the target while the moving jaw, which swings up to 4.5 mm
  below the fixed one as it closes, would reach under it (:meth:`graspsim.mujoco.ik.CartesianIK.track`).

One MuJoCo data per scene over one shared model and renderer (each scene's objects, looks and lens are written into
the model before it is stepped or drawn), stepped one after the other (no worker processes).
"""

from __future__ import annotations

import logging
import math
import os
import queue
import sys
import threading

import numpy as np
import torch
from torch import Tensor

from graspsim.config import SimConfig
from graspsim.contact_env import HOLD_SLACK, ContactBackend, grasp_events
from graspsim.env import FINGERTIP_RISE, fingertip_senses, gripper_obs, privileged
from graspsim.keys import GRIPPER, MASK, RGB
from graspsim.mujoco.ik import REACH_BAND_MAX_HEIGHT, CartesianIK, So101Kinematics
from graspsim.mujoco.model import (
    ARM_JOINTS, BASE_POS, CAMERA, DISTRACTOR_MASS, FIXED_PAD, GRIPPER_BODY, JAW_JOINT, MOVING_PAD,
    SCENE_KINDS, TARGET_MASS, require_mujoco, scene_model,
)
from graspsim.physics import FAILURE_NAMES, failure_cause, split_action, validate_action, wrist_command
from graspsim.randomization import sample_scenes
from graspsim.render import postprocess
from graspsim.state import KIND_BOX, KIND_CYLINDER, KIND_SPHERE, State
from graspsim.validate import positive_int

log = logging.getLogger(__name__)

CONTACT_DIST = 1e-3  # a pad touches the target when their contact distance is below this (m)
START_MARGIN = 0.01  # a start pose is moved this far inside the reach band (m)
TEX_SIZE = 128  # table texture resolution (pixels)
BASE_CLEARANCE = 0.09  # distractors drawn within this distance (m) of the pan axis would stand inside the arm's base
# (the floating simulator has no arm there): they are left out of the MuJoCo scene
_KIND_SLOT = {KIND_SPHERE: 0, KIND_BOX: 1, KIND_CYLINDER: 2}  # State kind code -> index into SCENE_KINDS


GL_HINT = ("MuJoCo could not open an OpenGL context for the wrist camera; without a display set MUJOCO_GL=egl "
           "(or MUJOCO_GL=osmesa with libosmesa6) before Python imports mujoco")


def _default_gl() -> None:
    """Without a display and before MuJoCo is imported, pick the headless EGL backend for its renderer (MuJoCo reads
    ``MUJOCO_GL`` once, at import). Called when an env is built, never at import of this module."""
    headless = sys.platform.startswith("linux") and not os.environ.get("DISPLAY")  # EGL is MuJoCo's on Linux only
    if "mujoco" not in sys.modules and not os.environ.get("MUJOCO_GL") and headless:
        os.environ["MUJOCO_GL"] = "egl"
    # torch imports triton lazily (an optimizer step, compile); loading triton after Mesa's EGL context exists
    # crashes the process, so load it first where it is installed (CUDA builds of torch ship it)
    try:
        import triton  # noqa: F401
    except Exception:  # not installed (CPU builds) or unusable: then nothing of it can load later either
        pass


class GLThread:
    """The one thread that owns the env's OpenGL context and does all its drawing. An EGL (or OSMesa) context is current
    in the thread that made it, while the env may be drawn from any thread: the robot loop reads its cameras from a
    worker thread of its own. :meth:`call` runs a function there and hands back its result or its exception."""

    def __init__(self):
        self._jobs: queue.Queue = queue.Queue()
        self._stopped = False
        self._thread = threading.Thread(target=self._serve, name="graspsim-mujoco-gl", daemon=True)
        self._thread.start()

    CLOSED = "the MuJoCo env is closed: its drawing thread has stopped"

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:  # stopped: a call queued behind the stop gets an error, not a wait without end
                self._stopped = True
                while True:
                    try:
                        late = self._jobs.get_nowait()
                    except queue.Empty:
                        return
                    if late is not None:
                        late[1].append((False, RuntimeError(self.CLOSED)))
                        late[2].set()
            fn, box, done = job
            try:
                box.append((True, fn()))
            except BaseException as e:  # handed back to the caller's thread
                box.append((False, e))
            done.set()
            del job, fn, box, done  # the last job's closure must not keep its env alive while this thread waits

    def call(self, fn):
        if threading.current_thread() is self._thread:
            return fn()
        if self._stopped or not self._thread.is_alive():
            raise RuntimeError(self.CLOSED)
        box: list = []
        done = threading.Event()
        self._jobs.put((fn, box, done))
        while not done.wait(0.5):  # a stop racing this call is answered by _serve; a dead thread is not
            if not self._thread.is_alive() and not done.is_set():
                raise RuntimeError(self.CLOSED)
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def stop(self) -> None:
        self._jobs.put(None)


def _quat_z(yaw: float) -> np.ndarray:
    return np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)])


SCENE_FIELDS = ("geom_contype", "geom_conaffinity", "geom_group", "geom_size", "geom_rbound", "geom_aabb", "geom_rgba",
                "geom_matid", "body_mass", "body_inertia", "body_gravcomp", "mat_rgba", "mat_texrepeat", "light_dir",
                "light_pos", "light_diffuse", "light_ambient", "light_specular", "cam_fovy")
"""The model fields a scene sets (its objects, table look, light, lens): saved per scene, written back into the shared
model before the scene is stepped or drawn."""


class _Scene:
    """One MuJoCo scene: its own data and model parameters (:data:`SCENE_FIELDS`) over a model and a renderer shared
    by every scene of the env (the arm's meshes make a model about 60 MB)."""

    def __init__(self, mujoco, m, renderer, slots: int):
        self.mj = mujoco
        self.m = m
        self.d = mujoco.MjData(m)
        self.arm_q = np.array([m.jnt_qposadr[m.joint(n).id] for n in ARM_JOINTS])
        self.arm_u = np.array([m.actuator(n).id for n in ARM_JOINTS])
        self.jaw_q = int(m.jnt_qposadr[m.joint(JAW_JOINT).id])
        self.jaw_u = int(m.actuator(JAW_JOINT).id)
        self.grip = m.body(GRIPPER_BODY).id
        self.pads = (m.geom(FIXED_PAD).id, m.geom(MOVING_PAD).id)
        self.table = m.geom("table").id
        self.cam = m.camera(CAMERA).id
        names = [m.material(i).name for i in range(m.nmat)]
        self.tex_mats = [m.material(f"table_mat{k}").id for k in range(sum(n.startswith("table_mat") for n in names))]
        self.objects = ["target"] + [f"dist{k}" for k in range(slots)]
        self.body = {n: m.body(n).id for n in self.objects}
        self.geoms = {n: [m.geom(f"{n}_{k}").id for k in SCENE_KINDS] for n in self.objects}
        self.qadr = {n: int(m.jnt_qposadr[m.body_jntadr[self.body[n]]]) for n in self.objects}
        self.vadr = {n: int(m.jnt_dofadr[m.body_jntadr[self.body[n]]]) for n in self.objects}
        self.target_geom = -1
        self.substeps = 1
        self.unstable = False  # MuJoCo reported a diverging simulation (and reset its data) in this episode
        self.renderer = renderer
        self.opt = mujoco.MjvOption()  # geom groups 0-2 drawn: the scene and the gripper's visual meshes
        self.opt.geomgroup[3] = 0
        self.params = {f: getattr(m, f).copy() for f in SCENE_FIELDS}

    def activate(self) -> None:
        """Write this scene's parameters into the shared model."""
        m = self.m
        for f, v in self.params.items():
            getattr(m, f)[...] = v

    # ------------------------------------------------------------------ building
    def _set_object(self, name: str, kind_code: int, half: np.ndarray, pos: np.ndarray, yaw: float,
                    rgba: np.ndarray, mass: float) -> int:
        """Switch the object slot ``name`` to ``kind_code`` (a State kind; 0 hides it) with half-extents ``half``
        (3,), place it and colour it; returns the active geom id (-1 when hidden)."""
        m, d = self.m, self.d
        b = self.body[name]
        active = -1
        for slot, g in enumerate(self.geoms[name]):
            on = kind_code in _KIND_SLOT and _KIND_SLOT[kind_code] == slot
            m.geom_contype[g] = m.geom_conaffinity[g] = 1 if on else 0
            m.geom_group[g] = 0 if on else 5
            if on:
                active = g
                kind = SCENE_KINDS[slot]
                if kind == "sphere":
                    m.geom_size[g] = [half[0], 0.0, 0.0]
                    rb = half[0]
                    inertia = np.full(3, 0.4 * mass * half[0] ** 2)
                elif kind == "box":
                    m.geom_size[g] = half
                    rb = float(np.linalg.norm(half))
                    sq = 4 * half ** 2
                    inertia = mass / 12 * np.array([sq[1] + sq[2], sq[0] + sq[2], sq[0] + sq[1]])
                else:
                    m.geom_size[g] = [half[0], half[2], 0.0]
                    rb = float(np.hypot(half[0], half[2]))
                    side = mass * (3 * half[0] ** 2 + 4 * half[2] ** 2) / 12
                    inertia = np.array([side, side, 0.5 * mass * half[0] ** 2])
                m.geom_rbound[g] = rb
                m.geom_aabb[g] = [0, 0, 0, rb, rb, rb]
                m.geom_rgba[g] = [*np.clip(rgba, 0, 1), 1.0]
                m.body_mass[b] = mass
                m.body_inertia[b] = inertia
        q, v = self.qadr[name], self.vadr[name]
        if active < 0:  # parked out of sight, floating, touching nothing
            m.body_gravcomp[b] = 1.0
            d.qpos[q:q + 3] = [0.0, 2.0 + b, 1.0]
        else:
            m.body_gravcomp[b] = 0.0
            d.qpos[q:q + 3] = pos
        d.qpos[q + 3:q + 7] = _quat_z(yaw)
        d.qvel[v:v + 6] = 0.0
        return active

    def build(self, p: dict, kin: So101Kinematics, q_start: np.ndarray, jaw: float, substeps: int,
              fovy: float) -> None:
        """Rebuild from one scene's parameters ``p`` (numpy, :func:`scene_params`) with the arm at ``q_start`` and the
        wrist camera's vertical field of view ``fovy`` (degrees)."""
        self.activate()
        m, d, mj = self.m, self.d, self.mj
        m.cam_fovy[self.cam] = fovy
        mj.mj_resetData(m, d)
        self.substeps = substeps
        self.unstable = False
        kind = int(p["target_kind"])
        r = float(p["sphere_radius"])
        hz = float(p["target_half_height"]) if kind == KIND_CYLINDER else r
        pos = p["sphere_pos"].astype(np.float64).copy()
        pos[2] = hz
        yaw = float(p["target_yaw"]) if kind == KIND_BOX else 0.0
        mass = TARGET_MASS["sphere"] if kind == KIND_SPHERE else TARGET_MASS["solid"]
        self.target_geom = self._set_object("target", kind, np.array([r, r, hz]), pos, yaw, p["sphere_color"], mass)
        self.rest_z = hz
        pan = kin.pan_axis
        # footprints (centre xy, bounding radius) of the bodies placed so far: rigid bodies must not start inside
        # each other (the torch simulator lets distractors overlap; contact physics would blow them apart)
        placed = [(pos[:2], r * (math.sqrt(2) if kind == KIND_BOX else 1.0))]
        for k, name in enumerate(self.objects[1:]):
            dk = int(p["dist_kind"][k]) if k < len(p["dist_kind"]) else 0
            if dk:
                xy, size = p["dist_pos"][k][:2].astype(np.float64), p["dist_size"][k].astype(np.float64)
                rad = float(np.hypot(size[0], size[1])) if dk == KIND_BOX else float(size[0])
                if (math.hypot(xy[0] - pan[0], xy[1] - pan[1]) < BASE_CLEARANCE
                        or any(np.hypot(*(xy - c)) < rad + rc for c, rc in placed)):
                    dk = 0
                else:
                    placed.append((xy, rad))
            if dk:
                size = p["dist_size"][k].astype(np.float64)
                half = np.array([size[0], size[0], size[0]]) if dk == KIND_SPHERE else size
                self._set_object(name, dk, half, p["dist_pos"][k].astype(np.float64), float(p["dist_yaw"][k]),
                                 p["dist_color"][k], DISTRACTOR_MASS)
            else:
                self._set_object(name, 0, np.zeros(3), np.zeros(3), 0.0, np.zeros(3), DISTRACTOR_MASS)
        vel = p["sphere_vel"]
        v = self.vadr["target"]
        d.qvel[v:v + 2] = vel
        # looks: table texture, tint and scale; one directional light
        if self.tex_mats:
            mat = self.tex_mats[int(p["table_tex"]) % len(self.tex_mats)]
            m.geom_matid[self.table] = mat
            m.mat_rgba[mat] = [*np.clip(p["table_tint"], 0, 1), 1.0]
            m.mat_texrepeat[mat] = [float(p["tex_scale"]), float(p["tex_scale"])]
        light = p["light_dir"].astype(np.float64)
        m.light_dir[0] = -light / max(np.linalg.norm(light), 1e-9)
        m.light_pos[0] = light
        m.light_diffuse[0] = [float(p["light_intensity"])] * 3
        m.light_ambient[0] = [float(p["ambient"])] * 3
        m.light_specular[0] = [float(p["specular"]) * 0.5] * 3
        # the arm
        d.qpos[self.arm_q] = q_start
        d.qpos[self.jaw_q] = jaw
        d.ctrl[self.arm_u] = q_start
        d.ctrl[self.jaw_u] = jaw
        self.params = {f: getattr(m, f).copy() for f in SCENE_FIELDS}
        mj.mj_forward(m, d)

    # ------------------------------------------------------------------ stepping and measuring
    def run(self, q_from: np.ndarray, q_to: np.ndarray, jaw_from: float, jaw_to: float,
            drift: np.ndarray | None) -> None:
        """One control period: servo targets interpolated from ``q_from`` to ``q_to`` and ``jaw_from`` to ``jaw_to``
        over the substeps. ``drift`` (2,) m/s: the resting, untouched target is kept moving at it."""
        self.activate()
        m, d, mj = self.m, self.d, self.mj
        n = self.substeps
        for k in range(1, n + 1):
            f = k / n
            d.ctrl[self.arm_u] = q_from + (q_to - q_from) * f
            d.ctrl[self.jaw_u] = jaw_from + (jaw_to - jaw_from) * f
            if drift is not None and k == 1:
                self._drive(drift)
            mj.mj_step(m, d)
        warn = mj.mjtWarning
        bad = [int(w) for w in (warn.mjWARN_BADQACC, warn.mjWARN_BADQVEL, warn.mjWARN_BADQPOS)]
        if any(d.warning[w].number for w in bad):  # MuJoCo reset the data: this episode's physics is void
            self.unstable = True
            for w in bad:
                d.warning[w].number = 0

    def _drive(self, drift: np.ndarray) -> None:
        q, v = self.qadr["target"], self.vadr["target"]
        if self.d.qpos[q + 2] > self.rest_z + 1e-3 or self.touching_pads().any():
            return
        self.d.qvel[v:v + 2] = drift

    def touching_pads(self) -> np.ndarray:
        """(2,) bool: the fixed and the moving pad touch the target."""
        out = np.zeros(2, bool)
        d, tg = self.d, self.target_geom
        for i in range(d.ncon):
            c = d.contact[i]
            if c.dist > CONTACT_DIST:
                continue
            g1, g2 = int(c.geom1), int(c.geom2)
            for j, pad in enumerate(self.pads):
                if (g1 == pad and g2 == tg) or (g2 == pad and g1 == tg):
                    out[j] = True
        return out

    def measure(self, kin: So101Kinematics) -> dict:
        d = self.d
        R = d.xmat[self.grip].reshape(3, 3).copy()
        grasp = d.xpos[self.grip] + R @ kin.grasp_local
        tcp = grasp - R[:, 2] * kin.geometry.tcp_below_grasp
        q = self.qadr["target"]
        quat = d.qpos[q + 3:q + 7]
        target_yaw = math.atan2(2 * (quat[0] * quat[3] + quat[1] * quat[2]), 1 - 2 * (quat[2] ** 2 + quat[3] ** 2))
        jaw = float(d.qpos[self.jaw_q])
        return {"tcp": tcp, "grasp": grasp, "rot": R, "gap": max(0.0, kin.jaw_to_gap(jaw)), "jaw": jaw,
                "q": d.qpos[self.arm_q].copy(), "sphere": d.qpos[q:q + 3].copy(), "target_yaw": target_yaw,
                "touch": self.touching_pads()}

    def fingertip_fractions(self, tcp: np.ndarray, size: int) -> np.ndarray:
        """(4,) where the grasp point and the point ``FINGERTIP_RISE`` above it appear in the wrist image, as
        fractions of its width and height (the convention of :func:`graspsim.env.fingertip_fractions`)."""
        d, m = self.d, self.m
        pos, R = d.cam_xpos[self.cam], d.cam_xmat[self.cam].reshape(3, 3)
        f = 0.5 / math.tan(math.radians(m.cam_fovy[self.cam]) / 2)  # focal length in image heights
        out = []
        for pt in (tcp, tcp + np.array([0.0, 0.0, FINGERTIP_RISE])):
            c = R.T @ (pt - pos)  # camera frame: x right, y up, z backwards
            depth = max(-c[2], 1e-6)
            out += [0.5 + f * c[0] / depth, 0.5 - f * c[1] / depth]
        return np.array(out)

    def render(self) -> tuple[np.ndarray, np.ndarray]:
        """Wrist image H,W,3 uint8 and exact target mask H,W bool (segmentation == the target geom)."""
        self.activate()
        r = self.renderer
        r.update_scene(self.d, camera=self.cam, scene_option=self.opt)
        rgb = r.render().copy()
        r.enable_segmentation_rendering()
        try:
            seg = r.render()
        finally:
            r.disable_segmentation_rendering()
        mask = (seg[..., 0] == self.target_geom) & (seg[..., 1] == int(self.mj.mjtObj.mjOBJ_GEOM))
        return rgb, mask


SCENE_KEYS = ("focal", "tcp_pos", "sphere_pos", "sphere_radius", "sphere_vel", "dist_kind", "dist_pos", "dist_size",
              "dist_yaw", "dist_color", "sphere_color", "table_tex", "table_tint", "tex_scale", "light_dir",
              "light_intensity", "ambient", "specular", "target_kind", "target_half_height", "target_yaw")


def scene_params(state: State, i: int) -> dict:
    """Numpy parameters of scene ``i`` of a :class:`graspsim.State` (the fields a MuJoCo scene needs)."""
    return {k: getattr(state, k)[i].detach().cpu().numpy() for k in SCENE_KEYS}


class MujocoGraspEnv(ContactBackend):
    """``num_envs`` MuJoCo scenes with the SO-101, with the API of :class:`graspsim.GraspEnv` (module docstring).

    ``device`` is where the returned tensors live (physics and rendering run on CPU). ``render_obs`` False skips the
    wrist images (``step`` and ``reset`` return only ``gripper``) until :meth:`observe` or :meth:`rendering` asks."""

    def __init__(self, cfg: SimConfig | None = None, num_envs: int = 1, device: str | torch.device = "cpu",
                 seed: int = 0, render_obs: bool = True):
        positive_int("", "num_envs", num_envs)
        _default_gl()
        self.mj = require_mujoco()
        self.cfg = cfg or SimConfig()
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.render_obs = render_obs
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(seed))
        self.kin = So101Kinematics(BASE_POS)
        self.below = self.kin.geometry.tcp_below_grasp
        cfg = self.cfg
        # with the so101 embodiment the scene's own lens (its field of view drawn per scene); otherwise the SO-101's
        # nominal 48.5 degrees (the floating preset's lens belongs to another camera)
        self.scene_fov = getattr(cfg, "embodiment", "floating") == "so101"
        if not self.scene_fov:
            log.info("MujocoGraspEnv: the configuration's embodiment is not so101; the arm is the SO-101 all the same")
        self.scenes: list[_Scene] = []
        self.renderer = None
        self._wide = None  # the whole-sensor renderer of sensor_view, made on first use
        H = cfg.image_size
        self.model = scene_model(cfg.randomization.max_distractors, TEX_SIZE, cfg.randomization.table_photos)
        self._gl = GLThread()
        try:
            self.renderer = self._gl.call(lambda: self.mj.Renderer(self.model, H, H))
        except Exception as e:  # mujoco.FatalError without a GL platform
            self._gl.stop()
            raise RuntimeError(GL_HINT) from e
        self.scenes = [_Scene(self.mj, self.model, self.renderer, cfg.randomization.max_distractors)
                       for _ in range(num_envs)]
        self.nominal_fovy = float(self.model.cam_fovy[self.scenes[0].cam])
        self.substeps = max(1, int(round(cfg.dt / self.model.opt.timestep)))
        self.iks = [CartesianIK(self.kin, dt=cfg.dt, max_speed=cfg.max_speed, max_yaw_rate=cfg.max_yaw_rate,
                                workspace=cfg.workspace, max_height=REACH_BAND_MAX_HEIGHT, open_gap=cfg.open_width)
                    for _ in range(num_envs)]
        # the jaw's servo target moves at finger_speed of pad gap per second: in jaw angle, through the table's slope
        self.jaw_step = self.kin.jaw_step(cfg.finger_speed, cfg.dt)
        self._rgb = np.zeros((num_envs, H, H, 3), np.uint8)
        self._mask = np.zeros((num_envs, H, H), bool)
        self._stale = np.ones(num_envs, bool)
        self._tips = np.zeros((num_envs, 4))
        self._jaw_cmd = np.zeros(num_envs)
        self._target = torch.zeros((num_envs, 3), device=self.device)
        self._cmd_vel = torch.zeros((num_envs, 3), device=self.device)
        self._yaw = torch.zeros(num_envs, device=self.device)
        self._yaw_rate = torch.zeros(num_envs, device=self.device)
        self.clipped = torch.zeros(num_envs, dtype=torch.bool, device=self.device)
        """B bool: the IK moved the scene's last target into the reach band or could not solve it."""
        self.state: State = sample_scenes(cfg, num_envs, self.generator, self.device)
        self._success_before = self.state.success
        self._build(torch.arange(num_envs))

    # ------------------------------------------------------------------ building
    def _build(self, ids: Tensor) -> None:
        tcp = self.state.tcp_pos.clone()
        sphere = self.state.sphere_pos.clone()
        width = self.state.finger_width.clone()
        yaw0 = self.state.wrist_yaw.clone()
        H = self.cfg.image_size
        for i in ids.tolist():
            sc, ik = self.scenes[i], self.iks[i]
            p = scene_params(self.state, i)
            start = p["tcp_pos"].astype(np.float64) + np.array([0.0, 0.0, self.below])
            start = self.kin.clamp_to_band(start, START_MARGIN)
            w = self.cfg.workspace
            start[:2] = np.clip(start[:2], -w, w)
            res = self.kin.solve(start, 0.0, self.kin.home)
            if not res.ok:
                raise RuntimeError(f"MujocoGraspEnv: no straight-down start pose at {start.round(4).tolist()} "
                                   f"(pos_err {res.pos_err:.4f} m)")
            jaw = ik.open_jaw
            # the embodiment's lens, drawn per scene (square image: vertical = horizontal fov), or the nominal one
            fovy = math.degrees(2 * math.atan(H / 2 / float(p["focal"]))) if self.scene_fov else self.nominal_fovy
            sc.build(p, self.kin, res.q, jaw, self.substeps, fovy)
            ik.reset(res.q, jaw)
            self._jaw_cmd[i] = jaw
            mres = sc.measure(self.kin)
            tcp[i] = torch.as_tensor(mres["tcp"], dtype=torch.float32)
            sphere[i] = torch.as_tensor(mres["sphere"], dtype=torch.float32)
            width[i] = float(mres["gap"])
            yaw0[i] = 0.0
            self._tips[i] = sc.fingertip_fractions(mres["tcp"], H)
            self._stale[i] = True
        dev = ids.to(self.device)
        self._target[dev] = tcp[dev].to(self.device)
        self._cmd_vel[dev] = 0.0
        self._yaw[dev] = 0.0
        self._yaw_rate[dev] = 0.0
        self.clipped[dev] = False
        start_xy = self.state.start_xy.clone()
        start_xy[dev] = sphere[dev, :2].to(self.device)
        self.state = self.state.replace(tcp_pos=tcp.to(self.device), sphere_pos=sphere.to(self.device),
                                        finger_width=width.to(self.device), wrist_yaw=yaw0.to(self.device),
                                        start_xy=start_xy)
        if self.render_obs:
            self._render_stale()

    # ------------------------------------------------------------------ core API
    def step(self, action: Tensor) -> tuple[dict[str, Tensor], Tensor, Tensor, dict[str, Tensor]]:
        """Apply ``action`` (B,4, or B,5 with the wrist's yaw rate) to every scene; returns (obs, reward B float32,
        done B bool, info) as :meth:`graspsim.GraspEnv.step`. Raises ValueError on a wrong shape, NaN/inf, or a
        4-D action for a cube."""
        action = validate_action(action, self.num_envs, self.state.target_kind).to(self.device)
        action, wz = split_action(action)
        s, cfg = self.state, self.cfg
        target, close = self._command_targets(action)  # anti wind-up as in pybullet (ContactBackend)
        if wz is None:
            wz = torch.zeros(self.num_envs, device=self.device)
        ws = s.replace(wrist_yaw=self._yaw, wrist_rate=self._yaw_rate)
        self._yaw, self._yaw_rate = wrist_command(ws, wz, cfg)
        self.state = self.state.replace(prev_wz=wz)
        drift = self._drift()
        t_np = target.cpu().numpy().astype(np.float64) + np.array([0.0, 0.0, self.below])  # TCP -> grasp point
        y_np = self._yaw.cpu().numpy().astype(np.float64)
        c_np = close.cpu().numpy()
        d_np = drift.cpu().numpy().astype(np.float64)
        meas = []
        clipped = np.zeros(self.num_envs, bool)
        for i, (sc, ik) in enumerate(zip(self.scenes, self.iks)):
            q_from, jaw_from = ik.q.copy(), self._jaw_cmd[i]
            # keep the pads off the table over the jaw's travel this period (from where it is, one step further)
            jaw_to, span = ik.ramp_jaw(jaw_from, bool(c_np[i]), float(sc.d.qpos[sc.jaw_q]), self.jaw_step)
            jt = ik.track(t_np[i], float(y_np[i]), bool(c_np[i]), jaw_span=span)
            clipped[i] = jt.clipped
            self._jaw_cmd[i] = jaw_to
            meas.append(self._run_scene(i, q_from, jt.q, jaw_from, jaw_to, d_np[i]))
        self.clipped = torch.from_numpy(clipped).to(self.device)
        return self._finish_step(meas, action, close)

    def drive_joints(self, q: np.ndarray, jaw: np.ndarray, close: np.ndarray
                     ) -> tuple[dict[str, Tensor], Tensor, Tensor, dict[str, Tensor]]:
        """One control period with the servo targets given directly, as a servo bus's goal-position write gives them:
        ``q`` B,5 arm joint targets (rad, the model's joints), ``jaw`` B jaw targets (rad), ``close`` B bool (whether
        the gripper is being closed: the grasp bookkeeping's close command). The command layer and the IK are skipped;
        the servos track the targets from the last ones, interpolated over the period, as in :meth:`step`, and the
        episode bookkeeping (held, success, failures, steps) is the same. Returns what :meth:`step` returns. A later
        :meth:`step` continues from these targets."""
        q = np.asarray(q, np.float64).reshape(self.num_envs, len(ARM_JOINTS))
        jaw = np.asarray(jaw, np.float64).reshape(self.num_envs)
        close_np = np.asarray(close, bool).reshape(self.num_envs)
        if not (np.isfinite(q).all() and np.isfinite(jaw).all()):
            raise ValueError(f"MujocoGraspEnv.drive_joints: joint targets must be finite; got {q.tolist()}, "
                             f"{jaw.tolist()}")
        d_np = self._drift().cpu().numpy().astype(np.float64)
        meas = []
        for i, (sc, ik) in enumerate(zip(self.scenes, self.iks)):
            meas.append(self._run_scene(i, ik.q.copy(), q[i], float(self._jaw_cmd[i]), float(jaw[i]), d_np[i]))
            ik.reset(np.clip(q[i], self.kin.lower, self.kin.upper), float(jaw[i]))
            self._jaw_cmd[i] = float(jaw[i])
        self.clipped = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        close_t = torch.from_numpy(close_np).to(self.device)
        out = self._finish_step(meas, self.state.prev_action, close_t)
        # the command layer continues from where the servos got (a later step())
        self._target = self.state.tcp_pos.clone()
        self._cmd_vel = torch.zeros_like(self._cmd_vel)
        self._yaw, self._yaw_rate = self.state.wrist_yaw.clone(), torch.zeros_like(self._yaw_rate)
        return out

    def _run_scene(self, i: int, q_from: np.ndarray, q_to: np.ndarray, jaw_from: float, jaw_to: float,
                   drift: np.ndarray) -> dict:
        """Scene ``i``'s physics over one control period towards the servo targets; returns its measurements."""
        sc = self.scenes[i]
        moving = bool(np.any(drift != 0))
        was = sc.unstable
        sc.run(q_from, q_to, jaw_from, jaw_to, drift if moving else None)
        if sc.unstable and not was:
            log.warning("MujocoGraspEnv: scene %d diverged (MuJoCo reset its data) at step %d; its episode ends as "
                        "'diverged'", i, int(self.state.steps[i]) + 1)
        mres = sc.measure(self.kin)
        self._tips[i] = sc.fingertip_fractions(mres["tcp"], self.cfg.image_size)
        return mres

    def _finish_step(self, meas: list[dict], action: Tensor, close: Tensor
                     ) -> tuple[dict[str, Tensor], Tensor, Tensor, dict[str, Tensor]]:
        """The bookkeeping and the return value of a control period whose measurements are ``meas``."""
        self._stale[:] = True
        self._update_state(meas, action, close)
        if self.render_obs:
            self._render_stale()
        s = self.state
        reward = (s.success & ~self._success_before).float()
        void = self._diverged() & ~s.success  # a grasp made before the divergence stands
        failure = torch.where(void, FAILURE_NAMES.index("diverged"), failure_cause(s))
        info = {"success": s.success, "timeout": s.done & ~s.success & ~void, "failure": failure}
        return self._obs(), reward, s.done, info

    def _diverged(self) -> Tensor:
        """B bool: MuJoCo's physics diverged in the scene's episode (and reset its data, so what follows is void)."""
        return torch.as_tensor([sc.unstable for sc in self.scenes], dtype=torch.bool, device=self.device)

    def _update_state(self, meas: list[dict], action: Tensor, close: Tensor) -> None:
        s, cfg, dev = self.state, self.cfg, self.device
        self._success_before = s.success
        f = lambda k: torch.as_tensor(np.stack([m[k] for m in meas]), dtype=torch.float32, device=dev)  # noqa: E731
        tcp, grasp, sphere, width, rot = f("tcp"), f("grasp"), f("sphere"), f("gap"), f("rot")
        touch = torch.as_tensor(np.stack([m["touch"] for m in meas]), device=dev)
        target_yaw = f("target_yaw")
        wrist = torch.atan2(rot[:, 1, 1], rot[:, 0, 1])
        r = s.sphere_radius
        hz = torch.where(s.target_kind == KIND_CYLINDER, s.target_half_height, r)
        # the target in the gripper frame, relative to the grasp point: x along the closing axis (fixed pad face at
        # FIXED_FACE, moving pad face at FIXED_FACE + gap), y across the pads, z up the roll axis
        rel = torch.einsum("bji,bj->bi", rot, sphere - grasp)
        geo = self.kin.geometry
        fixed_face = geo.fixed_pad_face[0] - geo.grasp_point[0]
        pad_half_y = float(self.scenes[0].m.geom_size[self.scenes[0].pads[0]][1])
        pad_half_z = float(self.scenes[0].m.geom_size[self.scenes[0].pads[0]][2])
        between = (
            (rel[:, 0] >= fixed_face - HOLD_SLACK)
            & (rel[:, 0] <= fixed_face + width + HOLD_SLACK)
            & (rel[:, 1].abs() <= pad_half_y + HOLD_SLACK)
            & (rel[:, 2].abs() <= pad_half_z + hz)
            & (width >= 2 * r - HOLD_SLACK)
        )
        held, pushed, dropped, missed, steps, success = grasp_events(s, sphere, touch, between, close, width, hz,
                                                                     cfg.lift_height)
        self.state = s.replace(
            wrist_yaw=wrist, wrist_rate=(wrist - s.wrist_yaw) / cfg.dt, target_yaw=target_yaw,
            tcp_pos=tcp, tcp_vel=(tcp - s.tcp_pos) / cfg.dt, finger_width=width, close_cmd=close,
            prev_action=action, sphere_pos=sphere, held=held,
            held_offset=torch.where(held[:, None], sphere - tcp, s.held_offset), steps=steps, success=success,
            done=s.done | success | (steps >= cfg.max_steps), pushed=pushed, dropped=dropped, missed=missed,
        )
        # a diverged scene was reset by MuJoCo (arm and target jump to the model's zero pose): its episode ends now, and
        # nothing measured after the jump may count as a grasp
        bad = self._diverged() & ~s.success
        if bool(bad.any()):
            self.state = self.state.replace(success=self.state.success & ~bad, done=self.state.done | bad)

    # ------------------------------------------------------------------ observations
    def _gripper(self) -> Tensor:
        g = gripper_obs(self.state, self.cfg).clone()
        if self.cfg.wrist and self.cfg.fingertip_pixels:
            g[:, 5:9] = torch.as_tensor(fingertip_senses(self._tips), dtype=torch.float32, device=self.device)
        return g

    def _obs(self) -> dict[str, Tensor]:
        if not self.render_obs:
            return {GRIPPER: self._gripper()}
        return self.observe()

    def _render_stale(self) -> None:
        def draw() -> None:
            for i in np.flatnonzero(self._stale).tolist():
                self._stale[i] = False  # before drawing: a step meanwhile marks it stale again
                self._rgb[i], self._mask[i] = self.scenes[i].render()

        self._gl.call(draw)

    def observe(self) -> dict[str, Tensor]:
        """Policy observation of the current state: rgb B,3,H,W uint8 (the MuJoCo wrist image + the scene's blur
        and noise), mask B,H,W bool (segmentation == the target geom), gripper B,G float32."""
        if self._stale.any():
            self._render_stale()
        color = torch.from_numpy(self._rgb).to(self.device).permute(0, 3, 1, 2).float() / 255.0
        color = postprocess(color, self.state.blur, self.state.image_noise, keys=(self.state.key, self.state.steps))
        rgb = (color * 255.0 + 0.5).to(torch.uint8)
        return {RGB: rgb, MASK: torch.from_numpy(self._mask.copy()).to(self.device), GRIPPER: self._gripper()}

    def sensor_view(self, env_id: int = 0, post: bool = True) -> np.ndarray:
        """Scene ``env_id``'s wrist camera over its whole sensor: H,W,3 uint8 with H the observation's size and
        W = ``round(H * aspect)`` (the SO-101 camera's 16:9, ``graspsim.embodiment.SO101.sensor_aspect``), rounded to
        keep W - H even. MuJoCo's field of view is the vertical one, so the observation's square image is this frame's
        centred square: what a real camera gives before ``deploy --frame-crop square`` keeps that square. ``post``:
        with the scene's blur and noise, as :meth:`observe` adds them."""
        from graspsim.embodiment import SO101

        H = self.cfg.image_size
        W = H + 2 * round(H * (SO101.sensor_aspect - 1) / 2)
        sc = self.scenes[env_id]

        def draw() -> np.ndarray:
            if self._wide is None:
                self._wide = self.mj.Renderer(self.model, H, W)
            sc.activate()
            self._wide.update_scene(sc.d, camera=sc.cam, scene_option=sc.opt)
            return self._wide.render().copy()

        rgb = self._gl.call(draw)
        if not post:
            return rgb
        color = torch.from_numpy(rgb).permute(2, 0, 1)[None].float() / 255.0
        i = slice(env_id, env_id + 1)
        color = postprocess(color, self.state.blur[i].cpu(), self.state.image_noise[i].cpu(),
                            keys=(self.state.key[i].cpu(), self.state.steps[i].cpu()))
        return (color[0] * 255.0 + 0.5).to(torch.uint8).permute(1, 2, 0).numpy()

    def measured_fingertip(self) -> Tensor:
        """B,4: where each scene's grasp point and the point ``FINGERTIP_RISE`` above it appear in its wrist image
        (fractions, the convention of :func:`graspsim.env.fingertip_fractions`), measured with MuJoCo's own camera
        after the last reset or step: what the policy's fingertip senses read here, and what a calibrated arm
        reports (the simulator's camera model of the same scene differs by a few pixels)."""
        return torch.as_tensor(self._tips.copy(), dtype=torch.float32, device=self.device)

    def privileged(self) -> dict[str, Tensor]:
        """True poses measured in MuJoCo, same keys as :func:`graspsim.privileged` (expert only)."""
        return privileged(self.state)

    def render(self, env_id: int = 0, width: int = 320, height: int = 240) -> np.ndarray:
        """A look at scene ``env_id`` from beside the table (height,width,3 uint8, every arm mesh drawn)."""
        mj = self.mj
        sc = self.scenes[env_id]

        def draw() -> np.ndarray:
            sc.activate()
            r = mj.Renderer(sc.m, height, width)
            try:
                cam = mj.MjvCamera()
                cam.lookat[:] = [-0.05, 0.0, 0.05]
                cam.distance, cam.azimuth, cam.elevation = 0.6, 135.0, -25.0
                opt = mj.MjvOption()
                opt.geomgroup[4] = 1
                r.update_scene(sc.d, camera=cam, scene_option=opt)
                return r.render().copy()
            finally:
                r.close()

        return self._gl.call(draw)

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Release the renderer (idempotent)."""
        r = getattr(self, "renderer", None)
        wide = getattr(self, "_wide", None)
        gl = getattr(self, "_gl", None)
        self.renderer = self._wide = None
        self.scenes = []
        for x in (r, wide):
            if x is not None:
                try:
                    gl.call(x.close)
                except Exception:  # closing must not raise during interpreter shutdown
                    pass
        if gl is not None:
            gl.stop()

    def __enter__(self) -> "MujocoGraspEnv":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
