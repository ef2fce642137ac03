"""The batched scene state: one dataclass of tensors, batch of scenes first, all on one device.

Frames and units
----------------
World frame: origin on the table surface at the workspace centre, x forward, y left, z up; metres.
The gripper frame is the world frame turned about z by the wrist angle ``wrist_yaw`` and translated to the
**TCP**, the point midway between the two fingertips. The fingers close along the gripper y axis. The wrist
camera is rigidly mounted at ``SimConfig.camera_offset`` (gripper frame) from the TCP (behind and above it),
tilted so that its optical axis passes through the TCP (or, for an embodiment that names one, along its
``camera_forward``: :mod:`graspsim.embodiment`), and sees the fingers in the lower part of the image;
``cam_offset`` and ``cam_rot`` hold that mount in the world frame, so they turn with the wrist. The wrist only
turns when the configuration's target mix holds more than spheres (``SimConfig.wrist``); with spheres alone
``wrist_yaw`` stays 0 and the gripper frame is the world frame translated, as before kinds existed.

The target is a sphere, a cube or an upright cylinder (``target_kind``, codes ``KIND_SPHERE``, ``KIND_BOX``,
``KIND_CYLINDER`` shared with the distractors). Its field names keep the sphere's: ``sphere_pos`` is the
target's centre and ``sphere_radius`` its half-width across the pads when aligned (sphere radius, half the
cube's side, cylinder radius); :func:`target_half_extents` gives the full half-extents.

Fields marked *privileged* are the true poses the FSM expert reads; policies must only see the
observation (``rgb``, ``mask``, ``gripper``) produced by :func:`graspsim.env.observe`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterator

import torch
from torch import Tensor

# Distractor kinds (``State.dist_kind``).
KIND_NONE, KIND_BOX, KIND_CYLINDER, KIND_SPHERE = 0, 1, 2, 3
TARGET_KIND_CODES = {"sphere": KIND_SPHERE, "cube": KIND_BOX, "cylinder": KIND_CYLINDER}
"""``State.target_kind`` code of each name of ``graspsim.config.TARGET_KINDS``."""
KIND_NAMES = {v: k for k, v in TARGET_KIND_CODES.items()}
"""Target kind name of each code."""


@dataclass
class State:
    """All per-scene tensors. ``B`` = number of scenes, ``K`` = distractor slots.

    Shapes and dtypes are given per field; positions in metres (world frame), velocities in m/s.
    """

    # --- gripper (privileged pose; the width is observable through ``gripper``) ---
    tcp_pos: Tensor  # B,3 float32: fingertip centre
    tcp_vel: Tensor  # B,3 float32: executed velocity of the last step
    finger_width: Tensor  # B float32: gap between the pads (m)
    close_cmd: Tensor  # B bool: the last executed gripper command (True = close)
    prev_action: Tensor  # B,4 float32: last commanded (vx, vy, vz, grip), executed next step when ``latency``
    wrist_yaw: Tensor  # B float32: wrist angle about z (rad), 0 at reset; the gripper frame's rotation
    wrist_rate: Tensor  # B float32: executed wrist yaw rate of the last step (rad/s)
    prev_wz: Tensor  # B float32: last commanded wrist yaw rate (rad/s), executed next step when ``latency``
    # --- target (privileged) ---
    sphere_pos: Tensor  # B,3 float32: target centre
    sphere_radius: Tensor  # B float32: target half-width (sphere radius, cube half side, cylinder radius)
    target_kind: Tensor  # B int64: KIND_SPHERE, KIND_BOX (cube) or KIND_CYLINDER
    target_half_height: Tensor  # B float32: a cylinder's half height (m); spheres and cubes use sphere_radius
    target_yaw: Tensor  # B float32: the cube's rotation about z (rad; 0 for spheres and cylinders)
    sphere_vel: Tensor  # B,2 float32: drift velocity over the table (moving-target mode)
    held: Tensor  # B bool: the sphere is between the closed pads and moves with the gripper
    held_offset: Tensor  # B,3 float32: sphere centre minus TCP while held
    # --- distractors (privileged) ---
    dist_kind: Tensor  # B,K int64: KIND_* constant; KIND_NONE = empty slot
    dist_pos: Tensor  # B,K,3 float32: centre
    dist_size: Tensor  # B,K,3 float32: box half-extents / (r, r, half-height) cylinder / (r, r, r) sphere
    dist_yaw: Tensor  # B,K float32: rotation about z (rad)
    dist_color: Tensor  # B,K,3 float32
    # --- looks (fixed per episode) ---
    sphere_color: Tensor  # B,3 float32
    finger_color: Tensor  # B,3 float32
    table_tex: Tensor  # B int64: index into the texture bank
    table_tint: Tensor  # B,3 float32
    tex_scale: Tensor  # B float32: repeats per metre
    tex_offset: Tensor  # B,2 float32: texture offset (fraction of a tile)
    light_dir: Tensor  # B,3 float32: unit vector towards the light
    light_intensity: Tensor  # B float32
    ambient: Tensor  # B float32
    specular: Tensor  # B float32
    shininess: Tensor  # B float32
    # --- camera (fixed per episode) ---
    focal: Tensor  # B float32: focal length in pixels
    cam_offset: Tensor  # B,3 float32: camera position relative to the TCP (m)
    cam_rot: Tensor  # B,3,3 float32: columns = camera right, down, forward axes in the world frame
    image_noise: Tensor  # B float32
    blur: Tensor  # B float32
    # --- dynamics (fixed per episode) ---
    action_gain: Tensor  # B float32
    latency: Tensor  # B bool
    action_noise: Tensor  # B float32 (m/s)
    slip_rate: Tensor  # B float32
    # --- episode bookkeeping ---
    steps: Tensor  # B int64: control steps since reset
    success: Tensor  # B bool: held and lifted (latched until reset)
    done: Tensor  # B bool: success or timeout
    pushed: Tensor  # B bool: the sphere was displaced by a finger at least once
    dropped: Tensor  # B bool: a held sphere was lost at least once
    missed: Tensor  # B int64: closings that did not capture the sphere
    start_xy: Tensor  # B,2 float32: where the sphere rested at reset
    key: Tensor  # B int64: the episode's random key; per-step noise is drawn from (key, steps) (graspsim.rng)

    # ------------------------------------------------------------------ helpers
    def items(self) -> Iterator[tuple[str, Tensor]]:
        for f in dataclasses.fields(self):
            yield f.name, getattr(self, f.name)

    @property
    def batch_size(self) -> int:
        return int(self.tcp_pos.shape[0])

    @property
    def device(self) -> torch.device:
        return self.tcp_pos.device

    def replace(self, **changes: Tensor) -> "State":
        return dataclasses.replace(self, **changes)

    def clone(self) -> "State":
        return State(**{k: v.clone() for k, v in self.items()})

    def to(self, device: torch.device | str) -> "State":
        return State(**{k: v.to(device) for k, v in self.items()})

    def index(self, idx: Tensor) -> "State":
        """Sub-batch of the scenes ``idx`` (index tensor or bool mask)."""
        return State(**{k: v[idx] for k, v in self.items()})

    def where(self, mask: Tensor, other: "State") -> "State":
        """Per scene: take ``other`` where ``mask`` (B bool) is True, else keep ``self``."""
        out = {}
        for k, v in self.items():
            o = getattr(other, k)
            m = mask.view(-1, *([1] * (v.dim() - 1)))
            out[k] = torch.where(m, o, v)
        return State(**out)

    def to_dict(self) -> dict[str, Tensor]:
        return dict(self.items())

    @classmethod
    def from_dict(cls, d: dict[str, Tensor]) -> "State":
        names = [f.name for f in dataclasses.fields(cls)]
        missing = sorted(set(names) - set(d))
        extra = sorted(set(d) - set(names))
        if missing or extra:
            raise ValueError(f"State.from_dict: missing fields {missing}, unknown fields {extra}")
        return cls(**{k: d[k] for k in names})


def target_half_extents(state: State) -> Tensor:
    """B,3 float32 half-extents of every target in its own frame (m): sphere (r, r, r), cube (a, a, a) with
    ``a`` half the side, cylinder (r, r, half height)."""
    r = state.sphere_radius
    hz = torch.where(state.target_kind == KIND_CYLINDER, state.target_half_height, r)
    return torch.stack([r, r, hz], -1)


def target_half_height(state: State) -> Tensor:
    """B float32: how high the target's centre sits above its bottom (m)."""
    return torch.where(state.target_kind == KIND_CYLINDER, state.target_half_height, state.sphere_radius)
