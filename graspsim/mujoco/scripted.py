"""A scripted straight-down grasp for the SO-101 in MuJoCo, reading the true poses (``env.privileged()``): a check of
the backend (contact physics, IK, jaw) apart from any learned policy.

The approach: turn the wrist so a cube's faces are square to the pads, bring the grasp point above the target with
the fixed pad's face just beside it (the moving jaw then pushes the target onto the fixed jaw), descend to the
target's centre height (no lower than the closing jaw's sweep allows), close while holding the position, lift
straight up. Proportional control of the grasp point, within the speed limits.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from graspsim.state import KIND_BOX

APPROACH_HEIGHT = 0.015  # hover this far above the grasp height before descending (m): low enough to stay inside
# the reach band at the far edge of the so101 target square (radius 0.245 m: the band ends at 0.25 m at 3 cm height)
JAW_SWEEP = 0.0117  # closing, the moving pad swings this far below the grasp point (m, measured on the MJCF)
MIN_GRASP_HEIGHT = JAW_SWEEP + 0.003  # the lowest grasp-point height that keeps the closing jaw off the table
GAIN = 4.0  # 1/s
FACE_CLEARANCE = 0.004  # the target's side stops this far inside the fixed pad's face before closing (m)
XY_TOL = 0.002  # descend once the grasp point is this close above its goal (m)
CLOSE_STEPS = 4  # control steps spent closing before the lift


class ScriptedGrasp:
    """Per-scene phase machine: 0 hover, 1 descend, 2 close, 3 lift, on the TCP of the state (the pads' lower-edge
    centre, ``tcp_below_grasp`` under the grasp point). ``fixed_face``: the fixed pad's face along the closing axis
    (the simulator gripper frame's y, from the moving jaw to the fixed one) from the grasp point (m, positive)."""

    def __init__(self, num_envs: int, fixed_face: float, tcp_below_grasp: float, max_speed: float = 0.1,
                 max_yaw_rate: float = 1.5, wrist: bool = True):
        self.fixed_face = float(fixed_face)
        self.below = float(tcp_below_grasp)
        self.max_speed, self.max_yaw_rate, self.wrist = max_speed, max_yaw_rate, wrist
        self.phase = torch.zeros(num_envs, dtype=torch.long)
        self.count = torch.zeros(num_envs, dtype=torch.long)

    @classmethod
    def for_env(cls, env) -> "ScriptedGrasp":
        """The script for a :class:`graspsim.mujoco.env.MujocoGraspEnv` (its geometry and limits)."""
        g = env.kin.geometry
        return cls(env.num_envs, g.grasp_point[0] - g.fixed_pad_face[0], g.tcp_below_grasp, env.cfg.max_speed,
                   env.cfg.max_yaw_rate, env.cfg.wrist)

    def reset(self, ids=None) -> None:
        if ids is None:
            self.phase[:] = 0
            self.count[:] = 0
        else:
            self.phase[ids] = 0
            self.count[ids] = 0

    def act(self, priv: dict[str, Tensor]) -> Tensor:
        """The policy interface of :class:`graspsim.rollout.ExpertHooks`: :meth:`__call__`."""
        return self(priv)

    def __call__(self, priv: dict[str, Tensor]) -> Tensor:
        """B,5 (or B,4 without the wrist) actions for the privileged state ``priv``."""
        tcp, obj = priv["tcp_pos"].cpu(), priv["sphere_pos"].cpu()
        r, kind = priv["sphere_radius"].cpu(), priv["target_kind"].cpu()
        half = priv["target_half"].cpu()
        wrist = priv["wrist_yaw"].cpu()
        # yaw: square to a cube's faces (the nearest quarter turn), else keep 0
        cube_yaw = priv["target_yaw"].cpu()
        cube_yaw = torch.remainder(cube_yaw + math.pi / 4, math.pi / 2) - math.pi / 4
        yaw_goal = torch.where(kind == KIND_BOX, cube_yaw, torch.zeros_like(cube_yaw))
        # the closing axis (towards the fixed jaw) in the world at the goal yaw: (-sin, cos); the target's centre goes
        # just inside the fixed pad's face, so the closing moving jaw pushes it onto the fixed one
        axis = torch.stack([-torch.sin(yaw_goal), torch.cos(yaw_goal)], 1)
        along = self.fixed_face - r - FACE_CLEARANCE
        goal_xy = obj[:, :2] - axis * along[:, None]
        grasp_z = torch.clamp(obj[:, 2], min=MIN_GRASP_HEIGHT)
        goal = torch.cat([goal_xy, (grasp_z - self.below)[:, None]], 1)
        # hover above the grasp height, and with the pads' lower edges clear of the target's top
        top = obj[:, 2] + half[:, 2]
        hover_z = torch.maximum(goal[:, 2] + APPROACH_HEIGHT, top + 0.008)
        hover = torch.cat([goal_xy, hover_z[:, None]], 1)
        err_xy = (goal_xy - tcp[:, :2]).norm(dim=1)
        yaw_err = (yaw_goal - wrist).abs()
        ph = self.phase
        ph = torch.where((ph == 0) & (err_xy < XY_TOL) & ((tcp[:, 2] - hover[:, 2]).abs() < 0.005) & (yaw_err < 0.03),
                         torch.ones_like(ph), ph)
        ph = torch.where((ph == 1) & ((tcp[:, 2] - goal[:, 2]).abs() < 0.002) & (err_xy < 0.003),
                         torch.full_like(ph, 2), ph)
        self.count = torch.where(ph == 2, self.count + 1, self.count)
        ph = torch.where((ph == 2) & (self.count > CLOSE_STEPS), torch.full_like(ph, 3), ph)
        self.phase = ph
        where = torch.where(ph[:, None] == 0, hover, goal)
        v = (GAIN * (where - tcp)).clamp(-self.max_speed, self.max_speed)
        v = torch.where(ph[:, None] == 3, torch.tensor([0.0, 0.0, self.max_speed]).expand_as(v), v)
        grip = torch.where(ph >= 2, torch.ones_like(r), -torch.ones_like(r))
        wz = (GAIN * (yaw_goal - wrist)).clamp(-self.max_yaw_rate, self.max_yaw_rate)
        if not self.wrist:
            return torch.cat([v, grip[:, None]], 1)
        return torch.cat([v, wz[:, None], grip[:, None]], 1)
