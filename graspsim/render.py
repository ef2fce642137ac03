"""Batched wrist-camera ray caster: RGB and the exact visible-target mask for every scene in one call.

Scene primitives: the textured table plane z = 0, the target sphere, distractors (yawed boxes, vertical
cylinders, spheres) and the two finger boxes. One primary ray per pixel through a pinhole camera;
the first surface hit decides the pixel, so the target mask is occlusion-aware by construction.
Shading: ambient + Lambert diffuse + Blinn-Phong specular from one directional light, with hard
shadows from a shadow ray per pixel. Post-processing (optional): 3x3 Gaussian blur blend and
additive Gaussian noise, applied to RGB only (the mask stays exact).

Speed: the table hit is computed densely (one division per pixel). Objects are small on screen, so
each object is first tested against its bounding sphere for all pixels with one batched matmul; the
exact intersection runs only on the surviving (scene, pixel, object) candidates. Shadow rays use the
same two-stage test. Nothing loops over scenes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .config import SimConfig
from .physics import finger_boxes
from .state import KIND_BOX, KIND_CYLINDER, KIND_NONE, KIND_SPHERE, State
from .textures import texture_bank

EPS = 1e-5
INF = float("inf")
TARGET_ID = 0  # object slot of the target sphere; the table is -1


@dataclass
class RenderOutput:
    """``rgb``: B,3,H,W uint8; ``mask``: B,H,W bool (target visible); ``depth``: B,H,W float32 (metres
    along the ray, inf for background); ``alpha``: B,H,W bool (an object, not the table, is hit);
    ``color``: B,3,H,W float32 linear colour in [0, 1] before quantisation (after post-processing)."""

    rgb: Tensor
    mask: Tensor
    depth: Tensor
    alpha: Tensor
    color: Tensor


@dataclass
class Objects:
    """Per-scene object table, ``M`` slots: 0 = target, then fingers, then distractors."""

    kind: Tensor  # B,M int64 (KIND_*)
    centre: Tensor  # B,M,3
    half: Tensor  # B,M,3
    yaw: Tensor  # B,M
    color: Tensor  # B,M,3
    active: Tensor  # B,M bool
    bound: Tensor  # B,M bounding-sphere radius


def scene_objects(state: State, cfg: SimConfig, fingers: bool = True, distractors: bool = True) -> Objects:
    B, dev = state.batch_size, state.device
    r = state.sphere_radius
    kinds = [torch.full((B, 1), KIND_SPHERE, dtype=torch.long, device=dev)]
    centres = [state.sphere_pos[:, None]]
    halves = [torch.stack([r, r, r], -1)[:, None]]
    yaws = [torch.zeros((B, 1), device=dev)]
    colors = [state.sphere_color[:, None]]
    active = [torch.ones((B, 1), dtype=torch.bool, device=dev)]
    if fingers:
        fc, fh = finger_boxes(state.tcp_pos, state.finger_width, cfg)
        kinds.append(torch.full((B, 2), KIND_BOX, dtype=torch.long, device=dev))
        centres.append(fc)
        halves.append(fh)
        yaws.append(torch.zeros((B, 2), device=dev))
        colors.append(state.finger_color[:, None].expand(-1, 2, -1))
        active.append(torch.ones((B, 2), dtype=torch.bool, device=dev))
    if distractors and state.dist_kind.shape[1] > 0:
        kinds.append(state.dist_kind)
        centres.append(state.dist_pos)
        halves.append(state.dist_size)
        yaws.append(state.dist_yaw)
        colors.append(state.dist_color)
        active.append(state.dist_kind != KIND_NONE)
    kind = torch.cat(kinds, 1)
    half = torch.cat(halves, 1)
    bound = torch.where(kind == KIND_SPHERE, half[..., 0], half.norm(dim=-1))
    return Objects(kind, torch.cat(centres, 1), half, torch.cat(yaws, 1), torch.cat(colors, 1), torch.cat(active, 1), bound)


# ----------------------------------------------------------------------------- exact intersections
# Each takes C rays (origins o, directions d: C,3) and per-ray object parameters; returns the first
# hit distance t (C; inf for a miss, only t > EPS counts) and the unit surface normal (C,3).


def _sphere_hit(o: Tensor, d: Tensor, c: Tensor, r: Tensor) -> tuple[Tensor, Tensor]:
    oc = o - c
    b = (oc * d).sum(-1)
    cc = (oc * oc).sum(-1) - r * r
    disc = b * b - cc
    sq = torch.sqrt(disc.clamp_min(0.0))
    t0, t1 = -b - sq, -b + sq
    t = torch.where(t0 > EPS, t0, t1)
    hit = (disc >= 0) & (t > EPS)
    t = torch.where(hit, t, torch.full_like(t, INF))
    n = (o + t.clamp(max=1e3)[:, None] * d - c) / r[:, None]
    return t, n


def _rot_z(v: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    return torch.stack([cos * v[:, 0] - sin * v[:, 1], sin * v[:, 0] + cos * v[:, 1], v[:, 2]], -1)


def _box_hit(o: Tensor, d: Tensor, c: Tensor, h: Tensor, yaw: Tensor) -> tuple[Tensor, Tensor]:
    cs, sn = torch.cos(yaw), torch.sin(yaw)
    p = _rot_z(o - c, cs, -sn)
    dl = _rot_z(d, cs, -sn)
    inv = 1.0 / torch.where(dl.abs() < 1e-12, torch.full_like(dl, 1e-12), dl)
    t1 = (-h - p) * inv
    t2 = (h - p) * inv
    tn = torch.minimum(t1, t2)
    tf = torch.maximum(t1, t2)
    tmin, axis = tn.max(-1)
    tmax = tf.min(-1).values
    t = torch.where(tmin > EPS, tmin, tmax)
    hit = (tmax >= tmin) & (t > EPS)
    t = torch.where(hit, t, torch.full_like(t, INF))
    # normal: entering face for an outside origin, else the exit face
    exit_axis = tf.argmin(-1)
    ax = torch.where(tmin > EPS, axis, exit_axis)
    s_ax = torch.sign(dl.gather(1, ax[:, None]))
    sgn = torch.where((tmin > EPS)[:, None], -s_ax, s_ax)
    n_local = torch.zeros_like(p).scatter_(1, ax[:, None], sgn)
    return t, _rot_z(n_local, cs, sn)


def _cylinder_hit(o: Tensor, d: Tensor, c: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
    r, hz = h[:, 0], h[:, 2]
    p = o - c
    a = d[:, 0] ** 2 + d[:, 1] ** 2
    b = p[:, 0] * d[:, 0] + p[:, 1] * d[:, 1]
    cc = p[:, 0] ** 2 + p[:, 1] ** 2 - r * r
    disc = b * b - a * cc
    sq = torch.sqrt(disc.clamp_min(0.0))
    a_safe = a.clamp_min(1e-12)
    ts0 = (-b - sq) / a_safe
    ts1 = (-b + sq) / a_safe
    side_ok = (disc >= 0) & (a > 1e-12)

    def side_valid(t):
        z = p[:, 2] + t * d[:, 2]
        return side_ok & (t > EPS) & (z.abs() <= hz)

    dz = torch.where(d[:, 2].abs() < 1e-12, torch.full_like(d[:, 2], 1e-12), d[:, 2])
    tt = (hz - p[:, 2]) / dz
    tb = (-hz - p[:, 2]) / dz

    def cap_valid(t):
        x = p[:, 0] + t * d[:, 0]
        y = p[:, 1] + t * d[:, 1]
        return (t > EPS) & (x * x + y * y <= r * r)

    inf = torch.full_like(ts0, INF)
    cands = torch.stack(
        [
            torch.where(side_valid(ts0), ts0, inf),
            torch.where(side_valid(ts1), ts1, inf),
            torch.where(cap_valid(tt), tt, inf),
            torch.where(cap_valid(tb), tb, inf),
        ],
        -1,
    )
    t, which = cands.min(-1)
    q = p + t.clamp(max=1e3)[:, None] * d
    n_side = torch.stack([q[:, 0] / r, q[:, 1] / r, torch.zeros_like(r)], -1)
    n_top = torch.zeros_like(q)
    n_top[:, 2] = 1.0
    n = torch.where((which >= 2)[:, None], n_top, n_side)
    n[:, 2] = torch.where(which == 3, -1.0, n[:, 2])
    return t, n


def intersect(o: Tensor, d: Tensor, kind: Tensor, c: Tensor, h: Tensor, yaw: Tensor) -> tuple[Tensor, Tensor]:
    """Exact first hit of C rays with C objects of mixed kinds; returns (t: C, normal: C,3)."""
    t = torch.full(kind.shape, INF, device=o.device)
    n = torch.zeros_like(o)
    for k in (KIND_SPHERE, KIND_BOX, KIND_CYLINDER):  # three primitive kinds, not scenes
        sel = torch.nonzero(kind == k).flatten()
        if sel.numel() == 0:
            continue
        if k == KIND_SPHERE:
            tk, nk = _sphere_hit(o[sel], d[sel], c[sel], h[sel, 0])
        elif k == KIND_BOX:
            tk, nk = _box_hit(o[sel], d[sel], c[sel], h[sel], yaw[sel])
        else:
            tk, nk = _cylinder_hit(o[sel], d[sel], c[sel], h[sel])
        t[sel] = tk
        n[sel] = nk
    return t, n


# ----------------------------------------------------------------------------- camera
def pixel_rays(state: State, size: int) -> tuple[Tensor, Tensor]:
    """Camera origins ``B,3`` and unit ray directions ``B,N,3`` (N = size*size, row-major, world frame)."""
    dev = state.device
    c = torch.arange(size, device=dev, dtype=torch.float32) + 0.5 - size / 2
    v, u = torch.meshgrid(c, c, indexing="ij")
    uv = torch.stack([u.flatten(), v.flatten()], -1)  # N,2
    cam = torch.cat([uv[None] / state.focal[:, None, None], torch.ones((state.batch_size, uv.shape[0], 1), device=dev)], -1)
    d = cam @ state.cam_rot.transpose(1, 2)
    d = d / d.norm(dim=-1, keepdim=True)
    return state.tcp_pos + state.cam_offset, d


def project(state: State, points: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """Project world points ``B,P,3`` to pixel coordinates ``B,P,2`` (x right, y down, pixel units,
    origin at the top-left corner) and camera depth ``B,P`` (metres along the optical axis)."""
    rel = points - (state.tcp_pos + state.cam_offset)[:, None]
    cam = rel @ state.cam_rot  # B,P,3 in (right, down, forward)
    z = cam[..., 2]
    pix = cam[..., :2] / z.clamp_min(1e-6)[..., None] * state.focal[:, None, None] + size / 2
    return pix, z


# ----------------------------------------------------------------------------- main entry
def _first_hits(o: Tensor, d: Tensor, objs: Objects, t_limit: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Closest object hit per ray for rays sharing one origin per scene.

    o: B,3, d: B,N,3, t_limit: B,N (hits beyond it are ignored). Returns (t B,N, object id B,N with
    -1 for none, normal B,N,3).
    """
    B, N, _ = d.shape
    oc = objs.centre - o[:, None]  # B,M,3
    proj = d @ oc.transpose(1, 2)  # B,N,M
    dist2 = (oc * oc).sum(-1)[:, None, :] - proj * proj
    cand = (dist2 < (objs.bound * objs.bound)[:, None, :]) & (proj > -objs.bound[:, None, :]) & objs.active[:, None, :]
    bi, ni, mi = torch.nonzero(cand, as_tuple=True)
    t_best = t_limit.clone()
    obj = torch.full((B, N), -1, dtype=torch.long, device=d.device)
    normal = torch.zeros((B, N, 3), device=d.device)
    if bi.numel() == 0:
        return t_best, obj, normal
    t, n = intersect(o[bi], d[bi, ni], objs.kind[bi, mi], objs.centre[bi, mi], objs.half[bi, mi], objs.yaw[bi, mi])
    flat = bi * N + ni
    tb = t_best.view(-1)
    tb.scatter_reduce_(0, flat, t, reduce="amin")
    win = (t < INF) & (t <= tb[flat])
    wf = flat[win]
    obj.view(-1)[wf] = mi[win]
    normal.view(-1, 3)[wf] = n[win]
    return t_best, obj, normal


def _shadowed(p: Tensor, L: Tensor, objs: Objects, skip: Tensor) -> Tensor:
    """B,N bool: the ray from surface points ``p`` (B,N,3) towards the light ``L`` (B,3) hits an object
    other than ``skip`` (B,N object id of the surface itself)."""
    B, N, _ = p.shape
    cL = (objs.centre * L[:, None]).sum(-1)  # B,M
    pL = (p * L[:, None]).sum(-1)  # B,N
    proj = cL[:, None, :] - pL[..., None]  # B,N,M
    cp = p @ objs.centre.transpose(1, 2)  # B,N,M
    dist2 = (objs.centre * objs.centre).sum(-1)[:, None, :] - 2 * cp + (p * p).sum(-1)[..., None] - proj * proj
    cand = (dist2 < (objs.bound * objs.bound)[:, None, :]) & (proj > -objs.bound[:, None, :]) & objs.active[:, None, :]
    cand &= torch.arange(objs.kind.shape[1], device=p.device)[None, None, :] != skip[..., None]
    bi, ni, mi = torch.nonzero(cand, as_tuple=True)
    out = torch.zeros((B, N), dtype=torch.bool, device=p.device)
    if bi.numel() == 0:
        return out
    t, _ = intersect(p[bi, ni], L[bi], objs.kind[bi, mi], objs.centre[bi, mi], objs.half[bi, mi], objs.yaw[bi, mi])
    hit = t < INF
    out.view(-1)[(bi * N + ni)[hit]] = True
    return out


_BANKS: dict[str, Tensor] = {}


def _bank(device: torch.device) -> Tensor:
    key = str(device)
    if key not in _BANKS:
        _BANKS[key] = texture_bank(device)
    return _BANKS[key]


def render(
    state: State,
    cfg: SimConfig,
    *,
    table: bool = True,
    fingers: bool = True,
    distractors: bool = True,
    shadows: bool | None = None,
    post: bool = True,
    generator: torch.Generator | None = None,
) -> RenderOutput:
    """Render every scene of ``state`` from its wrist camera.

    ``table=False`` leaves the background black with ``alpha`` False there (for compositing onto real
    photos); ``post=False`` skips blur and noise; ``generator`` drives the pixel noise.
    """
    size = cfg.image_size
    B, dev = state.batch_size, state.device
    shadows = cfg.shadows if shadows is None else shadows
    o, d = pixel_rays(state, size)
    N = d.shape[1]

    # table plane z = 0
    dz = d[..., 2]
    t_table = torch.where(dz < -1e-9, -o[:, 2:3] / dz.clamp(max=-1e-9), torch.full_like(dz, INF))
    if not table:
        t_table = torch.full_like(dz, INF)

    objs = scene_objects(state, cfg, fingers=fingers, distractors=distractors)
    t, obj, normal = _first_hits(o, d, objs, t_table)
    is_table = (obj < 0) & (t < INF)
    hit_any = t < INF
    p = o[:, None] + t.clamp(max=1e3)[..., None] * d  # B,N,3

    # base colour
    safe_obj = obj.clamp_min(0)
    obj_col = torch.gather(objs.color, 1, safe_obj[..., None].expand(-1, -1, 3))
    bank = _bank(dev)
    S = bank.shape[1]
    uv = (p[..., :2] * state.tex_scale[:, None, None] + state.tex_offset[:, None]) % 1.0
    ij = (uv * S).long().clamp_(0, S - 1)
    flat = (state.table_tex[:, None] * S + ij[..., 1]) * S + ij[..., 0]
    tex_col = bank.view(-1, 3)[flat] * state.table_tint[:, None]
    base = torch.where(is_table[..., None], tex_col, obj_col)
    normal = torch.where(is_table[..., None], torch.tensor([0.0, 0.0, 1.0], device=dev).expand_as(normal), normal)

    # lighting
    L = state.light_dir
    ndl = (normal * L[:, None]).sum(-1).clamp_min(0.0)
    if shadows:
        lit = ~_shadowed(p + normal * 1e-4, L, objs, obj)
        ndl = ndl * lit
    half_vec = L[:, None] - d
    half_vec = half_vec / half_vec.norm(dim=-1, keepdim=True).clamp_min(1e-9)
    spec_strength = torch.where(is_table, 0.15 * state.specular[:, None], state.specular[:, None])
    spec = spec_strength * (normal * half_vec).sum(-1).clamp_min(0.0) ** state.shininess[:, None] * (ndl > 0)
    color = base * (state.ambient[:, None, None] + state.light_intensity[:, None, None] * ndl[..., None]) + spec[..., None]
    color = torch.where(hit_any[..., None], color, torch.zeros_like(color))

    color = color.clamp(0.0, 1.0).view(B, size, size, 3).permute(0, 3, 1, 2)
    if post:
        color = postprocess(color, state.blur, state.image_noise, generator)
    mask = (obj == TARGET_ID).view(B, size, size)
    alpha = (obj >= 0).view(B, size, size)
    depth = torch.where(hit_any, t, torch.full_like(t, INF)).view(B, size, size)
    rgb = (color * 255.0 + 0.5).to(torch.uint8)
    return RenderOutput(rgb=rgb, mask=mask, depth=depth, alpha=alpha, color=color)


_BLUR = torch.tensor([1.0, 2.0, 1.0]) / 4.0


def postprocess(color: Tensor, blur: Tensor, noise: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Blur blend and Gaussian noise on ``color`` (B,3,H,W float in [0, 1]); ``blur``, ``noise``: B."""
    B, C, H, W = color.shape
    k = (_BLUR.to(color.device)[:, None] * _BLUR.to(color.device)[None, :]).expand(C, 1, 3, 3)
    blurred = F.conv2d(F.pad(color, (1, 1, 1, 1), mode="replicate"), k, groups=C)
    out = torch.lerp(color, blurred, blur.view(B, 1, 1, 1))
    out = out + torch.randn(out.shape, generator=generator, device=color.device) * noise.view(B, 1, 1, 1)
    return out.clamp(0.0, 1.0)
