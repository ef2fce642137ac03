"""Batched wrist-camera ray caster: RGB and the exact visible-target mask for every scene in one call.

Scene primitives: the textured table plane z = 0, the target sphere, distractors (yawed boxes, vertical
cylinders, spheres) and the two finger boxes. One primary ray per pixel through a pinhole camera;
the first surface hit decides the pixel, so the target mask is occlusion-aware by construction.
Shading: ambient + Lambert diffuse + Blinn-Phong specular (objects) from one directional light,
with hard shadows from a per-scene shadow map (see ``_shadowed``); the table is matte. Post-processing (optional): 3x3 Gaussian blur blend and
additive Gaussian noise, applied to RGB only (the mask stays exact).

Speed: the table hit is computed densely (one division per pixel). Objects are small on screen, so
the exact intersection runs only on the (scene, pixel, object) candidates inside each object's projected
bounding box. Object pixels are shaded sparsely. Nothing loops over scenes.
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


def intersect(kind: int, o: Tensor, d: Tensor, c: Tensor, h: Tensor, yaw: Tensor) -> tuple[Tensor, Tensor]:
    """Exact first hit of C rays with C objects of one primitive ``kind``; returns (t: C, normal: C,3)."""
    if kind == KIND_SPHERE:
        return _sphere_hit(o, d, c, h[:, 0])
    if kind == KIND_BOX:
        return _box_hit(o, d, c, h, yaw)
    if kind == KIND_CYLINDER:
        return _cylinder_hit(o, d, c, h)
    raise ValueError(f"unknown primitive kind {kind}")


PRIMITIVES = (KIND_SPHERE, KIND_BOX, KIND_CYLINDER)


def _gather(objs: "Objects", b: Tensor, m: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-candidate (centre C,3, half C,3, yaw C) of objects ``m`` in scenes ``b``."""
    M = objs.kind.shape[1]
    fm = b * M + m
    return (objs.centre.reshape(-1, 3).index_select(0, fm), objs.half.reshape(-1, 3).index_select(0, fm),
            objs.yaw.reshape(-1).index_select(0, fm))


def _kind_boxes(objs: "Objects", kind: int, x0: Tensor, x1: Tensor) -> Tensor:
    """``x1`` with the boxes of objects that are not active primitives of ``kind`` emptied."""
    return torch.where(objs.active & (objs.kind == kind), x1, x0 - 1)


# ----------------------------------------------------------------------------- camera
_GRIDS: dict[tuple[int, str], tuple[Tensor, Tensor]] = {}


def _pixel_grid(size: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Pixel-centre offsets from the principal point ``N,2`` (u right, v down) and ``u^2 + v^2`` (N)."""
    key = (size, str(device))
    if key not in _GRIDS:
        c = torch.arange(size, device=device, dtype=torch.float32) + 0.5 - size / 2
        v, u = torch.meshgrid(c, c, indexing="ij")
        uv = torch.stack([u.flatten(), v.flatten()], -1)
        _GRIDS[key] = (uv, (uv * uv).sum(-1))
    return _GRIDS[key]


def pixel_rays(state: State, size: int) -> tuple[Tensor, Tensor]:
    """Camera origins ``B,3`` and unit ray directions ``B,N,3`` (N = size*size, row-major, world frame).

    The camera-frame direction of pixel (u, v) is (u, v, f) / sqrt(u^2 + v^2 + f^2).
    """
    uv, r2 = _pixel_grid(size, state.device)
    B, f = state.batch_size, state.focal
    cam = torch.cat([uv.expand(B, -1, -1), f[:, None, None].expand(-1, uv.shape[0], 1)], -1)
    inv = torch.rsqrt(r2[None] + (f * f)[:, None])
    d = (cam @ state.cam_rot.transpose(1, 2)) * inv[..., None]
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
_CORNERS = torch.tensor([[sx, sy, sz] for sx in (-1.0, 1.0) for sy in (-1.0, 1.0) for sz in (-1.0, 1.0)])


def screen_boxes(state: State, objs: Objects, size: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Conservative pixel bounding boxes ``x0, x1, y0, y1`` (B,M int64, inclusive) of every object.

    The projection of a convex solid lies inside the projection of its bounding box's 8 corners.
    Objects reaching behind the camera plane get the whole image; inactive ones an empty box.
    """
    dev = state.device
    corners = _CORNERS.to(dev) * objs.half[:, :, None, :]  # B,M,8,3 (local)
    # boxes rotate with their yaw; spheres and cylinders are symmetric about z
    yaw = torch.where(objs.kind == KIND_BOX, objs.yaw, torch.zeros_like(objs.yaw))[..., None]
    cs, sn = torch.cos(yaw), torch.sin(yaw)
    x = cs * corners[..., 0] - sn * corners[..., 1]
    y = sn * corners[..., 0] + cs * corners[..., 1]
    world = torch.stack([x, y, corners[..., 2]], -1) + objs.centre[:, :, None, :]
    B, M = objs.kind.shape
    pix, z = project(state, world.view(B, M * 8, 3), size)
    pix, z = pix.view(B, M, 8, 2), z.view(B, M, 8)
    behind = (z <= 1e-4).any(-1)
    lo = pix.min(2).values
    hi = pix.max(2).values
    x0 = torch.ceil(lo[..., 0] - 0.5).clamp(0, size).long()
    x1 = torch.floor(hi[..., 0] - 0.5).clamp(-1, size - 1).long()
    y0 = torch.ceil(lo[..., 1] - 0.5).clamp(0, size).long()
    y1 = torch.floor(hi[..., 1] - 0.5).clamp(-1, size - 1).long()
    full0, full1 = torch.zeros_like(x0), torch.full_like(x1, size - 1)
    x0, y0 = torch.where(behind, full0, x0), torch.where(behind, full0, y0)
    x1, y1 = torch.where(behind, full1, x1), torch.where(behind, full1, y1)
    empty = ~objs.active
    x1 = torch.where(empty, x0 - 1, x1)
    return x0, x1, y0, y1


def enumerate_boxes(x0: Tensor, x1: Tensor, y0: Tensor, y1: Tensor, size: int) -> tuple[Tensor, Tensor, Tensor]:
    """All (scene, pixel, object) triples inside the per-object pixel boxes, without a loop.

    Inputs B,M int64 (inclusive bounds). Returns (b, n, m) int64 index tensors, n = y * size + x.
    """
    B, M = x0.shape
    w = (x1 - x0 + 1).clamp_min(0).flatten()
    h = (y1 - y0 + 1).clamp_min(0).flatten()
    counts = w * h
    total = int(counts.sum())
    dev = x0.device
    if total == 0:
        e = torch.zeros(0, dtype=torch.long, device=dev)
        return e, e, e
    owner = torch.repeat_interleave(torch.arange(B * M, device=dev), counts, output_size=total)
    start = torch.cumsum(counts, 0) - counts
    local = torch.arange(total, device=dev) - start[owner]
    wo = w[owner]
    px = x0.flatten()[owner] + local % wo
    py = y0.flatten()[owner] + local // wo
    return owner // M, py * size + px, owner % M


def _first_hits(state: State, o: Tensor, d: Tensor, objs: Objects, t_limit: Tensor, size: int
                ) -> tuple[Tensor, Tensor, Tensor]:
    """Closest object hit per primary ray.

    o: B,3 camera centres, d: B,N,3 ray directions, t_limit: B,N (hits beyond it are ignored, e.g. the
    table distance). Returns (t B,N, object id B,N with -1 for none, normal B,N,3).
    """
    B, N, _ = d.shape
    x0, x1, y0, y1 = screen_boxes(state, objs, size)
    ts, ns, flats, ms = [], [], [], []
    for kind in PRIMITIVES:  # three primitive kinds, not scenes
        bi, ni, mi = enumerate_boxes(x0, _kind_boxes(objs, kind, x0, x1), y0, y1, size)
        if bi.numel() == 0:
            continue
        flat = bi * N + ni
        c, h, yaw = _gather(objs, bi, mi)
        t, n = intersect(kind, o.index_select(0, bi), d.reshape(-1, 3).index_select(0, flat), c, h, yaw)
        ts.append(t), ns.append(n), flats.append(flat), ms.append(mi)
    t_best = t_limit.clone()
    obj = torch.full((B, N), -1, dtype=torch.long, device=d.device)
    if not ts:
        e = torch.zeros(0, dtype=torch.long, device=d.device)
        return t_best, obj, (e, e, torch.zeros((0, 3), device=d.device))
    t, n, flat, mi = torch.cat(ts), torch.cat(ns), torch.cat(flats), torch.cat(ms)
    tb = t_best.view(-1)
    tb.scatter_reduce_(0, flat, t, reduce="amin")
    win = (t < INF) & (t <= tb.index_select(0, flat))
    wf, wm, wn = flat[win], mi[win], n[win]
    obj.view(-1)[wf] = wm
    return t_best, obj, (wf, wm, wn)


SHADOW_MAP = 64  # texels per side of the per-scene shadow map
SHADOW_BIAS = 1e-3  # metres along the light direction


def _shadowed(p: Tensor, L: Tensor, objs: Objects, skip: Tensor, valid: Tensor, G: int = SHADOW_MAP) -> Tensor:
    """B,N bool: surface points ``p`` (B,N,3) are hidden from the directional light ``L`` (B,3).

    A shadow map per scene: an orthographic grid perpendicular to ``L`` spanning the part of the
    occluders' footprint that falls on visible surface points (``valid`` B,N), so texels get finer as
    the camera closes in. Only texels inside an occluder's footprint are ray-cast (exactly, along -L), storing the
    light-facing surface height and which object it belongs to; each point then does one lookup.
    Objects never shadow themselves (``skip`` = object id of each point; convex solids are handled by
    the n.L term). Resolution is ``G`` texels across the occluders' extent.
    """
    B, N, _ = p.shape
    dev = p.device
    helper = torch.where(L[:, 2:3].abs() < 0.9, torch.tensor([0.0, 0.0, 1.0], device=dev), torch.tensor([1.0, 0.0, 0.0], device=dev))
    e1 = torch.linalg.cross(L, helper)
    e1 = e1 / e1.norm(dim=-1, keepdim=True)
    e2 = torch.linalg.cross(L, e1)
    frame = torch.stack([e1, e2, L], -1)  # B,3,3: light-space axes as columns
    cl = objs.centre @ frame  # B,M,3 light-space coordinates of the occluders
    ca, cb, cs = cl.unbind(-1)
    pl = p @ frame  # B,N,3 light-space coordinates of the surface points
    pa, pb, ps = pl.unbind(-1)
    R = objs.bound
    big = torch.full_like(ca, 1e9)
    lo_a = torch.where(objs.active, ca - R, big).min(1).values
    lo_b = torch.where(objs.active, cb - R, big).min(1).values
    hi_a = torch.where(objs.active, ca + R, -big).max(1).values
    hi_b = torch.where(objs.active, cb + R, -big).max(1).values
    bigp = torch.full_like(pa, 1e9)
    lo_a = torch.maximum(lo_a, torch.where(valid, pa, bigp).min(1).values)
    lo_b = torch.maximum(lo_b, torch.where(valid, pb, bigp).min(1).values)
    hi_a = torch.minimum(hi_a, torch.where(valid, pa, -bigp).max(1).values)
    hi_b = torch.minimum(hi_b, torch.where(valid, pb, -bigp).max(1).values)
    texel = (torch.maximum(hi_a - lo_a, hi_b - lo_b) / G).clamp_min(1e-5)  # B
    fx0 = torch.floor((ca - R - lo_a[:, None]) / texel[:, None]).long().clamp(0, G)
    fx1 = torch.floor((ca + R - lo_a[:, None]) / texel[:, None]).long().clamp(-1, G - 1)
    fy0 = torch.floor((cb - R - lo_b[:, None]) / texel[:, None]).long().clamp(0, G)
    fy1 = torch.floor((cb + R - lo_b[:, None]) / texel[:, None]).long().clamp(-1, G - 1)
    heights, flats, owners = [], [], []
    for kind in PRIMITIVES:  # three primitive kinds, not scenes
        bi, ti, mi = enumerate_boxes(fx0, _kind_boxes(objs, kind, fx0, fx1), fy0, fy1, G)
        if bi.numel() == 0:
            continue
        texel_b = texel.index_select(0, bi)
        ta = lo_a.index_select(0, bi) + ((ti % G).float() + 0.5) * texel_b
        tb = lo_b.index_select(0, bi) + ((ti // G).float() + 0.5) * texel_b
        fm = bi * objs.kind.shape[1] + mi
        top = cs.reshape(-1).index_select(0, fm) + R.reshape(-1).index_select(0, fm) + 0.01
        Lb = L.index_select(0, bi)
        origin = e1.index_select(0, bi) * ta[:, None] + e2.index_select(0, bi) * tb[:, None] + Lb * top[:, None]
        c, h, yaw = _gather(objs, bi, mi)
        t, _ = intersect(kind, origin, -Lb, c, h, yaw)
        hit = t < INF
        heights.append((top - t)[hit]), flats.append((bi * G * G + ti)[hit]), owners.append(mi[hit])
    out = torch.zeros((B, N), dtype=torch.bool, device=dev)
    if not heights or sum(x.numel() for x in heights) == 0:
        return out
    height, flat, mi = torch.cat(heights), torch.cat(flats), torch.cat(owners)
    smap = torch.full((B * G * G,), -INF, device=dev)
    smap.scatter_reduce_(0, flat, height, reduce="amax")
    owner = torch.full((B * G * G,), -1, dtype=torch.long, device=dev)
    win = height >= smap.index_select(0, flat)
    owner[flat[win]] = mi[win]
    # look up every surface point
    tx = torch.floor((pa - lo_a[:, None]) / texel[:, None]).long()
    ty = torch.floor((pb - lo_b[:, None]) / texel[:, None]).long()
    inside = (tx >= 0) & (tx < G) & (ty >= 0) & (ty < G)
    idx = (torch.arange(B, device=dev)[:, None] * G * G + (ty.clamp(0, G - 1) * G + tx.clamp(0, G - 1))).view(-1)
    lit_height = smap.index_select(0, idx).view(B, N)
    occluder = owner.index_select(0, idx).view(B, N)
    return inside & (lit_height > ps + SHADOW_BIAS) & (occluder != skip)


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
    t, obj, (wf, wm, wn) = _first_hits(state, o, d, objs, t_table, size)
    hit_any = t < INF
    p = o[:, None] + t.clamp(max=1e3)[..., None] * d  # B,N,3 first-hit points
    L = state.light_dir
    lit = ~_shadowed(p, L, objs, obj, hit_any) if shadows else torch.ones((B, N), dtype=torch.bool, device=dev)

    # table pixels (dense, constant normal +z): texture x tint x (ambient + diffuse)
    bank = _bank(dev)
    S = bank.shape[1]
    uv = (p[..., :2] * state.tex_scale[:, None, None] + state.tex_offset[:, None]) % 1.0
    ij = (uv * S).long().clamp_(0, S - 1)
    flat = (state.table_tex[:, None] * S + ij[..., 1]) * S + ij[..., 0]
    shade = state.ambient[:, None] + (state.light_intensity * L[:, 2].clamp_min(0.0))[:, None] * lit
    shade = torch.where(hit_any & (obj < 0), shade, torch.zeros_like(shade))
    color = bank.view(-1, 3).index_select(0, flat.view(-1)).view(B, N, 3) * (state.table_tint[:, None] * shade[..., None])

    # object pixels (sparse): ambient + Lambert + Blinn-Phong
    if wf.numel():
        bw = wf // N
        Lw = L.index_select(0, bw)
        ndl = (wn * Lw).sum(-1).clamp_min(0.0) * lit.view(-1).index_select(0, wf)
        hv = Lw - d.reshape(-1, 3).index_select(0, wf)
        hv = hv / hv.norm(dim=-1, keepdim=True).clamp_min(1e-9)
        spec = state.specular[bw] * (wn * hv).sum(-1).clamp_min(0.0) ** state.shininess[bw] * (ndl > 0)
        base = objs.color.reshape(-1, 3).index_select(0, bw * objs.kind.shape[1] + wm)
        col = base * (state.ambient[bw] + state.light_intensity[bw] * ndl)[:, None] + spec[:, None]
        color.view(-1, 3)[wf] = col

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
