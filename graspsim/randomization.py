"""Domain randomization: draw ``n`` fresh scenes as a :class:`State` from a seeded generator.

``sample_scenes(cfg, n, generator, device)`` is the only source of per-scene randomness at reset;
with the same generator state it returns identical tensors (on CPU).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor

from .config import SimConfig
from .physics import keep_in_reach
from .rng import key_from_floats
from .state import KIND_BOX, KIND_CYLINDER, KIND_NONE, KIND_SPHERE, TARGET_KIND_CODES, State
from .textures import texture_count


def _u(lo_hi, shape, g: torch.Generator, device) -> Tensor:
    lo, hi = float(lo_hi[0]), float(lo_hi[1])
    return lo + (hi - lo) * torch.rand(shape, generator=g, device=device)


def hsv_to_rgb(h: Tensor, s: Tensor, v: Tensor) -> Tensor:
    """Vectorized HSV -> RGB; inputs (...,) in [0, 1]; returns (..., 3)."""
    k = torch.stack([torch.full_like(h, 5.0), torch.full_like(h, 3.0), torch.full_like(h, 1.0)], -1)
    k = (k + h.unsqueeze(-1) * 6.0) % 6.0
    f = torch.clamp(torch.minimum(k, 4.0 - k), 0.0, 1.0)
    return v.unsqueeze(-1) - v.unsqueeze(-1) * s.unsqueeze(-1) * f


def random_colors(shape, cfg: SimConfig, g: torch.Generator, device) -> Tensor:
    """Distractor colours: any hue outside the target band (plus margin), random saturation/value."""
    r = cfg.randomization
    lo = r.target_hue[1] + r.distractor_hue_margin
    span = 1.0 - (r.target_hue[1] - r.target_hue[0]) - 2 * r.distractor_hue_margin
    h = (lo + span * torch.rand(shape, generator=g, device=device)) % 1.0
    s = _u(r.color_saturation, shape, g, device)
    v = _u(r.color_value, shape, g, device)
    return hsv_to_rgb(h, s, v)


def rotation_xyz(angles: Tensor) -> Tensor:
    """Rotation matrices ``B,3,3`` from small angles ``B,3`` (about x, then y, then z)."""
    cx, cy, cz = torch.cos(angles).unbind(-1)
    sx, sy, sz = torch.sin(angles).unbind(-1)
    one, zero = torch.ones_like(cx), torch.zeros_like(cx)
    rx = torch.stack([one, zero, zero, zero, cx, -sx, zero, sx, cx], -1).view(-1, 3, 3)
    ry = torch.stack([cy, zero, sy, zero, one, zero, -sy, zero, cy], -1).view(-1, 3, 3)
    rz = torch.stack([cz, -sz, zero, sz, cz, zero, zero, zero, one], -1).view(-1, 3, 3)
    return rz @ ry @ rx


def nominal_camera_rotation(cfg: SimConfig, device) -> Tensor:
    """Camera axes (columns right, down, forward; gripper frame at wrist angle 0) for a camera at ``camera_offset``
    looking at the TCP, or along the embodiment's ``camera_forward`` when it names one."""
    body = cfg.body
    if body.camera_forward is not None:
        fwd = torch.tensor(body.camera_forward, dtype=torch.float32, device=device)
        fwd = fwd / fwd.norm()
        right = torch.tensor(body.camera_right, dtype=torch.float32, device=device)
    else:
        off = torch.tensor(cfg.camera_offset, dtype=torch.float32, device=device)
        fwd = -off / off.norm()
        right = torch.tensor([0.0, -1.0, 0.0], device=device)  # looking along +x, image right is -y
    right = right - fwd * (right @ fwd)
    right = right / right.norm()
    down = torch.linalg.cross(fwd, right)
    return torch.stack([right, down, fwd], dim=1)


def sample_scenes(cfg: SimConfig, n: int, generator: torch.Generator, device: torch.device | str = "cpu") -> State:
    """Draw ``n`` randomized scenes (fresh episodes) on ``device``.

    ``generator`` must live on ``device`` (``torch.Generator(device=device)``). Returns a State whose
    bookkeeping fields are zero (steps 0, not done, not held, gripper open, wrist at 0).

    Target kinds (``cfg.target``): with spheres alone nothing more is drawn, so the generator stream and every
    value are those of the simulator before kinds existed. With a wider mix the kind, cube side and yaw,
    cylinder diameter and height are drawn *after* every other draw (:func:`_draw_kinds`), so a seed's table,
    looks, camera and dynamics are the same whatever the mix; distractor slots that the larger target would
    now crowd are emptied.
    """
    if n <= 0:
        raise ValueError(f"sample_scenes: n must be positive, got {n}")
    r = cfg.randomization
    g, dev = generator, torch.device(device)
    f32 = dict(dtype=torch.float32, device=dev)

    radius = _u(r.sphere_diameter, (n,), g, dev) / 2
    sxy = _u(r.sphere_xy, (n, 2), g, dev)
    sphere_pos = torch.cat([sxy, radius[:, None]], dim=1)
    speed = _u(r.target_speed, (n,), g, dev)
    heading = 2 * math.pi * torch.rand((n,), generator=g, device=dev)
    sphere_vel = torch.stack([torch.cos(heading), torch.sin(heading)], -1) * speed[:, None]

    start_xy = sxy + _u(r.start_offset, (n, 2), g, dev)
    start_z = _u(r.start_height, (n, 1), g, dev)
    tcp = torch.cat([start_xy.clamp(-cfg.workspace, cfg.workspace), start_z], dim=1)
    if cfg.body.reach:  # an arm starts where it reaches straight down
        tcp = keep_in_reach(tcp, cfg)

    # Distractors: K slots, count uniform in 0..K, kind uniform, placed away from the target.
    K = r.max_distractors
    if K > 0:
        count = torch.randint(0, K + 1, (n,), generator=g, device=dev)
        active = torch.arange(K, device=dev)[None, :] < count[:, None]
        kind = torch.randint(1, 4, (n, K), generator=g, device=dev)
        size = _u(r.distractor_size, (n, K, 3), g, dev)
        # boxes: independent half-extents; cylinders: (r, r, h); spheres: (r, r, r)
        cyl = torch.stack([size[..., 0], size[..., 0], size[..., 2]], -1)
        sph = size[..., :1].expand(-1, -1, 3)
        size = torch.where((kind == KIND_CYLINDER)[..., None], cyl, size)
        size = torch.where((kind == KIND_SPHERE)[..., None], sph, size)
        # rejection sampling with a fixed number of candidates; slots with no valid candidate are emptied
        cand = _u(cfg.body.clutter_xy, (n, K, 8, 2), g, dev)
        reach = size[..., :2].norm(dim=-1)[..., None] + radius[:, None, None] + r.distractor_min_gap
        ok = (cand - sxy[:, None, None, :]).norm(dim=-1) > reach
        first = torch.argmax(ok.int(), dim=-1)  # first valid candidate (0 if none)
        any_ok = ok.any(dim=-1)
        dxy = torch.gather(cand, 2, first[..., None, None].expand(-1, -1, 1, 2)).squeeze(2)
        active = active & any_ok
        kind = torch.where(active, kind, torch.full_like(kind, KIND_NONE))
        dist_reach = size[..., :2].norm(dim=-1) + r.distractor_min_gap  # B,K: footprint + gap, without the target
        dist_pos = torch.cat([dxy, size[..., 2:3]], dim=-1)
        dist_yaw = _u((0.0, math.pi), (n, K), g, dev)
        dist_color = random_colors((n, K), cfg, g, dev)
    else:
        kind = torch.zeros((n, 0), dtype=torch.long, device=dev)
        size = torch.zeros((n, 0, 3), **f32)
        dist_pos = torch.zeros((n, 0, 3), **f32)
        dist_yaw = torch.zeros((n, 0), **f32)
        dist_color = torch.zeros((n, 0, 3), **f32)

    # Looks
    sphere_color = hsv_to_rgb(
        _u(r.target_hue, (n,), g, dev) % 1.0, _u(r.target_saturation, (n,), g, dev), _u(r.target_value, (n,), g, dev)
    )
    finger_color = 0.15 + 0.5 * torch.rand((n, 1), generator=g, device=dev).expand(-1, 3).contiguous()
    table_tex = torch.randint(0, texture_count(r.table_photos), (n,), generator=g, device=dev)
    table_tint = _u(r.table_tint, (n, 3), g, dev)
    tex_scale = _u(r.texture_scale, (n,), g, dev)
    tex_offset = torch.rand((n, 2), generator=g, device=dev)
    elev = _u(r.light_elevation, (n,), g, dev)
    azim = 2 * math.pi * torch.rand((n,), generator=g, device=dev)
    light_dir = torch.stack([torch.cos(elev) * torch.cos(azim), torch.cos(elev) * torch.sin(azim), torch.sin(elev)], -1)

    # Camera
    fov = _u(r.fov, (n,), g, dev)
    focal = (cfg.image_size / 2) / torch.tan(fov / 2)
    base = torch.tensor(cfg.camera_offset, **f32)
    cam_offset = base + _u((-r.mount_jitter_pos, r.mount_jitter_pos), (n, 3), g, dev)
    jitter = rotation_xyz(_u((-r.mount_jitter_rot, r.mount_jitter_rot), (n, 3), g, dev))
    cam_rot = jitter @ nominal_camera_rotation(cfg, dev)

    zeros_b = torch.zeros((n,), **f32)
    false_b = torch.zeros((n,), dtype=torch.bool, device=dev)
    state = State(
        tcp_pos=tcp,
        tcp_vel=torch.zeros((n, 3), **f32),
        finger_width=torch.full((n,), cfg.open_width, **f32),
        close_cmd=false_b.clone(),
        prev_action=torch.zeros((n, 4), **f32),
        wrist_yaw=zeros_b.clone(),
        wrist_rate=zeros_b.clone(),
        prev_wz=zeros_b.clone(),
        sphere_pos=sphere_pos,
        sphere_radius=radius,
        target_kind=torch.full((n,), KIND_SPHERE, dtype=torch.long, device=dev),
        target_half_height=radius.clone(),
        target_yaw=zeros_b.clone(),
        sphere_vel=sphere_vel,
        held=false_b.clone(),
        held_offset=torch.zeros((n, 3), **f32),
        dist_kind=kind,
        dist_pos=dist_pos,
        dist_size=size,
        dist_yaw=dist_yaw,
        dist_color=dist_color,
        sphere_color=sphere_color,
        finger_color=finger_color,
        table_tex=table_tex,
        table_tint=table_tint,
        tex_scale=tex_scale,
        tex_offset=tex_offset,
        light_dir=light_dir,
        light_intensity=_u(r.light_intensity, (n,), g, dev),
        ambient=_u(r.ambient, (n,), g, dev),
        specular=_u(r.specular, (n,), g, dev),
        shininess=_u(r.shininess, (n,), g, dev),
        focal=focal,
        cam_offset=cam_offset,
        cam_rot=cam_rot,
        image_noise=_u(r.image_noise, (n,), g, dev),
        blur=_u(r.blur, (n,), g, dev),
        action_gain=_u(r.action_gain, (n,), g, dev),
        latency=torch.rand((n,), generator=g, device=dev) < r.latency_prob,
        action_noise=_u(r.action_noise, (n,), g, dev),
        slip_rate=_u(r.slip_rate, (n,), g, dev),
        steps=torch.zeros((n,), dtype=torch.long, device=dev),
        success=false_b.clone(),
        done=false_b.clone(),
        pushed=false_b.clone(),
        dropped=false_b.clone(),
        missed=torch.zeros((n,), dtype=torch.long, device=dev),
        start_xy=sxy.clone(),
        # the episode's random key: a hash of the scene's own draws (no extra draw from the generator)
        key=key_from_floats(torch.cat([sphere_pos, tex_offset, azim[:, None], cam_offset], 1)),
    )
    if cfg.body.one_jaw:  # arms are printed in any colour: half the jaws take a distractor's colour instead of grey
        coloured = random_colors((n,), cfg, g, dev)
        pick = torch.rand((n,), generator=g, device=dev) < 0.5
        state.finger_color = torch.where(pick[:, None], coloured, state.finger_color)
    if not cfg.target.wrist:
        return state
    # a mix beyond spheres: the target's kind and shape, drawn after every other draw
    target_kind, half_w, half_h, target_yaw = _draw_kinds(cfg, n, g, dev, radius)
    if K > 0:  # empty the distractor slots that the target's footprint (a cube's half diagonal) now reaches
        foot = torch.where(target_kind == KIND_BOX, half_w * math.sqrt(2.0), half_w)
        crowded = (dist_pos[..., :2] - sxy[:, None, :]).norm(dim=-1) <= dist_reach + foot[:, None]
        state.dist_kind = torch.where(crowded, torch.full_like(kind, KIND_NONE), kind)
    return state.replace(target_kind=target_kind, sphere_radius=half_w, target_half_height=half_h,
                         target_yaw=target_yaw, sphere_pos=torch.cat([sxy, half_h[:, None]], dim=1))


def _draw_kinds(cfg: SimConfig, n: int, g: torch.Generator, dev: torch.device, sphere_radius: Tensor
                ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per-scene target kind and shape for a mix beyond spheres: (kind B int64, half-width B m, half height B m,
    yaw B rad). The kind is drawn from ``cfg.target.kinds`` by ``cfg.target.weights`` (uniform when empty); a cube's side, a cylinder's diameter and height
    are uniform in their ranges; a cube's yaw is uniform in [-pi, pi). Spheres keep ``sphere_radius``."""
    t = cfg.target
    codes = torch.tensor([TARGET_KIND_CODES[k] for k in t.kinds], dtype=torch.long, device=dev)
    if t.weights:
        w = torch.tensor(t.weights, dtype=torch.float64, device=dev)
        kind = codes[torch.multinomial(w, n, replacement=True, generator=g)]
    else:  # uniform: the draw of runs written before weights existed, unchanged
        kind = codes[torch.randint(0, len(t.kinds), (n,), generator=g, device=dev)]
    side = _u(t.cube_side, (n,), g, dev)
    cyl_d = _u(t.cylinder_diameter, (n,), g, dev)
    cyl_h = _u(t.cylinder_height, (n,), g, dev)
    yaw = _u((-math.pi, math.pi), (n,), g, dev)
    cube, cyl = kind == KIND_BOX, kind == KIND_CYLINDER
    half_w = torch.where(cube, side / 2, torch.where(cyl, cyl_d / 2, sphere_radius))
    half_h = torch.where(cyl, cyl_h / 2, half_w)
    return kind, half_w, half_h, torch.where(cube, yaw, torch.zeros_like(yaw))


def scenes_from_seeds(cfg: SimConfig, seeds: Sequence[int], device: torch.device | str = "cpu") -> State:
    """One fresh scene per episode seed, stacked to ``len(seeds)`` rows on ``device``. Pure.

    Row ``i`` is exactly the scene ``sample_scenes(cfg, 1, Generator().manual_seed(seeds[i]))`` draws,
    i.e. what ``GraspEnv(cfg, num_envs=1, seed=seeds[i])`` starts with, whatever the other seeds are
    (see :mod:`graspsim.seeds` for where episode seeds come from). The loop runs over the given seeds
    only (the scenes that start an episode), never over the whole batch.
    """
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("scenes_from_seeds: no seeds given")
    dev = torch.device(device)
    parts = [sample_scenes(cfg, 1, torch.Generator(device=dev).manual_seed(s), dev) for s in seeds]
    if len(parts) == 1:
        return parts[0]
    return State(**{k: torch.cat([getattr(p, k) for p in parts]) for k, _ in parts[0].items()})
