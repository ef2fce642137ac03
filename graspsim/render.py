"""Batched wrist-camera renderer: RGB and the exact visible-target mask for every scene in one call.

Scene primitives: the textured table plane z = 0, the target (a sphere, a yawed cube or an upright cylinder,
drawn by the same code as the distractors of that shape), distractors (yawed boxes, vertical cylinders,
spheres) and the two finger boxes (yawed with the wrist), seen through a pinhole camera (one ray per pixel centre);
the first surface hit decides the pixel, so the target mask is occlusion-aware by construction.
Shading: ambient + Lambert diffuse + Blinn-Phong specular (objects) from one directional light, with
exact hard shadows on every surface (see ``_shadows``); the table is matte. Post-processing (optional):
3x3 Gaussian blur blend and additive Gaussian pixel noise, on RGB only (the mask stays exact).

How it stays cheap (the work per pixel and per candidate is what limits a CPU; see ``benchmarks/``):

* **Table, dense.** The table is a plane, so its image is a perspective warp of the texture: each
  scene's texel coordinates are a homography of the pixel coordinates (``_table_color``). Per pixel:
  three adds of precomputed row and column terms, one reciprocal, integer wrap-around and one texture
  gather per channel. No per-pixel ray directions, hit points or normals.
* **Objects, sparse.** The exact ray-primitive intersection runs only on the (scene, pixel, object)
  candidates inside each object's projected bounding box, in the object's local frame, where a
  primary ray is the per-object camera position plus ``s Q (u, v, 1)`` (``Frames``).
* **Shadows, sparse and exact.** A table point can only be shadowed by object ``m`` inside the screen
  box of ``m``'s shadow on the table (its bounding-box corners pushed along the light onto z = 0); an
  object point only inside the box of ``m``'s whole shadow volume. Only those cast a shadow ray, and
  only against ``m`` (``_shadows``).
* **Post-processing** is one grouped convolution (blur, blend and the 0..255 scale folded into a
  per-image kernel) and Gaussian noise read from a fixed bank of normal samples at per-image random
  offsets drawn from the caller's generator (seeded, so the same seed gives the same images).
* **Memory.** Colour is built channel-major (``3,B,H,W``) so each texture channel is one contiguous
  gather; ``rgb`` is written from it in one conversion. Batches are rendered in passes of at most
  ``CHUNK_PIXELS``; the ``graspsim`` command and the benchmarks tell glibc to keep freed memory
  (:func:`graspsim.perf.tune_allocator`; importing this module does not), so buffers are reused instead of
  page-faulted in on every call. ``color`` and ``depth`` are computed only when read.

Nothing loops over scenes (loops run over the three primitive kinds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from . import rng
from .config import SimConfig
from .physics import finger_boxes
from .state import KIND_BOX, KIND_CYLINDER, KIND_NONE, KIND_SPHERE, State, target_half_extents
from .textures import TEXTURE_SIZE, texture_bank

EPS = 1e-5
INF = float("inf")
TARGET_ID = 0  # object slot of the target; the table is -1


class RenderOutput:
    """``rgb``: B,3,H,W uint8; ``mask``: B,H,W bool (target visible); ``alpha``: B,H,W bool (an object,
    not the table, is hit); ``color``: B,3,H,W float32 colour in [0, 1] before quantisation (after
    post-processing; a view of a channel-major buffer); ``depth``: B,H,W float32 (metres along the ray,
    inf for background). ``color`` and ``depth`` are computed on first access (the env needs neither)."""

    def __init__(self, rgb: Tensor, mask: Tensor, alpha: Tensor, depth_fn: Callable[[], Tensor],
                 color_fn: Callable[[], Tensor]):
        self.rgb, self.mask, self.alpha = rgb, mask, alpha
        self._lazy: dict[str, Callable[[], Tensor]] = {"depth": depth_fn, "color": color_fn}
        self._done: dict[str, Tensor] = {}

    def _get(self, name: str) -> Tensor:
        if name not in self._done:
            self._done[name] = self._lazy.pop(name)()
        return self._done[name]

    @property
    def depth(self) -> Tensor:
        return self._get("depth")

    @property
    def color(self) -> Tensor:
        return self._get("color")


@dataclass
class Objects:
    """Per-scene object table, ``M`` slots: 0 = target, then fingers, then distractors."""

    kind: Tensor  # B,M int64 (KIND_*)
    centre: Tensor  # B,M,3
    half: Tensor  # B,M,3
    yaw: Tensor  # B,M
    color: Tensor  # B,M,3
    active: Tensor  # B,M bool


def scene_objects(state: State, cfg: SimConfig, fingers: bool = True, distractors: bool = True) -> Objects:
    """The object table of every scene: the target (its kind, half-extents and yaw), the fingers (boxes
    turned with the wrist), then the distractor slots."""
    B, dev = state.batch_size, state.device
    kinds = [state.target_kind[:, None]]
    centres = [state.sphere_pos[:, None]]
    halves = [target_half_extents(state)[:, None]]
    yaws = [state.target_yaw[:, None]]
    colors = [state.sphere_color[:, None]]
    active = [torch.ones((B, 1), dtype=torch.bool, device=dev)]
    if fingers:
        fc, fh = finger_boxes(state.tcp_pos, state.finger_width, cfg, state.wrist_yaw)
        kinds.append(torch.full((B, 2), KIND_BOX, dtype=torch.long, device=dev))
        centres.append(fc)
        halves.append(fh)
        yaws.append(state.wrist_yaw[:, None].expand(-1, 2))
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
    return Objects(kind, torch.cat(centres, 1), half, torch.cat(yaws, 1), torch.cat(colors, 1), torch.cat(active, 1))


PRIMITIVES = (KIND_SPHERE, KIND_BOX, KIND_CYLINDER)


def _kind_boxes(objs: "Objects", kind: int, x0: Tensor, x1: Tensor) -> Tensor:
    """``x1`` with the boxes of objects that are not active primitives of ``kind`` emptied."""
    return torch.where(objs.active & (objs.kind == kind), x1, x0 - 1)


# ----------------------------------------------------------------------------- camera
_GRIDS: dict[tuple[int, str], tuple[Tensor, Tensor]] = {}


def _pixel_grid(size: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Pixel-centre offsets from the principal point ``N,2`` (u right, v down) and ``u^2 + v^2`` (N)."""
    key = (size, str(device))
    if key not in _GRIDS:
        c = _offsets(size, device)
        v, u = torch.meshgrid(c, c, indexing="ij")
        uv = torch.stack([u.flatten(), v.flatten()], -1)
        _GRIDS[key] = (uv, (uv * uv).sum(-1))
    return _GRIDS[key]


def _offsets(size: int, device: torch.device) -> Tensor:
    """Pixel-centre offsets from the principal point along one image axis (``size``,)."""
    return torch.arange(size, device=device, dtype=torch.float32) + (0.5 - size / 2)


def camera_origin(state: State) -> Tensor:
    """World position of every scene's camera centre ``B,3``."""
    return state.tcp_pos + state.cam_offset


def pixel_rays(state: State, size: int) -> tuple[Tensor, Tensor]:
    """Camera origins ``B,3`` and unit ray directions ``B,N,3`` (N = size*size, row-major, world frame).

    The camera-frame direction of pixel (u, v) is (u, v, f) / sqrt(u^2 + v^2 + f^2). (The renderer
    itself never builds this dense tensor; it is here for tools and tests.)
    """
    uv, r2 = _pixel_grid(size, state.device)
    B, f = state.batch_size, state.focal
    cam = torch.cat([uv.expand(B, -1, -1), f[:, None, None].expand(-1, uv.shape[0], 1)], -1)
    inv = torch.rsqrt(r2[None] + (f * f)[:, None])
    d = (cam @ state.cam_rot.transpose(1, 2)) * inv[..., None]
    return camera_origin(state), d


def project(state: State, points: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """Project world points ``B,P,3`` to pixel coordinates ``B,P,2`` (x right, y down, pixel units,
    origin at the top-left corner) and camera depth ``B,P`` (metres along the optical axis)."""
    rel = points - camera_origin(state)[:, None]
    cam = rel @ state.cam_rot  # B,P,3 in (right, down, forward)
    z = cam[..., 2]
    pix = cam[..., :2] / z.clamp_min(1e-6)[..., None] * state.focal[:, None, None] + size / 2
    return pix, z


# ----------------------------------------------------------------------------- screen-space bounds
_CORNERS = torch.tensor([[sx, sy, sz] for sx in (-1.0, 1.0) for sy in (-1.0, 1.0) for sz in (-1.0, 1.0)])
NEAR = 1e-4  # metres: hull parts closer to the camera plane than this are clipped away
BOX_MARGIN = 1e-3  # pixels added around every screen box (covers rounding; the exact tests decide)


def _corners(objs: Objects) -> Tensor:
    """World corners ``B,M,8,3`` of every object's (yawed) bounding box."""
    corners = _CORNERS.to(objs.half.device) * objs.half[:, :, None, :]
    # boxes rotate with their yaw; spheres and cylinders are symmetric about z
    yaw = torch.where(objs.kind == KIND_BOX, objs.yaw, torch.zeros_like(objs.yaw))[..., None]
    cs, sn = torch.cos(yaw), torch.sin(yaw)
    x = cs * corners[..., 0] - sn * corners[..., 1]
    y = sn * corners[..., 0] + cs * corners[..., 1]
    return torch.stack([x, y, corners[..., 2]], -1) + objs.centre[:, :, None, :]


def _hull_boxes(state: State, points: Tensor, active: Tensor, size: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Inclusive pixel boxes ``x0, x1, y0, y1`` (B,M int64) holding every pixel centre whose ray meets the
    convex hull of ``points`` (B,M,P,3, world) in front of the camera; inactive rows get an empty box.

    The hull is first clipped by the plane ``NEAR`` in front of the camera: the clipped hull is the hull
    of the points in front and of the plane crossings of every segment between two points (computed
    only for the rare hulls that reach behind it), and a projective map keeps it convex.
    """
    B, M, P, _ = points.shape
    cam = (points.reshape(B, M * P, 3) - camera_origin(state)[:, None]) @ state.cam_rot
    cam = cam.view(B * M, P, 3)
    f = state.focal.repeat_interleave(M)
    valid = (cam[..., 2] >= NEAR) & active.reshape(-1, 1)
    lo, hi = _projected_bounds(cam, valid, f, size)
    behind = active.reshape(-1) & ~valid.all(1)
    if bool(behind.any()):
        rows = torch.nonzero(behind).flatten()
        i, j = torch.triu_indices(P, P, 1, device=cam.device)
        c = cam.index_select(0, rows)
        zi, zj = c[:, i, 2], c[:, j, 2]
        cross = (zi - NEAR) * (zj - NEAR) < 0
        s = torch.where(cross, (NEAR - zi) / torch.where(cross, zj - zi, torch.ones_like(zi)), torch.zeros_like(zi))
        q = c[:, i] + s[..., None] * (c[:, j] - c[:, i])
        lo_r, hi_r = _projected_bounds(torch.cat([c, q], 1), torch.cat([valid.index_select(0, rows), cross], 1),
                                       f.index_select(0, rows), size)
        lo, hi = lo.index_copy(0, rows, lo_r), hi.index_copy(0, rows, hi_r)
    x0 = torch.ceil(lo[:, 0] - 0.5 - BOX_MARGIN).clamp(0, size).long().view(B, M)
    x1 = torch.floor(hi[:, 0] - 0.5 + BOX_MARGIN).clamp(-1, size - 1).long().view(B, M)
    y0 = torch.ceil(lo[:, 1] - 0.5 - BOX_MARGIN).clamp(0, size).long().view(B, M)
    y1 = torch.floor(hi[:, 1] - 0.5 + BOX_MARGIN).clamp(-1, size - 1).long().view(B, M)
    return x0, x1, y0, y1


def _projected_bounds(cam: Tensor, valid: Tensor, f: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """Pixel-coordinate bounds (lo, hi: R,2) of the ``valid`` camera-frame points ``cam`` (R,P,3)."""
    pix = (cam[..., :2] / cam[..., 2:3].clamp_min(NEAR) * f[:, None, None] + size / 2).transpose(1, 2)  # R,2,P
    lo = torch.where(valid[:, None], pix, INF).amin(-1)
    hi = torch.where(valid[:, None], pix, -INF).amax(-1)
    return lo, hi


def screen_boxes(state: State, objs: Objects, size: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Conservative pixel bounding boxes ``x0, x1, y0, y1`` (B,M int64, inclusive) of every object.

    The projection of a convex solid lies inside the projection of its bounding box's 8 corners
    (clipped at the camera plane); inactive objects get an empty box.
    """
    return _hull_boxes(state, _corners(objs), objs.active, size)


def _shadow_foot(corners: Tensor, L: Tensor) -> Tensor:
    """Bounding-box corners ``B,M,8,3`` pushed along the light ``L`` (B,3) onto the table plane z = 0."""
    lz = L[:, 2].clamp_min(1e-3)  # a light at or below the horizon casts (clamped) long shadows
    return corners - (corners[..., 2:3].clamp_min(0.0) / lz[:, None, None, None]) * L[:, None, None, :]


def shadow_boxes(state: State, objs: Objects, size: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Pixel boxes (as :func:`screen_boxes`) of every object's shadow volume: a surface point above the
    table that object ``m`` shadows lies between ``m`` and ``m``'s shadow on the table, i.e. in the convex
    hull of ``m``'s bounding-box corners and those corners pushed along the light onto z = 0."""
    corners = _corners(objs)
    return _hull_boxes(state, torch.cat([corners, _shadow_foot(corners, state.light_dir)], 2), objs.active, size)


def enumerate_boxes(x0: Tensor, x1: Tensor, y0: Tensor, y1: Tensor, size: int) -> tuple[Tensor, Tensor, Tensor]:
    """All (scene, pixel, object) triples inside the per-object pixel boxes, without a loop.

    Inputs B,M int64 (inclusive bounds). Returns (b, n, m) int64 index tensors, n = y * size + x.
    """
    fm, b, m, flat, _, _ = _enumerate(x0, x1, y0, y1, size)
    return b, flat - b * size * size, m


def _enumerate(x0: Tensor, x1: Tensor, y0: Tensor, y1: Tensor, size: int
               ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """:func:`enumerate_boxes` as (b * M + m, b, m, b * N + n, u, v) with the pixel-centre offsets (u, v)
    of every triple (float32)."""
    B, M = x0.shape
    w = (x1 - x0 + 1).clamp_min(0).flatten()
    h = (y1 - y0 + 1).clamp_min(0).flatten()
    counts = w * h
    total = int(counts.sum())
    dev = x0.device
    if total == 0:
        e = torch.zeros(0, dtype=torch.long, device=dev)
        return e, e, e, e, e.float(), e.float()
    owner = torch.repeat_interleave(torch.arange(B * M, device=dev), counts, output_size=total)
    start = torch.cumsum(counts, 0) - counts
    local = (torch.arange(total, device=dev) - start.index_select(0, owner)).float()
    wo = w.float().index_select(0, owner)
    # row and column inside the box without int64 division (slow): local < w * h <= size^2 and
    # w <= size <= 512, so float32 (local + 0.5) / w is never within rounding error of an integer
    row = torch.floor((local + 0.5) / wo)
    col = local - row * wo
    bm = torch.arange(B * M, device=dev)
    b_of, m_of = torch.div(bm, M, rounding_mode="floor"), bm % M
    x0f, y0f = x0.flatten(), y0.flatten()
    base = ((b_of * size + y0f) * size + x0f).index_select(0, owner)
    c = 0.5 - size / 2
    u = (x0f.float() + c).index_select(0, owner) + col
    v = (y0f.float() + c).index_select(0, owner) + row
    flat = base + row.long() * size + col.long()
    return owner, b_of.index_select(0, owner), m_of.index_select(0, owner), flat, u, v


# ----------------------------------------------------------------------------- visibility and shadows
# Intersections run in each object's local frame (centred, box yaw removed) with unnormalised ray
# directions: every primary ray of a scene starts at the camera, so its local origin is one vector per
# object and its local direction is ``Q (u, v, 1)`` with a 3x3 ``Q`` per object; a shadow ray's local
# direction is the light direction, one vector per object. Distances along primary rays are in units of
# the unnormalised direction (the same for every object at a pixel, so they compare directly).
PRIMARY_EPS = 1e-9  # smallest accepted primary-ray parameter (the camera is never inside an object)


@dataclass
class Frames:
    """Per-object local frames (B*M rows): ``rot`` world-to-local rotation 3,3; ``cam`` camera centre
    (local); ``Q`` pixel (u, v, 1) -> local ray direction; ``light`` light direction (local); ``half``
    half-extents; ``M`` slots per scene. Box slab tests use ``lo``/``hi`` = -+half - cam (primary rays)
    and, for shadow rays from table points ``cam + s Q (u, v, 1)``, the same divided by the light:
    ``slab_lo``/``slab_hi`` = (-+half - cam) / light and ``Q_light`` = Q / light (rows)."""

    rot: Tensor
    cam: Tensor
    Q: Tensor
    light: Tensor
    half: Tensor
    M: int
    lo: Tensor
    hi: Tensor
    slab_lo: Tensor
    slab_hi: Tensor
    Q_light: Tensor


def _frames(state: State, objs: Objects, o: Tensor, A: Tensor) -> Frames:
    B, M = objs.kind.shape
    yaw = torch.where(objs.kind == KIND_BOX, objs.yaw, torch.zeros_like(objs.yaw))
    cs, sn = torch.cos(yaw), torch.sin(yaw)
    zero, one = torch.zeros_like(cs), torch.ones_like(cs)
    rot = torch.stack([cs, sn, zero, -sn, cs, zero, zero, zero, one], -1).view(B, M, 3, 3)  # Rz(-yaw)
    cam = (rot @ (o[:, None] - objs.centre)[..., None]).squeeze(-1)
    Q = rot @ A[:, None]
    light = (rot @ state.light_dir[:, None, :, None]).squeeze(-1)
    lo, hi = -objs.half - cam, objs.half - cam
    inv_light = 1.0 / torch.where(light.abs() < 1e-12, torch.full_like(light, 1e-12), light)
    return Frames(rot.view(-1, 3, 3), cam.view(-1, 3), Q.view(-1, 3, 3), light.view(-1, 3),
                  objs.half.reshape(-1, 3), M, lo.reshape(-1, 3), hi.reshape(-1, 3),
                  (lo * inv_light).reshape(-1, 3), (hi * inv_light).reshape(-1, 3),
                  (Q * inv_light[..., None]).reshape(-1, 3, 3))


def _local_hit(kind: int, p: Tensor, d: Tensor, h: Tensor, eps: float) -> Tensor:
    """Parameter ``s > eps`` of the first hit of rays ``p + s d`` (C,3, local frame, ``d`` of any length)
    with a primitive of half-extents ``h`` (C,3) centred at the origin; inf for a miss."""
    if kind == KIND_SPHERE:
        r = h[:, 0]
        a, b = _dot(d, d), _dot(p, d)
        disc = b * b - a * (_dot(p, p) - r * r)
        sq = torch.sqrt(disc.clamp_min(0.0))
        s0, s1 = (-b - sq) / a, (-b + sq) / a
        s = torch.where(s0 > eps, s0, s1)
        hit = (disc >= 0) & (s > eps)
    elif kind == KIND_BOX:
        inv = 1.0 / torch.where(d.abs() < 1e-12, torch.full_like(d, 1e-12), d)
        t1 = (-h - p) * inv
        t2 = (h - p) * inv
        tn, tf = _max3(torch.minimum(t1, t2)), _min3(torch.maximum(t1, t2))
        s = torch.where(tn > eps, tn, tf)
        hit = (tf >= tn) & (s > eps)
    elif kind == KIND_CYLINDER:
        r, hz = h[:, 0], h[:, 2]
        a = d[:, 0] ** 2 + d[:, 1] ** 2
        b = p[:, 0] * d[:, 0] + p[:, 1] * d[:, 1]
        cc = p[:, 0] ** 2 + p[:, 1] ** 2 - r * r
        disc = b * b - a * cc
        sq = torch.sqrt(disc.clamp_min(0.0))
        a_safe = a.clamp_min(1e-12)
        side_ok = (disc >= 0) & (a > 1e-12)
        best = torch.full_like(a, INF)
        for ts in ((-b - sq) / a_safe, (-b + sq) / a_safe):
            ok = side_ok & (ts > eps) & ((p[:, 2] + ts * d[:, 2]).abs() <= hz)
            best = torch.where(ok & (ts < best), ts, best)
        dz = torch.where(d[:, 2].abs() < 1e-12, torch.full_like(d[:, 2], 1e-12), d[:, 2])
        for zc in (hz, -hz):
            tc = (zc - p[:, 2]) / dz
            x, y = p[:, 0] + tc * d[:, 0], p[:, 1] + tc * d[:, 1]
            ok = (tc > eps) & (x * x + y * y <= r * r)
            best = torch.where(ok & (tc < best), tc, best)
        return best
    else:
        raise ValueError(f"unknown primitive kind {kind}")
    return torch.where(hit, s, torch.full_like(s, INF))


def _dot(a: Tensor, b: Tensor) -> Tensor:
    """Row dot products of C,3 tensors (elementwise ops beat a reduction over a size-3 axis)."""
    return a[:, 0] * b[:, 0] + a[:, 1] * b[:, 1] + a[:, 2] * b[:, 2]


def _argmax3(x: Tensor) -> Tensor:
    """Row argmax (int64, first of ties) of C,3."""
    first = (x[:, 0] >= x[:, 1]) & (x[:, 0] >= x[:, 2])
    return torch.where(first, 0, torch.where(x[:, 1] >= x[:, 2], 1, 2))


def _max3(x: Tensor) -> Tensor:
    """Row maximum of C,3 (two elementwise ops beat a reduction over a size-3 axis)."""
    return torch.maximum(torch.maximum(x[:, 0], x[:, 1]), x[:, 2])


def _min3(x: Tensor) -> Tensor:
    """Row minimum of C,3."""
    return torch.minimum(torch.minimum(x[:, 0], x[:, 1]), x[:, 2])


def _local_normal(kind: int, q: Tensor, h: Tensor) -> Tensor:
    """Outward unit normal (local frame) at surface points ``q`` (C,3) of primitives ``h`` (C,3): the face
    whose normalised coordinate is largest."""
    if kind == KIND_SPHERE:
        return q / h[:, :1]
    if kind == KIND_BOX:
        ax = _argmax3(q.abs() / h)[:, None]
        return torch.zeros_like(q).scatter_(1, ax, torch.sign(q.gather(1, ax)))
    radial = torch.sqrt(q[:, 0] ** 2 + q[:, 1] ** 2)
    side = torch.stack([q[:, 0] / radial.clamp_min(1e-12), q[:, 1] / radial.clamp_min(1e-12), torch.zeros_like(radial)], -1)
    cap = torch.zeros_like(q)
    cap[:, 2] = torch.sign(q[:, 2])
    return torch.where((q[:, 2].abs() / h[:, 2] > radial / h[:, 0])[:, None], cap, side)


def _apply(M3: Tensor, u: Tensor, v: Tensor) -> Tensor:
    """``M3 @ (u, v, 1)`` for C matrices ``M3`` (C,3,3)."""
    return M3[:, :, 0] * u[:, None] + M3[:, :, 1] * v[:, None] + M3[:, :, 2]


@dataclass
class Hits:
    """Object pixels: the closest hit per pixel, sparse. ``flat`` = b * N + n (C int64), ``obj`` object
    slot (C), ``normal`` world unit normal C,3, ``point`` world hit point C,3, ``ray`` unit view ray C,3.
    ``s_dense`` B*N: primary-ray parameter of the object hit (inf where the table or nothing is hit);
    ``obj_dense`` B*N int8: object slot (-1 for table or background). ``b`` scene (C), ``u``, ``v`` pixel
    offsets from the principal point (C)."""

    flat: Tensor
    obj: Tensor
    normal: Tensor
    point: Tensor
    ray: Tensor
    s_dense: Tensor
    obj_dense: Tensor
    b: Tensor
    u: Tensor
    v: Tensor


def _table_param(o: Tensor, rcp: Tensor | None, b: Tensor, flat: Tensor) -> Tensor:
    """Primary-ray parameter of the table plane at pixels ``flat`` of scenes ``b`` (inf where it is missed
    or there is no table); ``rcp`` B*N is 1 / D_z of every pixel's unnormalised ray (see _table_color)."""
    if rcp is None:
        return torch.full(flat.shape, INF, device=flat.device)
    s = -o[:, 2].index_select(0, b) * rcp.index_select(0, flat)
    return torch.where(s > 0, s, torch.full_like(s, INF))


def _first_hits(state: State, o: Tensor, A: Tensor, objs: Objects, fr: Frames, size: int, rcp: Tensor | None) -> Hits:
    """Closest object hit of every pixel ray in front of the table (exact; candidates from
    :func:`screen_boxes`)."""
    B, N, M, dev = state.batch_size, size * size, fr.M, state.device
    x0, x1, y0, y1 = screen_boxes(state, objs, size)
    # an object hit lies at z >= 0, hence in front of the table along a ray from a camera above it,
    # unless some object reaches below the table plane: only then compare with the table distance
    below = rcp is not None and bool((objs.active & (objs.centre[..., 2] - objs.half[..., 2] < 0)).any())
    parts = []
    for kind in PRIMITIVES:  # three primitive kinds, not scenes
        fm, bi, mi, flat, u, v = _enumerate(x0, _kind_boxes(objs, kind, x0, x1), y0, y1, size)
        if bi.numel() == 0:
            continue
        d = _apply(fr.Q.index_select(0, fm), u, v)
        if kind == KIND_BOX:  # slab test with the per-object bounds relative to the camera
            inv = d.reciprocal()
            t1, t2 = fr.lo.index_select(0, fm) * inv, fr.hi.index_select(0, fm) * inv
            tn, tf = _max3(torch.minimum(t1, t2)), _min3(torch.maximum(t1, t2))
            s = torch.where(tn > PRIMARY_EPS, tn, tf)
            s = torch.where((tf >= tn) & (s > PRIMARY_EPS), s, torch.full_like(s, INF))
        else:
            s = _local_hit(kind, fr.cam.index_select(0, fm), d, fr.half.index_select(0, fm), PRIMARY_EPS)
        sel = torch.nonzero(s < (_table_param(o, rcp, bi, flat) if below else INF)).flatten()
        if sel.numel() == 0:
            continue
        s, fm = s.index_select(0, sel), fm.index_select(0, sel)
        h = fr.half.index_select(0, fm)
        q = fr.cam.index_select(0, fm) + s[:, None] * d.index_select(0, sel)
        if kind == KIND_BOX:  # the face normal is a (signed) row of the world-to-local rotation
            ax = _argmax3(q.abs() / h)
            sign = torch.sign(q.gather(1, ax[:, None]))
            n_world = fr.rot.view(-1, 3).index_select(0, fm * 3 + ax) * sign
        else:  # spheres and cylinders are not rotated
            n_world = _local_normal(kind, q, h)
        parts.append((flat.index_select(0, sel), mi.index_select(0, sel), s, n_world, bi.index_select(0, sel),
                      u.index_select(0, sel), v.index_select(0, sel)))
    s_dense = torch.full((B * N,), INF, device=dev)
    obj_dense = torch.full((B * N,), -1, dtype=torch.int8, device=dev)
    if not parts:
        e = torch.zeros(0, dtype=torch.long, device=dev)
        z3 = torch.zeros((0, 3), device=dev)
        return Hits(e, e, z3, z3, z3, s_dense, obj_dense, e, e.float(), e.float())
    flat, m, s, n, b, u, v = (torch.cat(x) for x in zip(*parts))
    s_dense.scatter_reduce_(0, flat, s, reduce="amin")
    win = torch.nonzero(s <= s_dense.index_select(0, flat)).flatten()
    flat, m, s, n, b, u, v = (x.index_select(0, win) for x in (flat, m, s, n, b, u, v))
    obj_dense[flat] = m.to(torch.int8)
    D = _apply(A.index_select(0, b), u, v)
    point = o.index_select(0, b) + s[:, None] * D
    return Hits(flat, m, n, point, D * torch.rsqrt(_dot(D, D))[:, None], s_dense, obj_dense, b, u, v)


def _shadows(state: State, o: Tensor, objs: Objects, fr: Frames, hits: Hits, size: int,
             rcp: Tensor | None) -> tuple[Tensor, Tensor]:
    """Surface points hidden from the directional light: (flat indices b * N + n of shadowed table pixels,
    possibly repeated; C bool per object pixel of ``hits``). Exact, in two sparse parts:

    * table points: pixels inside the screen box of object ``m``'s shadow on the table (the hull of its
      bounding-box corners pushed along the light onto z = 0) whose ray first meets the table cast one
      ray towards the light against ``m``;
    * object points (sparse already): each against every other object whose shadow volume's screen box
      (:func:`shadow_boxes`) holds the pixel.

    Objects never shadow themselves (for convex solids the n.L term does that).
    """
    B, N, M, dev = state.batch_size, size * size, fr.M, state.device
    table_flats = [torch.zeros(0, dtype=torch.long, device=dev)]
    on_object = torch.zeros(hits.flat.shape, dtype=torch.bool, device=dev)
    corners = _corners(objs)
    foot = _shadow_foot(corners, state.light_dir)
    if rcp is not None:
        x0, x1, y0, y1 = _hull_boxes(state, foot, objs.active, size)
        for kind in PRIMITIVES:  # three primitive kinds, not scenes
            fm, bi, mi, flat, u, v = _enumerate(x0, _kind_boxes(objs, kind, x0, x1), y0, y1, size)
            if bi.numel() == 0:
                continue
            s_tab = _table_param(o, rcp, bi, flat)
            sel = torch.nonzero((hits.obj_dense.index_select(0, flat) < 0) & (s_tab < INF)).flatten()
            fm, flat, s_tab, u, v = (x.index_select(0, sel) for x in (fm, flat, s_tab, u, v))
            if kind == KIND_BOX:  # slab test of the ray p + s L, p = cam + s_tab Q (u, v, 1), all over L
                e = s_tab[:, None] * _apply(fr.Q_light.index_select(0, fm), u, v)
                t1, t2 = fr.slab_lo.index_select(0, fm) - e, fr.slab_hi.index_select(0, fm) - e
                tn, tf = _max3(torch.minimum(t1, t2)), _min3(torch.maximum(t1, t2))
                hit = (tf >= tn) & (tf > EPS)
            else:
                p = fr.cam.index_select(0, fm) + s_tab[:, None] * _apply(fr.Q.index_select(0, fm), u, v)
                hit = _local_hit(kind, p, fr.light.index_select(0, fm), fr.half.index_select(0, fm), EPS) < INF
            table_flats.append(flat[hit])
    # object points facing the light (the others are unlit by n.L anyway)
    facing = torch.nonzero(_dot(hits.normal, state.light_dir.index_select(0, hits.b)) > 0).flatten()
    if facing.numel():
        x0, x1, y0, y1 = _hull_boxes(state, torch.cat([corners, foot], 2), objs.active, size)
        b = hits.b.index_select(0, facing)
        px = (hits.u.index_select(0, facing) - (0.5 - size / 2))[:, None]  # pixel column (exact in float32)
        py = (hits.v.index_select(0, facing) - (0.5 - size / 2))[:, None]
        x0, x1, y0, y1 = (x.float().index_select(0, b) for x in (x0, x1, y0, y1))
        inside = (x0 <= px) & (px <= x1) & (y0 <= py) & (py <= y1)
        inside &= torch.arange(M, device=dev)[None, :] != hits.obj.index_select(0, facing)[:, None]  # C,M
        ci_all, mi_all = torch.nonzero(inside, as_tuple=True)
        kinds = objs.kind.view(-1).index_select(0, b.index_select(0, ci_all) * M + mi_all)
        for kind in PRIMITIVES:
            sel = torch.nonzero(kinds == kind).flatten()
            if sel.numel() == 0:
                continue
            ci, mi = ci_all.index_select(0, sel), mi_all.index_select(0, sel)
            fm = b.index_select(0, ci) * M + mi
            rel = hits.point.index_select(0, facing.index_select(0, ci)) - objs.centre.view(-1, 3).index_select(0, fm)
            if kind == KIND_BOX:  # yawed: rotate into the box frame (spheres and cylinders are not rotated)
                R3 = fr.rot.index_select(0, fm)
                rel = R3[:, :, 0] * rel[:, :1] + R3[:, :, 1] * rel[:, 1:2] + R3[:, :, 2] * rel[:, 2:]
            hit = _local_hit(kind, rel, fr.light.index_select(0, fm), fr.half.index_select(0, fm), EPS) < INF
            on_object[facing.index_select(0, ci)[hit]] = True
    return torch.cat(table_flats), on_object


# ----------------------------------------------------------------------------- table
_BANKS: dict[tuple[str, str | None], Tensor] = {}
TEXEL_BIAS = 64  # whole texture tiles added to texel coordinates so they stay positive before wrapping


def _bank_planes(device: torch.device, photos: str | None = None) -> Tensor:
    """Texture bank (with ``photos``, a folder: its photos) as channel planes ``3, T*S*S`` (one contiguous gather per
    channel)."""
    key = (str(device), photos)
    if key not in _BANKS:
        bank = texture_bank(device, photos=photos)
        _BANKS[key] = bank.permute(3, 0, 1, 2).reshape(3, -1).contiguous()
    return _BANKS[key]


def _camera_matrix(state: State) -> Tensor:
    """``A`` B,3,3 with the world direction of pixel offset (u, v) equal to ``A @ (u, v, 1)`` (not unit)."""
    f = state.focal
    return state.cam_rot * torch.stack([torch.ones_like(f), torch.ones_like(f), f], -1)[:, None, :]


def _table_color(state: State, size: int, out: Tensor, photos: str | None = None) -> Tensor:
    """Write the lit table colour (shadows come later) into ``out`` (3,B,N channel planes); returns
    ``1 / D_z`` (B*N) of every pixel's unnormalised ray ``D = A (u, v, 1)``, from which the table's ray
    parameter is ``-o_z / D_z``.

    The table hit of pixel (u, v) is p = o - o_z D / D_z with D = A (u, v, 1), so the texel coordinates
    ``(p_xy * scale + offset) * S`` are a homography ``H (u, v, 1)`` per scene; ``H`` rows are affine in u
    and v, so each is a row term plus a column term. Pixels whose ray misses the table are black.
    """
    B, dev = state.batch_size, state.device
    planes = _bank_planes(dev, photos)
    S = TEXTURE_SIZE  # a power of two: texel coordinates wrap with a bit mask
    A = _camera_matrix(state)
    o = camera_origin(state)
    s = state.tex_scale
    shift = (o[:, :2] * s[:, None] + state.tex_offset) * S + TEXEL_BIAS * S  # B,2
    k = (o[:, 2] * s * S)[:, None]
    Hx = shift[:, 0:1] * A[:, 2] - k * A[:, 0]  # B,3 coefficients of (u, v, 1)
    Hy = shift[:, 1:2] * A[:, 2] - k * A[:, 1]
    Hz = A[:, 2]
    c = _offsets(size, dev)

    def plane(Hr: Tensor) -> Tensor:  # B,H,W: row term (depends on u) + column term (depends on v)
        return (Hr[:, 0:1] * c + Hr[:, 2:3])[:, None, :] + (Hr[:, 1:2] * c)[:, :, None]

    den = plane(Hz)
    r = den.reciprocal()
    ix = plane(Hx).mul_(r).to(torch.int32).bitwise_and_(S - 1)
    iy = plane(Hy).mul_(r).to(torch.int32).bitwise_and_(S - 1)
    idx = iy.mul_(S).add_(ix).add_((state.table_tex.to(torch.int32) * (S * S))[:, None, None]).view(-1)
    for ch in range(3):
        torch.index_select(planes[ch], 0, idx, out=out[ch].view(-1))
    L = state.light_dir
    shade = state.ambient + state.light_intensity * L[:, 2].clamp_min(0.0)
    out.mul_((state.table_tint * shade[:, None]).t()[:, :, None])
    # rays that miss the table (only possible when a corner ray points at or above the horizon)
    corners = torch.stack([Hz[:, 0] * c[i] + Hz[:, 1] * c[j] + Hz[:, 2] for i in (0, -1) for j in (0, -1)], -1)
    if bool((corners >= -1e-9).any()):
        miss = (den >= -1e-9).view(1, B, -1)
        out.masked_fill_(miss.expand_as(out), 0.0)
    return r.view(-1)



# ----------------------------------------------------------------------------- main entry
CHUNK_PIXELS = 1 << 21  # scenes x pixels rendered per pass (512 scenes at 64x64)


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

    Large batches are rendered in passes of ``CHUNK_PIXELS`` scenes x pixels (in order, so the noise
    stays seeded): each pass's float buffers then stay below glibc's 32 MB mmap threshold and are reused
    from the heap instead of being page-faulted in again (see :func:`graspsim.perf.tune_allocator`).
    """
    kw = dict(table=table, fingers=fingers, distractors=distractors, shadows=shadows, post=post, generator=generator)
    B, chunk = state.batch_size, max(1, CHUNK_PIXELS // cfg.image_size**2)
    if B <= chunk:
        return _render(state, cfg, **kw)
    parts = [_render(state.index(slice(i, i + chunk)), cfg, **kw) for i in range(0, B, chunk)]
    return RenderOutput(rgb=torch.cat([p.rgb for p in parts]), mask=torch.cat([p.mask for p in parts]),
                        alpha=torch.cat([p.alpha for p in parts]),
                        depth_fn=lambda: torch.cat([p.depth for p in parts]),
                        color_fn=lambda: torch.cat([p.color for p in parts]))


def _render(state: State, cfg: SimConfig, *, table: bool, fingers: bool, distractors: bool, shadows: bool | None,
            post: bool, generator: torch.Generator | None) -> RenderOutput:
    """One rendering pass over every scene of ``state`` (see :func:`render`)."""
    size = cfg.image_size
    B, dev, N = state.batch_size, state.device, cfg.image_size**2
    shadows = cfg.shadows if shadows is None else shadows
    o = camera_origin(state)
    L = state.light_dir
    objs = scene_objects(state, cfg, fingers=fingers, distractors=distractors)
    A = _camera_matrix(state)
    fr = _frames(state, objs, o, A)
    color = torch.empty((3, B, N), device=dev)  # channel planes
    rcp = _table_color(state, size, color, cfg.randomization.table_photos) if table else None
    hits = _first_hits(state, o, A, objs, fr, size, rcp)
    tab, obj_shadowed = _shadows(state, o, objs, fr, hits, size, rcp) if shadows else (None, None)

    if table:
        if tab is not None and tab.numel():  # shadowed table pixels keep only the ambient term
            lit_shade = state.ambient + state.light_intensity * L[:, 2].clamp_min(0.0)
            ratio = (state.ambient / lit_shade).index_select(0, torch.div(tab, N, rounding_mode="floor"))
            flat = color.view(3, -1)  # repeated indices write the same value (read before any write)
            flat.index_copy_(1, tab, flat.index_select(1, tab) * ratio)
    else:
        color.zero_()

    # object pixels (sparse): ambient + Lambert + Blinn-Phong
    if hits.flat.numel():
        bw = hits.b
        Lw = L.index_select(0, bw)
        ndl = _dot(hits.normal, Lw).clamp_min(0.0)
        if obj_shadowed is not None:
            ndl = ndl * ~obj_shadowed
        hv = Lw - hits.ray
        hv = hv * torch.rsqrt(_dot(hv, hv).clamp_min(1e-18))[:, None]
        spec = state.specular[bw] * _dot(hits.normal, hv).clamp_min(0.0) ** state.shininess[bw] * (ndl > 0)
        base = objs.color.reshape(-1, 3).index_select(0, bw * objs.kind.shape[1] + hits.obj)
        col = base * (state.ambient[bw] + state.light_intensity[bw] * ndl)[:, None] + spec[:, None]
        color.view(3, -1).index_copy_(1, hits.flat, col.t())

    # quantisation levels: 255 * colour + 0.5 in [0.5, 255.5], truncated to uint8 (= rounding)
    color = color.clamp_(0.0, 1.0).view(3, B, size, size)
    if post:
        start = None if generator is not None else noise_offsets(state.key, state.steps, 3).t().reshape(-1)
        level = _post(color.view(1, 3 * B, size, size), state.blur.repeat(3), state.image_noise.repeat(3),
                      generator, scale=255.0, offset=0.5, start=start).view(3, B, size, size)
    else:
        level = torch.add(torch.tensor(0.5, device=dev), color, alpha=255.0, out=color)
    rgb = torch.empty((B, 3, size, size), dtype=torch.uint8, device=dev)
    rgb.permute(1, 0, 2, 3).copy_(level)
    mask = (hits.obj_dense == TARGET_ID).view(B, size, size)
    alpha = (hits.obj_dense >= 0).view(B, size, size)

    def depth() -> Tensor:  # metres along the ray = ray parameter x |A (u, v, 1)|
        uv, r2 = _pixel_grid(size, dev)
        dz = A[:, 2, 0:1] * uv[:, 0] + A[:, 2, 1:2] * uv[:, 1] + A[:, 2, 2:3]  # B,N (unnormalised)
        s_tab = torch.where(dz < -1e-9, -o[:, 2:3] / dz.clamp(max=-1e-9), torch.full_like(dz, INF))
        if not table:
            s_tab = torch.full_like(dz, INF)
        norm = torch.sqrt(r2[None] + (state.focal**2)[:, None])
        return (torch.minimum(hits.s_dense.view(B, N), s_tab) * norm).view(B, size, size)

    return RenderOutput(rgb=rgb, mask=mask, alpha=alpha, depth_fn=depth,
                        color_fn=lambda: ((level - 0.5) / 255.0).permute(1, 0, 2, 3))


# ----------------------------------------------------------------------------- post-processing
_BLUR = torch.tensor([1.0, 2.0, 1.0]) / 4.0
NOISE_BANK = 1 << 20  # standard normal samples; each image reads a window at a random offset
_NOISE: dict[str, Tensor] = {}


def _noise_bank(device: torch.device) -> Tensor:
    key = str(device)
    if key not in _NOISE:
        g = torch.Generator(device=device).manual_seed(0x6E01)
        _NOISE[key] = torch.randn(NOISE_BANK, generator=g, device=device)
    return _NOISE[key]


def noise_offsets(key: Tensor, steps: Tensor, channels: int) -> Tensor:
    """B,channels int64: each image channel's start in the noise bank, the episode's own (drawn from its
    ``key`` and ``steps``, :mod:`graspsim.rng`), so a scene's image noise does not depend on its batch."""
    span = NOISE_BANK - (1 << 16) + 1  # every start leaves room for a window of up to 256x256
    return (rng.uniform(key, steps, rng.TAG_IMAGE_NOISE, channels) * span).long()


def _post(x: Tensor, blur: Tensor, noise: Tensor, generator: torch.Generator | None, scale: float = 1.0,
          offset: float = 0.0, start: Tensor | None = None) -> Tensor:
    """Blur blend and noise on ``x`` (1,G,H,W: G single-channel images in [0, 1]); ``blur``, ``noise``: G.
    Returns ``scale * result + offset``, clamped to [offset, scale + offset] (a new tensor).

    The blend ``(1 - w) x + w * gauss3x3(x)`` is one per-image 3x3 kernel (grouped convolution, replicate
    border). The noise of each image is a window of a fixed bank of standard normals starting at a random
    offset (``start``, G int64, or drawn from ``generator``), scaled by the image's std.
    """
    G, H, W = x.shape[1:]
    dev = x.device
    gauss = _BLUR.to(dev)[:, None] * _BLUR.to(dev)[None, :]
    delta = torch.zeros((3, 3), device=dev)
    delta[1, 1] = 1.0
    k = torch.lerp(delta.expand(G, 3, 3), gauss.expand(G, 3, 3), blur.view(G, 1, 1)) * scale
    bias = torch.full((G,), offset, device=dev) if offset else None
    out = F.conv2d(F.pad(x, (1, 1, 1, 1), mode="replicate"), k[:, None], bias, groups=G)
    bank = _noise_bank(dev)
    if H * W > bank.numel():
        raise ValueError(f"postprocess: images of {H}x{W} exceed the noise bank ({bank.numel()} samples)")
    if start is None:
        start = torch.randint(0, bank.numel() - H * W + 1, (G,), generator=generator, device=dev)
    elif H * W > 1 << 16:
        raise ValueError(f"postprocess: keyed noise supports images up to 256x256; got {H}x{W}")
    out.view(G, H * W).addcmul_(bank.unfold(0, H * W, 1).index_select(0, start), noise.view(G, 1) * scale)
    return out.clamp_(offset, scale + offset)


def postprocess(color: Tensor, blur: Tensor, noise: Tensor, generator: torch.Generator | None = None,
                keys: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """Blur blend and Gaussian noise on ``color`` (B,3,H,W float in [0, 1]); ``blur``, ``noise``: B.
    The noise windows come from ``keys`` = (episode keys B, steps B) when given (:func:`noise_offsets`),
    else from ``generator``. Returns a new B,3,H,W tensor (see ``_post``)."""
    B, C, H, W = color.shape
    start = None if keys is None else noise_offsets(keys[0], keys[1], C).reshape(-1)
    out = _post(color.reshape(1, B * C, H, W), blur.repeat_interleave(C), noise.repeat_interleave(C), generator,
                start=start)
    return out.view(B, C, H, W)
