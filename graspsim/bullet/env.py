"""``BulletGraspEnv``: the grasping task in pybullet with a Franka Panda, behind the ``GraspEnv`` API.

>>> env = BulletGraspEnv(SimConfig(), num_envs=8, seed=0, workers=2)
>>> obs = env.reset()                                # rgb 8,3,H,W uint8; mask 8,H,W bool; gripper 8,3
>>> obs, reward, done, info = env.step(action)      # action 8,4 float32: (vx, vy, vz) m/s, grip > 0 closes
>>>                                                  # (8,5 with the wrist: (vx, vy, vz, wz, grip), wz rad/s)
>>> env.privileged()                                 # same keys as graspsim.privileged
>>> env.close()

Scene parameters come from :func:`graspsim.randomization.sample_scenes` (same generator use as the
torch env), so the same seed draws the same sphere, distractors, looks, camera and dynamics in both
backends. The velocity command is turned into a fingertip-centre target exactly as the torch
simulator turns it into a motion (latency, gain, noise, per-axis speed clip, acceleration limit,
workspace clamp); the arm then tracks that target through IK and contact physics in pybullet
(:mod:`graspsim.bullet.scene`). The per-scene bookkeeping lives in a :class:`graspsim.State` updated
from pybullet measurements, so ``privileged()`` and the failure codes mean the same as in the torch env:

* ``held``: both finger pads touch the sphere (within 1 mm), the sphere centre lies between the pads
  (inside their footprint, and the gap is within 3 mm of the diameter, so closed fingers pushing a
  sphere in front of them do not count) and the close command is active. No attachment: only
  friction holds the sphere.
* ``success``: held with the sphere bottom at least ``lift_height`` above the table (latched).
* ``pushed``: a finger touched the free sphere while it moved more than 1 mm in the step.
* ``missed``: the pads closed to under 2 mm without holding the sphere. ``dropped``: a held sphere was
  lost while the close command stayed on.
* cubes and cylinders (``SimConfig.target.kinds``): the same rules with the target's half-width across the
  pads and its half height, in the gripper frame of the measured hand; the wrist angle is integrated from
  ``wz`` by the torch simulator's wrist model (:func:`graspsim.physics.wrist_command`) and reached through IK
  (the Panda's last joint turns the hand); ``wrist_yaw`` and ``target_yaw`` in the state are measured.
  A cube is held when friction holds it, however it ended up between the pads.
* moving-target mode (``target_speed`` > 0): the resting, untouched sphere is kept moving at its drift
  velocity (reversed at the workspace edge like the torch simulator); the fingers push it freely.

The batch is a list of pybullet DIRECT clients, in this process (``workers=0``) or spread over
``workers`` child processes that step their scenes in parallel.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from ..config import SimConfig
from ..contact_env import HOLD_SLACK, ContactBackend, grasp_events
from ..env import gripper_obs, privileged
from ..physics import failure_cause, split_action, validate_action, wrist_command
from ..randomization import sample_scenes
from ..render import postprocess
from ..state import KIND_CYLINDER, State
from ..keys import GRIPPER, MASK, RGB
from ..validate import non_negative_int, positive_int
from .scene import scene_params
from .workers import LocalGroup, ProcessGroup

PAD_HALF_X = 0.0105  # half extent of a Panda finger pad along the hand x axis (m)
PAD_LENGTH = 0.0538  # Panda finger length below the finger joint (m)


@contextmanager
def _one_thread(device: torch.device):
    """Run a few small CPU ops on one intra-op thread: on a busy machine, fanning a 12k-element blur out
    to the OpenMP pool costs a scheduler time slice (~10 ms measured) instead of ~0.1 ms."""
    n = torch.get_num_threads()
    if device.type != "cpu" or n == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


class BulletGraspEnv(ContactBackend):
    """``num_envs`` pybullet scenes with the API of :class:`graspsim.GraspEnv` (see module docstring).

    ``device`` is where the returned tensors live (physics runs on CPU in pybullet). ``workers`` > 0
    spreads the scenes over that many child processes (capped at ``num_envs``).
    """

    def __init__(self, cfg: SimConfig | None = None, num_envs: int = 1, device: str | torch.device = "cpu",
                 seed: int = 0, workers: int = 0, render_obs: bool = True):
        positive_int("", "num_envs", num_envs)
        non_negative_int("", "workers", workers)
        self.cfg = cfg or SimConfig()
        if self.cfg.embodiment != "floating":
            raise ValueError(f"the pybullet backend models the floating embodiment (a Panda hand), not "
                             f"--sim.embodiment {self.cfg.embodiment}")
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.render_obs = render_obs
        self.workers = min(workers, num_envs)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(seed))
        self.groups: list = []
        self.slices: list[tuple[int, int]] = []
        try:
            if self.workers == 0:
                self.groups = [LocalGroup(self.cfg, num_envs)]
                self.slices = [(0, num_envs)]
            else:
                bounds = np.linspace(0, num_envs, self.workers + 1).round().astype(int)
                for lo, hi in zip(bounds[:-1], bounds[1:]):
                    self.groups.append(ProcessGroup(self.cfg, int(hi - lo)))
                    self.slices.append((int(lo), int(hi)))
                for g in self.groups:  # the workers build their scenes concurrently
                    g.recv()
        except BaseException:
            self.close()
            raise
        H = self.cfg.image_size
        self._rgb = np.zeros((num_envs, H, H, 3), np.uint8)
        self._mask = np.zeros((num_envs, H, H), bool)
        self._stale = np.zeros(num_envs, bool)  # scenes whose image is older than their state
        self._target = torch.zeros((num_envs, 3), device=self.device)
        self._cmd_vel = torch.zeros((num_envs, 3), device=self.device)
        self._yaw = torch.zeros(num_envs, device=self.device)  # integrated wrist angle target (rad)
        self._yaw_rate = torch.zeros(num_envs, device=self.device)  # its rate (rad/s)
        self.state: State = sample_scenes(self.cfg, num_envs, self.generator, self.device)
        self._build(torch.arange(num_envs))

    # ------------------------------------------------------------------ dispatch
    def _run(self, method: str, per_group_args: list[tuple | None]) -> list[dict | None]:
        """Call ``method`` on every group with args (None = skip); worker groups run concurrently."""
        for g, args in zip(self.groups, per_group_args):
            if args is not None and isinstance(g, ProcessGroup):
                g.send(method, *args)
        out: list[dict | None] = []
        for g, args in zip(self.groups, per_group_args):
            if args is None:
                out.append(None)
            elif isinstance(g, ProcessGroup):
                out.append(g.recv())
            else:
                out.append(getattr(g, method)(*args))
        return out

    def _build(self, ids: Tensor) -> None:
        """(Re)build the pybullet scenes ``ids`` from ``self.state`` and read back their measurements."""
        ids_list = ids.tolist()
        args = []
        for lo, hi in self.slices:
            local = [i for i in ids_list if lo <= i < hi]
            args.append(([i - lo for i in local], [scene_params(self.state, i) for i in local], self.render_obs)
                        if local else None)
        results = self._run("reset", args)
        tcp = self.state.tcp_pos.clone()
        sphere = self.state.sphere_pos.clone()
        width = self.state.finger_width.clone()
        for (lo, hi), a, res in zip(self.slices, args, results):
            if res is None:
                continue
            gids = torch.tensor([lo + i for i in a[0]], dtype=torch.long)
            tcp[gids] = torch.from_numpy(res["tcp"]).float().to(self.device)
            sphere[gids] = torch.from_numpy(res["sphere"]).float().to(self.device)
            width[gids] = torch.from_numpy(res["gap"]).float().to(self.device)
            if self.render_obs:
                self._rgb[gids.numpy()] = res["rgb"]
                self._mask[gids.numpy()] = res["mask"]
        self._stale[ids.numpy()] = not self.render_obs
        dev_ids = ids.to(self.device)
        self._target[dev_ids] = tcp[dev_ids]
        self._cmd_vel[dev_ids] = 0.0
        self._yaw[dev_ids] = 0.0
        self._yaw_rate[dev_ids] = 0.0
        self.state = self.state.replace(tcp_pos=tcp, sphere_pos=sphere, finger_width=width)

    # ------------------------------------------------------------------ core API (reset and rendering: ContactBackend)
    def _wrist_targets(self, wz: Tensor | None) -> Tensor | None:
        """Integrate the commanded yaw rates ``wz`` (B rad/s) into wrist angle targets B (rad) with the torch
        simulator's wrist model; None when the wrist does not turn (no wrist and no yaw rate given)."""
        if wz is None and not self.cfg.wrist:
            return None
        if wz is None:
            wz = torch.zeros(self.num_envs, device=self.device)
        s = self.state.replace(wrist_yaw=self._yaw, wrist_rate=self._yaw_rate)
        yaw, rate = wrist_command(s, wz, self.cfg)
        self._yaw, self._yaw_rate = yaw, rate
        self.state = self.state.replace(prev_wz=wz)
        return yaw

    def step(self, action: Tensor) -> tuple[dict[str, Tensor], Tensor, Tensor, dict[str, Tensor]]:
        """Apply ``action`` (B,4, or B,5 with the wrist's yaw rate) to every scene. Returns (obs, reward B
        float32, done B bool, info) with the meanings of :meth:`graspsim.GraspEnv.step`. Raises ValueError on a
        wrong shape, NaN/inf, or a 4-D action for a cube."""
        action = validate_action(action, self.num_envs, self.state.target_kind).to(self.device)
        action, wz = split_action(action)
        target, close = self._command_targets(action)
        yaw = self._wrist_targets(wz)
        drift = self._drift()
        t_np, c_np = target.cpu().numpy().astype(np.float64), close.cpu().numpy()
        d_np = drift.cpu().numpy().astype(np.float64)
        y_np = None if yaw is None else yaw.cpu().numpy().astype(np.float64)
        results = self._run("step", [(t_np[lo:hi], c_np[lo:hi], d_np[lo:hi], self.render_obs)
                                     + (() if y_np is None else (y_np[lo:hi],)) for lo, hi in self.slices])
        m = {k: np.concatenate([r[k] for r in results]) for k in results[0]}
        if self.render_obs:
            self._rgb, self._mask = m["rgb"], m["mask"]
        self._stale[:] = not self.render_obs
        self._update_state(m, action, close)
        s = self.state
        before_success = self._success_before
        reward = (s.success & ~before_success).float()
        info = {"success": s.success, "timeout": s.done & ~s.success, "failure": failure_cause(s)}
        return self._obs(), reward, s.done, info

    def _update_state(self, m: dict, action: Tensor, close: Tensor) -> None:
        s, cfg, dev = self.state, self.cfg, self.device
        self._success_before = s.success
        tcp = torch.from_numpy(m["tcp"]).float().to(dev)
        sphere = torch.from_numpy(m["sphere"]).float().to(dev)
        width = torch.from_numpy(m["gap"]).float().to(dev)
        touch = torch.from_numpy(m["touch"]).to(dev)
        r = s.sphere_radius
        hz = torch.where(s.target_kind == KIND_CYLINDER, s.target_half_height, r)
        rel = sphere - tcp
        wrist, target_yaw = s.wrist_yaw, s.target_yaw
        if cfg.wrist:  # measured: the hand's turn about z, the target's yaw; rel in the gripper frame
            rot = torch.from_numpy(m["hand_rot"]).float().to(dev)
            wrist = torch.atan2(rot[:, 1, 0], rot[:, 0, 0])
            target_yaw = torch.from_numpy(m["target_yaw"]).float().to(dev)
            c, sn = torch.cos(wrist), torch.sin(wrist)
            rel = torch.stack([c * rel[:, 0] + sn * rel[:, 1], -sn * rel[:, 0] + c * rel[:, 1], rel[:, 2]], 1)
        # the pads squeeze the sphere between them: centre inside the pad footprint and the gap held open
        # by the sphere (closed fingers pressed against a sphere in front of them touch it too)
        between = (
            (rel[:, 0].abs() <= PAD_HALF_X)
            & (rel[:, 1].abs() <= width / 2)
            & (width >= 2 * r - HOLD_SLACK)
            & (rel[:, 2] >= -hz)
            & (rel[:, 2] <= PAD_LENGTH)
        )
        held, pushed, dropped, missed, steps, success = grasp_events(s, sphere, touch, between, close, width, hz,
                                                                     cfg.lift_height)
        self.state = s.replace(
            wrist_yaw=wrist,
            wrist_rate=(wrist - s.wrist_yaw) / cfg.dt,
            target_yaw=target_yaw,
            tcp_pos=tcp,
            tcp_vel=(tcp - s.tcp_pos) / cfg.dt,
            finger_width=width,
            close_cmd=close,
            prev_action=action,
            sphere_pos=sphere,
            held=held,
            held_offset=torch.where(held[:, None], sphere - tcp, s.held_offset),
            steps=steps,
            success=success,
            done=s.done | success | (steps >= cfg.max_steps),
            pushed=pushed,
            dropped=dropped,
            missed=missed,
        )

    def _obs(self) -> dict[str, Tensor]:
        if not self.render_obs:
            return {GRIPPER: gripper_obs(self.state, self.cfg)}
        return self.observe()

    def _render_stale(self) -> None:
        """Render in pybullet the scenes whose image is older than their state (after steps or resets
        taken with rendering off)."""
        stale = np.flatnonzero(self._stale).tolist()
        args = []
        for lo, hi in self.slices:
            local = [i - lo for i in stale if lo <= i < hi]
            args.append((local,) if local else None)
        for (lo, _), a, res in zip(self.slices, args, self._run("render", args)):
            if res is not None:
                gids = np.asarray(a[0]) + lo
                self._rgb[gids], self._mask[gids] = res["rgb"], res["mask"]
        self._stale[:] = False

    def observe(self) -> dict[str, Tensor]:
        """Policy observation of the current state: rgb B,3,H,W uint8 (TinyRenderer image + the scene's blur
        and noise), mask B,H,W bool (pybullet segmentation == sphere body), gripper B,3 float32."""
        if self._stale.any():
            self._render_stale()
        grip = gripper_obs(self.state, self.cfg)
        with _one_thread(self.device):
            color = torch.from_numpy(self._rgb).to(self.device).permute(0, 3, 1, 2).float() / 255.0
            color = postprocess(color, self.state.blur, self.state.image_noise,
                                keys=(self.state.key, self.state.steps))
            rgb = (color * 255.0 + 0.5).to(torch.uint8)
        return {RGB: rgb, MASK: torch.from_numpy(self._mask.copy()).to(self.device), GRIPPER: grip}

    def privileged(self) -> dict[str, Tensor]:
        """True poses measured in pybullet, same keys as :func:`graspsim.privileged` (expert only)."""
        return privileged(self.state)

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Disconnect every pybullet client and stop the worker processes (idempotent)."""
        for g in getattr(self, "groups", []):
            try:
                g.close()
            except Exception:  # closing must not raise during interpreter shutdown
                pass
        self.groups = []

    def __enter__(self) -> "BulletGraspEnv":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
