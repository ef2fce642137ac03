"""One grasping scene in one pybullet client: Franka Panda, textured table, target (sphere, cube or upright
cylinder), distractors.

This module is numpy-only (no torch) so worker processes stay light. :class:`BulletScene` is driven by
:class:`graspsim.bullet.env.BulletGraspEnv`, which samples the scene parameters with
``graspsim.randomization.sample_scenes`` and integrates the velocity commands; a scene receives a
fingertip-centre *target* per control step and a close/open command, and reports measurements.

Frames and units are those of the torch simulator (``graspsim.state``): table top z = 0, x forward,
y left, metres. The robot base stands on the table behind the workspace at ``BASE_POS``.

Physics choices (documented, tuned for the 1.25-1.5 cm sphere):

* 240 Hz physics (``PHYSICS_HZ``), ``control_hz`` control; each control step runs
  ``PHYSICS_HZ / control_hz`` substeps. The arm follows the target through
  ``calculateInverseKinematics`` (hand pointing down, fingers closing along world y) recomputed
  ``IK_CHUNKS`` times per control step along the straight segment to the new target, with joint
  position control (Panda effort limits 87 / 12 N m).
* The two fingers are position-controlled towards 0 (close) or ``open_width/2`` (open) at
  ``finger_speed/2`` m/s each with ``FINGER_FORCE`` N, and coupled by a gear constraint (the real
  Panda gripper is mechanically coupled).
* The sphere is a ``SPHERE_MASS`` kg rigid ball. Friction: pads ``FINGER_FRICTION``, sphere
  ``SPHERE_FRICTION`` (lateral), rolling ``SPHERE_ROLLING`` and spinning ``SPHERE_SPINNING`` so a free
  sphere does not roll away on its own; table ``TABLE_FRICTION``. Pad contacts are stiff
  (``FINGER_CONTACT_STIFFNESS`` 1e6 N/m, damping 1e3) instead of the Panda URDF's compliant 3e4 N/m,
  under which the squeeze drove the small sphere ~9 mm into one finger; now penetration stays near
  1 mm and the coupled fingers close symmetrically on it. A grasp holds only through friction at the
  two pad contacts: no constraint attaches the sphere to the hand. pybullet multiplies the two friction coefficients (pad-sphere 0.8), so
  holding the 5 g sphere needs only ~0.03 N of squeeze: 20 N leaves a wide margin against the lift
  acceleration, as a real Panda gripper (70 N continuous) would.
* Panda geometry differs from the torch simulator's box fingers: pads 2.1 cm wide (vs
  ``pad_width`` 1.8 cm), fingers 2.6 cm thick and 5.4 cm long (vs 0.8 and 4.5 cm). The fingertip
  centre (TCP) is the midpoint of the pad tips, ``HAND_TO_TIP`` below the hand frame. The reported
  finger width is the gap between the pad surfaces, which sit ``PAD_INSET`` inside the joint positions.
* Distractors are light (``DISTRACTOR_MASS``) dynamic bodies, so the fingers can shove them.
* Cubes and upright cylinders (``target_kind``) are real rigid bodies (box and cylinder collision shapes,
  ``SOLID_MASS`` kg, lateral friction ``SPHERE_FRICTION``), held only by pad friction like the sphere.
  The wrist: the hand's orientation target is the downward pose turned about world z by the wrist angle,
  which the IK realises mostly with the Panda's last joint; the camera follows the measured hand.

Rendering: TinyRenderer (``ER_TINY_RENDERER``) with the segmentation buffer, so the target mask is
exactly ``seg == sphere body id``. The camera pose follows the *measured* hand pose: position
``tcp + R cam_offset`` and axes ``R cam_rot`` where ``R`` is the hand rotation relative to its nominal
downward orientation. Only the fingers of the arm keep visual geometry (the camera sits where the
Panda hand body is, as a real wrist camera would be mounted beside it, and the rest of the arm is
behind the camera); collisions use the full arm. The projection matrix is shifted by half a pixel so
pixels sample ray centres like the torch ray caster (large-sphere mask IoU between the two renderers
~0.92); the tessellated pybullet sphere still covers ~8% fewer pixels than the analytic one.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from pathlib import Path

import numpy as np
import pybullet as pb
import pybullet_data

from ..fileio import atomic_write_bytes, replace_atomically

PHYSICS_HZ = 240.0
IK_CHUNKS = 4
BASE_POS = (-0.55, 0.0, 0.0)
ARM_JOINTS = tuple(range(7))
HAND_LINK = 8
FINGER_JOINTS = (9, 10)
# distance from the panda_hand frame origin to the fingertip plane, along the hand z axis: finger joint
# origin 0.0584 + finger mesh length 0.0538 (franka_panda/meshes/collision/finger.obj) + the ~1 mm by which
# pybullet's collision hull of the finger extends past the mesh (measured by probing, like PAD_INSET)
HAND_TO_TIP = 0.0584 + 0.0538 + 0.0009
ARM_FORCES = (87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0)
ARM_LOWER = (-2.9671, -1.8326, -2.9671, -3.1416, -2.9671, -0.0873, -2.9671)
ARM_UPPER = (2.9671, 1.8326, 2.9671, 0.0, 2.9671, 3.8223, 2.9671)
ARM_REST = (0.0, 0.2, 0.0, -2.2, 0.0, 2.4, math.pi / 4)
FINGER_FORCE = 20.0
FINGER_FRICTION = 1.0
# stiff pad contacts: with the URDF's compliant 3e4 N/m the 20 N squeeze pushed the sphere ~9 mm into one
# finger (the pads closed past each other around it); 1e6 N/m keeps penetration at about 1 mm
FINGER_CONTACT_STIFFNESS = 1e6
FINGER_CONTACT_DAMPING = 1e3
# the pad surface lies this far inside the finger joint position (measured by probing the collision hull)
PAD_INSET = 0.0011
SPHERE_MASS = 0.005
SPHERE_FRICTION = 0.8
SPHERE_ROLLING = 0.002
SPHERE_SPINNING = 0.002
TABLE_FRICTION = 0.5
DISTRACTOR_MASS = 0.05
TABLE_HALF = 0.6
CAM_NEAR, CAM_FAR = 0.01, 2.0
PIXEL_SHIFT = 1.0  # half a pixel in normalised device coordinates (2 / size per pixel)
CONTACT_DIST = 1e-3  # a pad touches the sphere when their distance is below this (m)
SOLID_MASS = 0.02  # cube and cylinder targets (kg)
KIND_CUBE, KIND_CYL, KIND_SPHERE_CODE = 1, 2, 3  # graspsim.state.KIND_BOX, KIND_CYLINDER, KIND_SPHERE (numpy-only module)

_DOWN = pb.getQuaternionFromEuler([math.pi, 0.0, 0.0])  # hand z -> world -z, finger axis along world y
_DOWN_R = np.array(pb.getMatrixFromQuaternion(_DOWN)).reshape(3, 3)


def hand_orientation(yaw: float | None) -> tuple:
    """Quaternion of the downward hand turned about world z by ``yaw`` (rad); ``_DOWN`` itself for None or 0."""
    if not yaw:
        return _DOWN
    return pb.getQuaternionFromEuler([math.pi, 0.0, float(yaw)])  # Rz(yaw) Rx(pi)


def _cache_dir() -> Path:
    d = Path(tempfile.gettempdir()) / f"graspsim_bullet_{os.getuid() if hasattr(os, 'getuid') else 0}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def robot_urdf() -> Path:
    """A copy of pybullet_data's ``franka_panda/panda.urdf`` with absolute mesh paths and visual geometry
    kept only on the fingers (see module docstring). Written once to a cache folder, atomically."""
    src = Path(pybullet_data.getDataPath()) / "franka_panda" / "panda.urdf"
    if not src.is_file():
        raise FileNotFoundError(f"pybullet_data has no Franka Panda model at {src}")
    text = src.read_text()
    mesh_dir = (src.parent / "meshes").as_posix()
    text = text.replace("package://meshes", mesh_dir)

    def strip_visuals(m: re.Match) -> str:
        block = m.group(0)
        name = re.search(r'name="([^"]+)"', block).group(1)
        if "finger" in name:
            return block
        # pybullet draws the collision mesh of a link without visuals, so give it a sub-pixel dot instead
        dot = '<visual><geometry><sphere radius="0.00001"/></geometry></visual>'
        return re.sub(r"<visual>.*?</visual>", "", block, flags=re.S).replace("</link>", dot + "</link>")

    text = re.sub(r"<link\b.*?</link>", strip_visuals, text, flags=re.S)
    out = _cache_dir() / "panda_fingers_visual.urdf"
    if not out.exists() or out.read_text() != text:
        atomic_write_bytes(out, text.encode())
    return out


def texture_files(size: int = 128, photos: str | None = None) -> list[Path]:
    """PNG files of the table texture bank (``graspsim.textures.TEXTURE_NAMES`` order; with ``photos``, a folder, its
    photos in name order), written once into the cache folder."""
    import hashlib

    from PIL import Image

    from ..textures import TEXTURE_NAMES, _bank_numpy

    bank = (np.clip(_bank_numpy(size, photos), 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    if photos is None:
        names = list(TEXTURE_NAMES)
    else:  # named by the pixels themselves: other photos never reuse a file of the cache
        names = [f"photo{hashlib.sha256(img.tobytes()).hexdigest()[:16]}" for img in bank]
    paths = []
    for name, img in zip(names, bank):
        path = _cache_dir() / f"table_{name}_{size}.png"
        if not path.exists():
            with replace_atomically(path) as tmp:
                Image.fromarray(img).save(tmp, format="PNG")
        paths.append(path)
    return paths


def view_matrix(eye: np.ndarray, rot: np.ndarray) -> list[float]:
    """OpenGL view matrix (column-major, 16 floats) of a camera at ``eye`` with axes ``rot`` (3,3; columns
    right, down, forward in the world frame, the convention of ``State.cam_rot``)."""
    axes = np.stack([rot[:, 0], -rot[:, 1], -rot[:, 2]], 1)  # OpenGL camera: x right, y up, z backward
    m = np.eye(4)
    m[:3, :3] = axes.T
    m[:3, 3] = -axes.T @ eye
    return m.T.flatten().tolist()


def projection_matrix(focal: float, size: int) -> list[float]:
    """Pinhole projection for a square ``size`` image with focal length ``focal`` (pixels)."""
    fov_deg = math.degrees(2.0 * math.atan(size / 2.0 / focal))
    m = list(pb.computeProjectionMatrixFOV(fov_deg, 1.0, CAM_NEAR, CAM_FAR))
    # TinyRenderer samples pixels at their corners; shift the principal point by half a pixel so that
    # pixel (u, v) sees the ray through its centre, as the torch ray caster does
    m[8] += PIXEL_SHIFT / size
    m[9] += PIXEL_SHIFT / size
    return m


class BulletScene:
    """One scene in its own pybullet DIRECT client.

    ``cfg`` is a :class:`graspsim.SimConfig`. Call :meth:`reset` with one scene's parameters (the
    numpy dict of :func:`scene_params`), then :meth:`step` once per control step.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        self.client = pb.connect(pb.DIRECT)
        c = self.client
        self.substeps = max(1, int(round(PHYSICS_HZ / cfg.control_hz)))
        pb.setPhysicsEngineParameter(fixedTimeStep=1.0 / PHYSICS_HZ, numSolverIterations=50, physicsClientId=c)
        pb.setGravity(0, 0, -9.81, physicsClientId=c)
        self.robot = pb.loadURDF(str(robot_urdf()), BASE_POS, useFixedBase=True, physicsClientId=c,
                                 flags=pb.URDF_USE_SELF_COLLISION_EXCLUDE_PARENT)
        for j in FINGER_JOINTS:
            pb.changeDynamics(self.robot, j, lateralFriction=FINGER_FRICTION, contactStiffness=FINGER_CONTACT_STIFFNESS,
                              contactDamping=FINGER_CONTACT_DAMPING, physicsClientId=c)
        gear = pb.createConstraint(self.robot, FINGER_JOINTS[0], self.robot, FINGER_JOINTS[1], pb.JOINT_GEAR,
                                   [1, 0, 0], [0, 0, 0], [0, 0, 0], physicsClientId=c)
        pb.changeConstraint(gear, gearRatio=-1, erp=0.1, maxForce=50, physicsClientId=c)
        # pybullet enables velocity motors on every joint by default: switch them off before our control
        for j in range(pb.getNumJoints(self.robot, physicsClientId=c)):
            pb.setJointMotorControl2(self.robot, j, pb.VELOCITY_CONTROL, force=0, physicsClientId=c)
        self.textures = [pb.loadTexture(str(p), physicsClientId=c)
                         for p in texture_files(photos=cfg.randomization.table_photos)]
        self.table = -1
        self.sphere = -1
        self.distractors: list[int] = []
        self.gap_target = cfg.open_width
        self.target = np.zeros(3)
        self.close = False
        self.p: dict | None = None

    # ------------------------------------------------------------------ geometry helpers
    def hand_pose(self) -> tuple[np.ndarray, np.ndarray]:
        st = pb.getLinkState(self.robot, HAND_LINK, computeForwardKinematics=True, physicsClientId=self.client)
        return np.asarray(st[4]), np.array(pb.getMatrixFromQuaternion(st[5])).reshape(3, 3)

    def tcp(self) -> tuple[np.ndarray, np.ndarray]:
        """Fingertip centre (3,) and the hand rotation relative to its nominal pose (3,3)."""
        pos, rot = self.hand_pose()
        return pos + rot[:, 2] * HAND_TO_TIP, rot @ _DOWN_R.T

    def finger_gap(self) -> float:
        """Gap between the two pad surfaces (m), >= 0."""
        a, b = pb.getJointStates(self.robot, FINGER_JOINTS, physicsClientId=self.client)
        return max(0.0, float(a[0] + b[0]) - 2 * PAD_INSET)

    def _ik(self, tcp_target: np.ndarray, orn: tuple = _DOWN) -> list[float]:
        hand = np.asarray(tcp_target, dtype=np.float64) + np.array([0.0, 0.0, HAND_TO_TIP])
        q = pb.calculateInverseKinematics(
            self.robot, HAND_LINK, hand.tolist(), orn,
            lowerLimits=list(ARM_LOWER) + [0.0, 0.0], upperLimits=list(ARM_UPPER) + [0.04, 0.04],
            jointRanges=[u - l for l, u in zip(ARM_LOWER, ARM_UPPER)] + [0.04, 0.04],
            restPoses=list(ARM_REST) + [0.02, 0.02], maxNumIterations=30, residualThreshold=1e-5,
            physicsClientId=self.client,
        )
        return list(q[:7])

    # ------------------------------------------------------------------ scene building
    def _clear(self) -> None:
        for b in [self.table, self.sphere, *self.distractors]:
            if b >= 0:
                pb.removeBody(b, physicsClientId=self.client)
        self.table, self.sphere, self.distractors = -1, -1, []

    def _build_table(self, p: dict) -> None:
        c, h = self.client, TABLE_HALF
        # textured quad: u, v follow the torch renderer's texture lookup (repeats per metre + offset)
        xs = np.array([-h, h, h, -h]) + 0.0
        ys = np.array([-h, -h, h, h])
        scale, off = float(p["tex_scale"]), p["tex_offset"]
        verts = [[float(x), float(y), 0.0] for x, y in zip(xs, ys)]
        uvs = [[float(x * scale + off[0]), float(y * scale + off[1])] for x, y in zip(xs, ys)]
        tint = np.clip(p["table_tint"], 0.0, 1.0)
        vis = pb.createVisualShape(pb.GEOM_MESH, vertices=verts, indices=[0, 1, 2, 0, 2, 3], uvs=uvs,
                                   normals=[[0, 0, 1]] * 4, rgbaColor=[*tint.tolist(), 1.0], physicsClientId=c)
        col = pb.createCollisionShape(pb.GEOM_BOX, halfExtents=[h, h, 0.01], collisionFramePosition=[0, 0, -0.01],
                                      physicsClientId=c)
        self.table = pb.createMultiBody(0, col, vis, [0, 0, 0], physicsClientId=c)
        pb.changeVisualShape(self.table, -1, textureUniqueId=self.textures[int(p["table_tex"])], physicsClientId=c)
        pb.changeDynamics(self.table, -1, lateralFriction=TABLE_FRICTION, physicsClientId=c)

    def _build_objects(self, p: dict) -> None:
        c = self.client
        r = float(p["sphere_radius"])
        kind = int(p.get("target_kind", 3))
        rgba = [*p["sphere_color"].tolist(), 1.0]
        if kind == KIND_CUBE:
            col = pb.createCollisionShape(pb.GEOM_BOX, halfExtents=[r, r, r], physicsClientId=c)
            vis = pb.createVisualShape(pb.GEOM_BOX, halfExtents=[r, r, r], rgbaColor=rgba, specularColor=[1, 1, 1],
                                       physicsClientId=c)
            self.rest_z, mass = r, SOLID_MASS
        elif kind == KIND_CYL:
            hz = float(p["target_half_height"])
            col = pb.createCollisionShape(pb.GEOM_CYLINDER, radius=r, height=2 * hz, physicsClientId=c)
            vis = pb.createVisualShape(pb.GEOM_CYLINDER, radius=r, length=2 * hz, rgbaColor=rgba,
                                       specularColor=[1, 1, 1], physicsClientId=c)
            self.rest_z, mass = hz, SOLID_MASS
        else:
            col = pb.createCollisionShape(pb.GEOM_SPHERE, radius=r, physicsClientId=c)
            vis = pb.createVisualShape(pb.GEOM_SPHERE, radius=r, rgbaColor=rgba, specularColor=[1, 1, 1],
                                       physicsClientId=c)
            self.rest_z, mass = r, SPHERE_MASS
        pos = p["sphere_pos"].astype(np.float64).copy()
        pos[2] = self.rest_z
        if kind == KIND_SPHERE_CODE:
            self.sphere = pb.createMultiBody(mass, col, vis, pos.tolist(), physicsClientId=c)
        else:
            orn = pb.getQuaternionFromEuler([0, 0, float(p["target_yaw"])])
            self.sphere = pb.createMultiBody(mass, col, vis, pos.tolist(), orn, physicsClientId=c)
        pb.changeDynamics(self.sphere, -1, lateralFriction=SPHERE_FRICTION, rollingFriction=SPHERE_ROLLING,
                          spinningFriction=SPHERE_SPINNING, physicsClientId=c)
        vel = p["sphere_vel"]
        if np.any(vel != 0):
            pb.resetBaseVelocity(self.sphere, [float(vel[0]), float(vel[1]), 0.0], physicsClientId=c)
        for kind, dpos, size, yaw, color in zip(p["dist_kind"], p["dist_pos"], p["dist_size"], p["dist_yaw"],
                                                p["dist_color"]):
            if kind == 0:
                continue
            rgba = [*np.clip(color, 0, 1).tolist(), 1.0]
            if kind == 1:  # box
                col = pb.createCollisionShape(pb.GEOM_BOX, halfExtents=size.tolist(), physicsClientId=c)
                vis = pb.createVisualShape(pb.GEOM_BOX, halfExtents=size.tolist(), rgbaColor=rgba, physicsClientId=c)
            elif kind == 2:  # vertical cylinder (r, r, half height)
                col = pb.createCollisionShape(pb.GEOM_CYLINDER, radius=float(size[0]), height=2 * float(size[2]),
                                              physicsClientId=c)
                vis = pb.createVisualShape(pb.GEOM_CYLINDER, radius=float(size[0]), length=2 * float(size[2]),
                                           rgbaColor=rgba, physicsClientId=c)
            else:  # sphere
                col = pb.createCollisionShape(pb.GEOM_SPHERE, radius=float(size[0]), physicsClientId=c)
                vis = pb.createVisualShape(pb.GEOM_SPHERE, radius=float(size[0]), rgbaColor=rgba, physicsClientId=c)
            orn = pb.getQuaternionFromEuler([0, 0, float(yaw)])
            body = pb.createMultiBody(DISTRACTOR_MASS, col, vis, dpos.tolist(), orn, physicsClientId=c)
            pb.changeDynamics(body, -1, rollingFriction=0.01, spinningFriction=0.01, physicsClientId=c)
            self.distractors.append(body)

    def reset(self, p: dict) -> dict:
        """Rebuild the scene from one scene's parameters ``p`` (see :func:`scene_params`); returns
        :meth:`measure` output. The arm is placed (joint reset) so the fingertips are at ``p['tcp_pos']``."""
        c = self.client
        self.p = p
        self._clear()
        self._build_table(p)
        self._build_objects(p)
        for finger in FINGER_JOINTS:  # a finger link has the index of its joint
            pb.changeVisualShape(self.robot, finger, rgbaColor=[*p["finger_color"].tolist(), 1.0], physicsClientId=c)
        target = p["tcp_pos"].astype(np.float64)
        for j, q in zip(ARM_JOINTS, ARM_REST):
            pb.resetJointState(self.robot, j, q, physicsClientId=c)
        for _ in range(4):  # a few IK passes from the rest pose converge to the start pose
            q = self._ik(target)
            for j, qj in zip(ARM_JOINTS, q):
                pb.resetJointState(self.robot, j, qj, physicsClientId=c)
        for j in FINGER_JOINTS:
            pb.resetJointState(self.robot, j, self.open_joint(), physicsClientId=c)
        self.target = target.copy()
        self.yaw = 0.0
        self.close = False
        self._apply_arm(q)
        self._apply_fingers(False)
        return self.measure()

    # ------------------------------------------------------------------ control
    def _apply_arm(self, q: list[float]) -> None:
        pb.setJointMotorControlArray(self.robot, ARM_JOINTS, pb.POSITION_CONTROL, targetPositions=q,
                                     forces=ARM_FORCES, positionGains=[0.3] * 7, physicsClientId=self.client)

    def open_joint(self) -> float:
        """Finger joint position that opens the pads to ``cfg.open_width``."""
        return self.cfg.open_width / 2 + PAD_INSET

    def _apply_fingers(self, close: bool) -> None:
        target = 0.0 if close else self.open_joint()
        for j in FINGER_JOINTS:
            pb.setJointMotorControl2(self.robot, j, pb.POSITION_CONTROL, targetPosition=target, force=FINGER_FORCE,
                                     maxVelocity=self.cfg.finger_speed / 2, physicsClientId=self.client)

    def step(self, target: np.ndarray, close: bool, drift: np.ndarray | None = None, yaw: float | None = None) -> dict:
        """One control step: move the fingertip centre towards ``target`` (3,) and open/close the fingers.

        ``drift`` (2,) m/s, moving-target mode: while the sphere rests on the table untouched by the robot,
        its horizontal velocity is held at ``drift`` (a conveyor-like push); contacts then act freely.
        ``yaw`` (rad): the wrist angle to reach by the end of the step (None: the wrist never turns)."""
        start = self.target
        start_yaw = getattr(self, "yaw", 0.0)
        target = np.asarray(target, dtype=np.float64)
        self._apply_fingers(bool(close))
        per = max(1, self.substeps // IK_CHUNKS)
        moving = drift is not None and bool(np.any(drift != 0))
        done = 0
        for k in range(IK_CHUNKS):
            n = per if k < IK_CHUNKS - 1 else self.substeps - done
            frac = (k + 1) / IK_CHUNKS
            orn = _DOWN if yaw is None else hand_orientation(start_yaw + (yaw - start_yaw) * frac)
            self._apply_arm(self._ik(start + (target - start) * frac, orn))
            for _ in range(n):
                if moving:
                    self._drive_sphere(drift)
                pb.stepSimulation(physicsClientId=self.client)
            done += n
        self.target = target
        self.yaw = start_yaw if yaw is None else float(yaw)
        self.close = bool(close)
        return self.measure()

    def _drive_sphere(self, drift: np.ndarray) -> None:
        c = self.client
        pos = pb.getBasePositionAndOrientation(self.sphere, physicsClientId=c)[0]
        if pos[2] > self.rest_z + 1e-3:
            return
        if pb.getContactPoints(self.sphere, self.robot, physicsClientId=c):
            return
        vz = pb.getBaseVelocity(self.sphere, physicsClientId=c)[0][2]
        pb.resetBaseVelocity(self.sphere, [float(drift[0]), float(drift[1]), vz], physicsClientId=c)

    # ------------------------------------------------------------------ measurements and camera
    def measure(self) -> dict:
        """Measured fingertip centre ``tcp`` (3,), ``hand_rot`` (3,3), ``gap`` (m), ``sphere`` target centre (3,),
        ``target_yaw`` (rad, the target's rotation about z), and pad contacts ``touch`` (2,) bool (left, right
        finger within ``CONTACT_DIST`` of the target)."""
        c = self.client
        tcp, rot = self.tcp()
        pos, orn = pb.getBasePositionAndOrientation(self.sphere, physicsClientId=c)
        sphere = np.asarray(pos)
        target_yaw = float(pb.getEulerFromQuaternion(orn)[2])
        touch = np.zeros(2, dtype=bool)
        for i, link in enumerate(FINGER_JOINTS):
            pts = pb.getClosestPoints(self.robot, self.sphere, CONTACT_DIST, linkIndexA=link, physicsClientId=c)
            touch[i] = len(pts) > 0
        return {"tcp": tcp, "hand_rot": rot, "gap": self.finger_gap(), "sphere": sphere, "target_yaw": target_yaw,
                "touch": touch}

    def render(self, m: dict) -> tuple[np.ndarray, np.ndarray]:
        """Wrist image ``H,W,3`` uint8 and exact target mask ``H,W`` bool for measurement ``m``."""
        p, cfg, c = self.p, self.cfg, self.client
        size = cfg.image_size
        rot = m["hand_rot"]
        eye = m["tcp"] + rot @ p["cam_offset"]
        view = view_matrix(eye, rot @ p["cam_rot"])
        proj = projection_matrix(float(p["focal"]), size)
        _, _, rgba, _, seg = pb.getCameraImage(
            size, size, view, proj, lightDirection=(p["light_dir"] * 2.0).tolist(), lightColor=[1, 1, 1],
            lightDistance=2.0, shadow=int(cfg.shadows), lightAmbientCoeff=float(p["ambient"]),
            lightDiffuseCoeff=float(p["light_intensity"]), lightSpecularCoeff=float(p["specular"]),
            renderer=pb.ER_TINY_RENDERER, physicsClientId=c,
        )
        rgba = np.asarray(rgba, dtype=np.uint8).reshape(size, size, 4)
        seg = np.asarray(seg).reshape(size, size)
        return rgba[..., :3].copy(), seg == self.sphere

    def close_client(self) -> None:
        if self.client >= 0:
            pb.disconnect(physicsClientId=self.client)
            self.client = -1


SCENE_KEYS = ("tcp_pos", "sphere_pos", "sphere_radius", "sphere_vel", "dist_kind", "dist_pos", "dist_size", "dist_yaw",
              "dist_color", "sphere_color", "finger_color", "table_tex", "table_tint", "tex_scale", "tex_offset",
              "light_dir", "light_intensity", "ambient", "specular", "focal", "cam_offset", "cam_rot",
              "target_kind", "target_half_height", "target_yaw")


def scene_params(state, i: int) -> dict:
    """Numpy parameters of scene ``i`` of a :class:`graspsim.State` (the fields a BulletScene needs)."""
    return {k: getattr(state, k)[i].detach().cpu().numpy() for k in SCENE_KEYS}
