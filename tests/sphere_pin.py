"""Digests of what the sphere-only default configuration produces for fixed seeds (issue 39's pin).

``sphere_only_digests()`` runs the torch simulator with the default :class:`graspsim.SimConfig` (kinds =
sphere only) under the FSM expert with exploration noise, rendering every step, and hashes every state
field, every rendered image and mask, and every expert action; a short pybullet episode is hashed too.
``tests/assets/sphere_pin.json`` holds the digests recorded before target kinds and the wrist existed;
``tests/test_kinds.py`` asserts they still match. Run this file as a script to print fresh digests.
"""

from __future__ import annotations

import hashlib
import json
import sys

import torch

FIELDS_BEFORE_39 = (
    "tcp_pos", "tcp_vel", "finger_width", "close_cmd", "prev_action", "sphere_pos", "sphere_radius", "sphere_vel",
    "held", "held_offset", "dist_kind", "dist_pos", "dist_size", "dist_yaw", "dist_color", "sphere_color",
    "finger_color", "table_tex", "table_tint", "tex_scale", "tex_offset", "light_dir", "light_intensity", "ambient",
    "specular", "shininess", "focal", "cam_offset", "cam_rot", "image_noise", "blur", "action_gain", "latency",
    "action_noise", "slip_rate", "steps", "success", "done", "pushed", "dropped", "missed", "start_xy", "key",
)
"""The State fields that existed before issue 39 (new fields are not part of the pin)."""


def _feed(h, t: torch.Tensor) -> None:
    t = t.detach().cpu().contiguous()
    if t.dtype.is_floating_point:
        t = t + 0.0  # -0.0 and 0.0 are the same value
    h.update(str(t.dtype).encode() + str(tuple(t.shape)).encode() + t.numpy().tobytes())


def torch_digests(steps: int = 40, n: int = 12) -> dict[str, str]:
    from graspsim import GraspEnv, SimConfig
    from graspsim.expert.fsm import FSMExpert

    torch.set_num_threads(1)
    cfg = SimConfig()
    env = GraspEnv(cfg, num_envs=n, seed=7)
    env.reset(seeds=list(range(100, 100 + n)))
    expert = FSMExpert(cfg, num_envs=n, noise_std=0.03)
    hs = {k: hashlib.sha256() for k in ("state", "rgb", "mask", "gripper", "action")}
    for _ in range(steps):
        obs = env.observe()
        _feed(hs["rgb"], obs["rgb"])
        _feed(hs["mask"], obs["mask"])
        _feed(hs["gripper"], obs["gripper"])
        for k in FIELDS_BEFORE_39:
            _feed(hs["state"], getattr(env.state, k))
        action = expert.perturb(expert.act(env.privileged()))
        _feed(hs["action"], action)
        env.step(action)
    # a generator-drawn reset and a full render (depth, colour) of the result
    env.reset(torch.arange(0, n, 2))
    out = env.render()
    h = hashlib.sha256()
    for k in FIELDS_BEFORE_39:
        _feed(h, getattr(env.state, k))
    for t in (out.rgb, out.mask, out.alpha, out.depth, out.color):
        _feed(h, t)
    d = {k: v.hexdigest() for k, v in hs.items()}
    d["reset_render"] = h.hexdigest()
    return d


def bullet_digests(steps: int = 12, n: int = 2) -> dict[str, str]:
    from graspsim import SimConfig
    from graspsim.bullet import BulletGraspEnv
    from graspsim.expert.fsm import FSMExpert

    cfg = SimConfig()
    h = hashlib.sha256()
    with BulletGraspEnv(cfg, num_envs=n, seed=3, workers=0) as env:
        env.reset(seeds=[5, 6])
        expert = FSMExpert(cfg, num_envs=n)
        for _ in range(steps):
            obs = env.observe()
            _feed(h, obs["rgb"])
            _feed(h, obs["mask"])
            for k in FIELDS_BEFORE_39:
                _feed(h, getattr(env.state, k))
            a = expert.act(env.privileged())
            _feed(h, a)
            env.step(a)
    return {"bullet": h.hexdigest()}


if __name__ == "__main__":
    d = torch_digests()
    if "--bullet" in sys.argv:
        d.update(bullet_digests())
    print(json.dumps(d, indent=1, sort_keys=True))
