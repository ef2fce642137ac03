"""The batched environment: ``GraspEnv`` holds a :class:`State` (each scene with its own random key) and a
seeded generator for scenes drawn without episode seeds.

>>> env = GraspEnv(SimConfig(), num_envs=256, device="cpu", seed=0)
>>> obs = env.reset()                       # all scenes
>>> obs, reward, done, info = env.step(actions)  # actions: 256,4 (vx, vy, vz m/s, grip) or 256,5 (.., wz rad/s, grip)
>>> env.reset(env_ids=torch.nonzero(done).flatten())   # partial reset by index
>>> env.privileged()                         # true poses, for the expert only

Observation dict (policy-visible only):
  ``rgb``: B,3,H,W uint8; ``mask``: B,H,W bool (exact visible-target mask);
  ``gripper``: B,3 float32 = (finger gap / open gap, last executed close command as 0/1, table contact 0/1),
  with the wrist (``cfg.wrist``, a target mix beyond spheres) B,5: then also (sin, cos) of the wrist angle, and
  B,9 with ``cfg.fingertip_pixels`` (the default): then the 4 fingertip senses (:func:`fingertip_senses`).
  These are the gripper's own senses (finger encoder, its last command, a force/contact sensor that says
  the fingertips touch the table, see ``SimConfig.contact_height``); nothing about the target.

``step`` does **not** reset finished scenes; callers (collectors, the gymnasium vector env) reset the
``done`` ones by index. Finished scenes keep stepping harmlessly until then.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from typing import Sequence

import torch
from torch import Tensor

from . import physics
from .config import SimConfig
from .keys import GRIPPER, MASK, OBS_KEYS, PRIVILEGED_KEYS, RGB  # noqa: F401 (OBS_KEYS, PRIVILEGED_KEYS re-exported)
from .randomization import sample_scenes, scenes_from_seeds
from .render import RenderOutput, project, render
from .state import State, target_half_extents
from .validate import positive_int

GRIPPER_DIM = 3
"""Width of ``obs["gripper"]`` without the wrist: (finger gap / open gap, last close command 0/1, table contact 0/1).
With the wrist it is ``SimConfig.gripper_dim`` = 5 (sine and cosine of the wrist angle appended), 9 with the
fingertip senses."""


def observe(state: State, cfg: SimConfig, generator: torch.Generator | None = None) -> dict[str, Tensor]:
    """Render and package the policy observation of every scene (see module docstring)."""
    out: RenderOutput = render(state, cfg, generator=generator)
    return {RGB: out.rgb, MASK: out.mask, GRIPPER: gripper_obs(state, cfg)}


def gripper_obs(state: State, cfg: SimConfig) -> Tensor:
    """B,``cfg.gripper_dim`` float32: normalised finger gap, last executed close command, table contact (0/1),
    and with the wrist (``cfg.wrist``) the sine and cosine of the wrist angle (the joint encoder).

    Contact is the fingertips at most ``cfg.contact_height`` above the table, the signal of a guarded move.
    It makes the grasp height observable: at 64x64 the target's image hardly changes over the last
    centimetre of descent, so without it a mask-only policy cannot tell when the fingers straddle the sphere."""
    contact = table_contact(state.tcp_pos, cfg).float()
    senses = [state.finger_width / cfg.open_width, state.close_cmd.float(), contact]
    if cfg.wrist:
        senses += [torch.sin(state.wrist_yaw), torch.cos(state.wrist_yaw)]
        if cfg.fingertip_pixels:
            senses += fingertip_senses(fingertip_fractions(state, cfg.image_size)).unbind(-1)
    return torch.stack(senses, -1)


FINGERTIP_RISE = 0.02
"""Metres above the fingertip centre, along the fingers, of the second fingertip point (see :func:`fingertip_fractions`)."""
FINGERTIP_SCALE = 10.0
"""Gain of the fingertip senses: a mount's tolerance moves the points by a few hundredths of the image, and times 10
that reaches the net at the scale of its other inputs (unscaled, cubes did worse in the measured probe)."""


def fingertip_fractions(state: State, size: int) -> Tensor:
    """B,4 float32 ``(x0, y0, x1, y1)``: where the fingertip centre (0) and the point ``FINGERTIP_RISE`` above it (1)
    appear in each scene's wrist image, as fractions of the image width (x, rightwards) and height (y, downwards).

    The camera is fixed to the hand and turns with the wrist, so in a scene these are constants: they carry the
    scene's camera mount and field of view, which the mask alone cannot show. On a real arm they are measured once
    (docs/deploy.md); :func:`nominal_fingertip_fractions` is their value for the nominal mount."""
    up = state.tcp_pos + torch.tensor([0.0, 0.0, FINGERTIP_RISE], dtype=state.tcp_pos.dtype, device=state.tcp_pos.device)
    pix, _ = project(state, torch.stack([state.tcp_pos, up], 1), size)  # B,2,2 pixels
    return (pix / size).reshape(-1, 4)


def fingertip_senses(fractions):
    """The 4 fingertip senses from ``fractions`` (..., 4 as :func:`fingertip_fractions`; a Tensor or an ndarray):
    ``(2 * fraction - 1) * FINGERTIP_SCALE``, so the image centre reads 0 and its edges +/-10."""
    return (fractions * 2 - 1) * FINGERTIP_SCALE


FINGERTIP_MARGIN = 0.02
"""Fraction of the image (about a pixel at 64x64) that :func:`fingertip_calibration` adds on each side of the
trained range."""


def fingertip_calibration(cfg: SimConfig, scenes: int = 4096) -> dict[str, list[float]]:
    """What a net trained in ``cfg``'s scenes knows of the fingertip points: ``nominal`` (the nominal mount,
    :func:`nominal_fingertip_fractions`) and ``low`` / ``high``, the range over ``scenes`` randomised mounts (a fixed
    draw, seed 0) widened by :data:`FINGERTIP_MARGIN`; each 4 fractions ``(x0, y0, x1, y1)``. A deploy refuses
    measured values outside ``low``-``high``: the net never saw such a camera."""
    state = sample_scenes(cfg, scenes, torch.Generator().manual_seed(0), "cpu")
    frac = fingertip_fractions(state, cfg.image_size).double()
    return {"nominal": list(nominal_fingertip_fractions(cfg)),
            "low": (frac.min(0).values - FINGERTIP_MARGIN).tolist(),
            "high": (frac.max(0).values + FINGERTIP_MARGIN).tolist()}


def nominal_fingertip_fractions(cfg: SimConfig) -> tuple[float, float, float, float]:
    """:func:`fingertip_fractions` for a camera at the nominal mount (``cfg.camera_offset``, looking at the fingertip
    centre, no mount jitter) with the middle of the randomised field of view: the default a deploy uses when the
    user has not measured their own."""
    r = cfg.randomization
    fov = sum(r.fov) / 2
    flat = dataclasses.replace(cfg, randomization=dataclasses.replace(r, mount_jitter_pos=0.0, mount_jitter_rot=0.0,
                                                                      fov=(fov, fov)))
    state = sample_scenes(flat, 1, torch.Generator().manual_seed(0), "cpu")  # any scene: the mount alone matters
    return tuple(float(v) for v in fingertip_fractions(state, cfg.image_size)[0])


def table_contact(tcp_pos: Tensor, cfg: SimConfig) -> Tensor:
    """B bool: the gripper's contact sense, fingertips (``tcp_pos`` B,3) within ``cfg.contact_height`` of the table."""
    return tcp_pos[:, 2] <= cfg.contact_height


def privileged(state: State) -> dict[str, Tensor]:
    """True poses for the expert: never feed these to a policy. ``sphere_*`` describe the target of any kind
    (centre, half-width across the pads, drift); ``target_kind`` B int64, ``target_half`` B,3 half-extents (m),
    ``target_yaw`` B and ``wrist_yaw`` B (rad) complete it."""
    return {
        "tcp_pos": state.tcp_pos,
        "tcp_vel": state.tcp_vel,
        "finger_width": state.finger_width,
        "sphere_pos": state.sphere_pos,
        "sphere_radius": state.sphere_radius,
        "sphere_vel": state.sphere_vel,
        "held": state.held,
        "close_cmd": state.close_cmd,
        "steps": state.steps,
        "key": state.key,
        "target_kind": state.target_kind,
        "target_half": target_half_extents(state),
        "target_yaw": state.target_yaw,
        "wrist_yaw": state.wrist_yaw,
    }


def as_index(env_ids: Tensor | Sequence[int] | None, n: int, device: torch.device) -> Tensor:
    """Normalise ``env_ids`` (None = all, bool mask, index list/tensor) to a sorted unique int64 tensor."""
    if env_ids is None:
        return torch.arange(n, device=device)
    ids = torch.as_tensor(env_ids, device=device)
    if ids.dtype == torch.bool:
        if ids.shape != (n,):
            raise ValueError(f"env_ids bool mask must have shape ({n},); got {tuple(ids.shape)}")
        return torch.nonzero(ids).flatten()
    ids = ids.long().flatten()
    if ids.numel() and (ids.min() < 0 or ids.max() >= n):
        raise ValueError(f"env_ids must lie in 0..{n - 1}; got {ids.tolist()[:8]}")
    return torch.unique(ids)


def put_scenes(state: State, env_ids: Tensor, fresh: State) -> State:
    """``state`` with rows ``env_ids`` (int64 index, one per row of ``fresh``) replaced by ``fresh``. Pure."""
    if fresh.batch_size != env_ids.numel():
        raise ValueError(f"put_scenes: {fresh.batch_size} scenes for {env_ids.numel()} env ids")
    return State(**{k: v.index_copy(0, env_ids, getattr(fresh, k).to(v.device)) for k, v in state.items()})


def reset_scenes(state: State | None, env_ids: Tensor, cfg: SimConfig, generator: torch.Generator, n: int,
                 device: torch.device) -> State:
    """Return ``state`` with scenes ``env_ids`` replaced by scenes drawn from ``generator`` (all when state is None)."""
    if state is None:
        return sample_scenes(cfg, n, generator, device)
    if env_ids.numel() == 0:
        return state
    return put_scenes(state, env_ids, sample_scenes(cfg, int(env_ids.numel()), generator, device))


def fresh_scenes(state: State, env_ids: Tensor | Sequence[int] | None, seeds: Sequence[int] | None, cfg: SimConfig,
                 generator: torch.Generator, n: int, device: torch.device) -> tuple[State, Tensor]:
    """The reset rule shared by both backends: fresh scenes for ``env_ids`` (None = all ``n``), built from
    the per-episode ``seeds`` (one per id, in the order the ids are given) or, without seeds, drawn from
    ``generator``. Returns (new state, index tensor of the reset scenes, in the order of ``seeds``)."""
    if seeds is None:
        ids = as_index(env_ids, n, device)
        if env_ids is None:
            return sample_scenes(cfg, n, generator, device), ids
        return reset_scenes(state, ids, cfg, generator, n, device), ids
    seeds = [int(x) for x in seeds]
    ids = torch.arange(n, device=device) if env_ids is None else torch.as_tensor(env_ids, device=device)
    if ids.dtype == torch.bool:
        ids = as_index(ids, n, device)
    ids = ids.long().flatten()
    if ids.numel() != len(seeds):
        raise ValueError(f"reset: {len(seeds)} seeds for {ids.numel()} env ids")
    if ids.numel() and (ids.min() < 0 or ids.max() >= n or torch.unique(ids).numel() != ids.numel()):
        raise ValueError(f"reset: env_ids must be distinct and lie in 0..{n - 1}; got {ids.tolist()[:8]}")
    if not seeds:
        return state, ids
    return put_scenes(state, ids, scenes_from_seeds(cfg, seeds, device)), ids


class GraspEnv:
    """A batch of ``num_envs`` randomized wrist-camera grasping scenes on ``device``.

    The episode lifecycle shared with :class:`graspsim.bullet.BulletGraspEnv` (the env protocol):
    ``reset(env_ids=None, seeds=None) -> obs``, ``step(action) -> (obs, reward, done, info)``,
    ``observe() -> obs``, ``privileged()``, ``rendering(on)`` (a context), ``num_envs``, ``cfg``,
    ``device``, ``close()``. Only the env assigns its ``state``; loops over episodes go through
    :func:`graspsim.rollout.run_episodes`.
    """

    def __init__(self, cfg: SimConfig | None = None, num_envs: int = 1, device: str | torch.device = "cpu",
                 seed: int = 0, render_obs: bool = True):
        positive_int("", "num_envs", num_envs)
        self.cfg = cfg or SimConfig()
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.render_obs = render_obs
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(seed))
        self.state: State = sample_scenes(self.cfg, num_envs, self.generator, self.device)

    # -- core API ---------------------------------------------------------------------------
    def reset(self, env_ids: Tensor | Sequence[int] | None = None, seeds: Sequence[int] | None = None,
              seed: int | None = None) -> dict[str, Tensor]:
        """Start new episodes in the scenes ``env_ids`` (default all) and return the observation of every scene.

        ``seeds`` (one per id, see :mod:`graspsim.seeds`) builds each new scene from its episode seed;
        without them the scenes (and their random keys, which drive their dynamics and image noise) are drawn
        from the env's generator; ``seed`` first re-seeds that generator (gymnasium style).
        """
        if seed is not None:
            self.generator.manual_seed(int(seed))
        self.state, _ = fresh_scenes(self.state, env_ids, seeds, self.cfg, self.generator, self.num_envs, self.device)
        return self._obs()

    def step(self, action: Tensor) -> tuple[dict[str, Tensor], Tensor, Tensor, dict[str, Tensor]]:
        """Apply ``action`` (B,4, or B,5 with the wrist's yaw rate; see :mod:`graspsim.physics`) to every scene. Returns (obs, reward B float32, done B bool, info).

        ``reward`` is 1.0 on the step an episode succeeds, else 0. ``info`` holds ``success`` (B bool),
        ``timeout`` (B bool) and ``failure`` (B int64 codes, see ``physics.FAILURE_NAMES``).
        """
        before = self.state.success
        self.state = physics.step(self.state, action, self.cfg)
        s = self.state
        reward = (s.success & ~before).float()
        info = {
            "success": s.success,
            "timeout": s.done & ~s.success,
            "failure": physics.failure_cause(s),
        }
        return self._obs(), reward, s.done, info

    def _obs(self) -> dict[str, Tensor]:
        if not self.render_obs:
            return {GRIPPER: gripper_obs(self.state, self.cfg)}
        return self.observe()

    def observe(self) -> dict[str, Tensor]:
        """Render and return the observation of every scene in its current state (see the module docstring).
        Image noise is each episode's own (from its key and step), whatever shares the batch."""
        return observe(self.state, self.cfg)

    @contextmanager
    def rendering(self, on: bool):
        """Within the block, ``step`` and ``reset`` render (``on``) or return only ``gripper`` (not ``on``);
        :meth:`observe` always renders. The previous setting comes back on exit, also on error."""
        saved, self.render_obs = self.render_obs, bool(on)
        try:
            yield self
        finally:
            self.render_obs = saved

    def privileged(self) -> dict[str, Tensor]:
        return privileged(self.state)

    def render(self, **kwargs) -> RenderOutput:
        """Full render output (RGB, mask, depth, alpha) of the current state; see ``render.render``."""
        return render(self.state, self.cfg, **kwargs)

    def close(self) -> None:
        """Nothing to release (the protocol's ``close``)."""

    def __enter__(self) -> "GraspEnv":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
