"""Sim-real composites: the simulator draws the target (plus fingers and distractors) over a transparent
background, the layer is alpha-composited onto real photo crops, and the exact target mask is the label.

Everything after the background crop is batched torch on one device. Camera poses cover the whole
approach: fingertip height ``height`` above the table, lateral offsets chosen by drawing the pixel where
the target should land (uniform over the image plus a margin, so some targets sit partly or wholly
outside the frame), frames with the target between closed fingers, and target-free frames (the target
moved behind the camera).

Every target kind of ``SimConfig.target.kinds`` (sphere, cube, upright cylinder) is drawn the simulator's way: the
target rests on the table with its centre at its half height (``graspsim.state.target_half_height``), a held
target sits that half height (x 1.3) above the fingertips (against the fixed pad of a one-jaw gripper), and a held
cube is turned square to the pads. With spheres alone the composites are exactly those drawn before kinds existed (same seed, same bytes).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from graspsim import SimConfig, render, sample_scenes
from graspsim.config import MAX_IMAGE_SIZE
from graspsim.render import postprocess
from graspsim.state import KIND_BOX, target_half_height
from graspsim.validate import int_in, probability

from .augment import AugmentConfig, augment_frame, augment_layer, jpeg_frames, scale_targets
from .backgrounds import BackgroundBank

Range = Tuple[float, float]


@dataclass(frozen=True)
class ComposeConfig:
    """How composites are drawn (all probabilities are per frame)."""

    height: Range = (0.0, 0.25)
    """Fingertip height above the table (m), uniform."""
    view_margin: float = 0.15
    """The target's image position is uniform over the image extended by this fraction on each side."""
    empty_prob: float = 0.2
    """Frames whose target is removed (placed behind the camera): target-free frames."""
    held_prob: float = 0.08
    """Frames with the target held between the closed fingers (lifting)."""
    fingers_prob: float = 0.85
    """Frames that draw the gripper fingers."""
    closing_prob: float = 0.2
    """Frames whose finger gap is uniform in [0, open] instead of fully open."""
    sim_prob: float = 0.1
    """Frames that are fully rendered sim scenes (textured table) instead of real-background composites."""
    shadows: bool = False
    """Cast shadows between rendered objects in the layer (costs ~2.5x render time; off by default)."""
    gain: Range = (0.75, 1.25)
    """Per-frame brightness gain applied to the whole composite."""
    channel_gain: Range = (0.92, 1.08)
    """Per-frame, per-channel gain (white-balance error) applied to the whole composite."""
    arm_shadow_prob: float = 0.4
    """For an embodiment whose arm stands over its camera (:attr:`graspsim.embodiment.Embodiment.arm_overhead`, the
    SO-101): frames crossed by the arm's shadow, a large soft-edged ellipse that darkens the photo and the rendered
    objects alike, so the net sees targets in shade. Unused (no random draws) for the floating gripper."""
    arm_shadow_darkness: Range = (0.3, 0.85)
    """Fraction of light the arm's shadow removes (uniform; a lamp's shadow keeps the room's ambient light)."""
    cast_shadow_prob: float = 0.0
    """Frames whose rendered objects cast a shadow on the photo (:func:`cast_shadows`): the objects' silhouette swept
    away from a light, darkening the crop and not in the label, as a lamp makes them on a real table and MuJoCo's
    light on its transfer sets. It reaches 3-26 px from the object at 64 px, where the appearance augmentation's shadow
    (:attr:`graspsim.vision.augment.AugmentConfig.shadow_prob`, training only) shifts the silhouette at most 3 px. 0 (the
    default) draws composites as before, with no random draws."""
    cast_shadow_darkness: Range = (0.3, 0.8)
    """Fraction of light a cast shadow removes (uniform per frame)."""
    cast_shadow_length: Range = (0.05, 0.4)
    """How far a cast shadow reaches beyond its object, as a fraction of the frame side (uniform per frame)."""
    supersample: int = 1
    """Render the layers at this many times the image size and average each ``s x s`` block down: an object's edge
    pixels blend its colour with the photo by their covered area (as a camera's pixels integrate light, and as
    multi-sample renderers such as MuJoCo's transfer sets draw them), and a pixel is in the mask when the target
    covers at least half of it. 1 (the default) draws one sample per pixel, the mask by the pixel centre, with the
    same random draws. Costs about ``s^2`` times the render time."""

    def __post_init__(self) -> None:
        lo, hi = self.height
        if not (0.0 <= lo <= hi <= 0.35):
            raise ValueError(f"ComposeConfig.height must satisfy 0 <= low <= high <= 0.35; got {self.height!r}")
        for n in ("view_margin", "empty_prob", "held_prob", "fingers_prob", "closing_prob", "sim_prob", "arm_shadow_prob",
                  "cast_shadow_prob"):
            probability("ComposeConfig", n, getattr(self, n))
        int_in("ComposeConfig", "supersample", self.supersample, 1, 4)
        if self.empty_prob + self.held_prob > 1.0:
            raise ValueError("ComposeConfig.empty_prob + held_prob must be <= 1")
        for n in ("gain", "channel_gain"):
            lo, hi = getattr(self, n)
            if not (0.0 < lo <= hi):
                raise ValueError(f"ComposeConfig.{n} must be a (low, high) pair with 0 < low <= high; got {(lo, hi)!r}")
        for n in ("arm_shadow_darkness", "cast_shadow_darkness", "cast_shadow_length"):
            lo, hi = getattr(self, n)
            if not (0.0 <= lo <= hi <= 1.0):
                raise ValueError(f"ComposeConfig.{n} must be a (low, high) pair with 0 <= low <= high <= 1; "
                                 f"got {getattr(self, n)!r}")


@dataclass
class Composite:
    """``rgb``: B,3,H,W uint8; ``mask``: B,H,W bool (target visible); ``layer_alpha``: B,H,W bool (any
    rendered object); ``kind``: B int64 (0 composite, 1 held-target composite, 2 empty composite, 3 sim frame);
    ``background``: B int64, index of the background photo in the bank's ``names`` (-1: a fully rendered sim
    frame, which has no photo); ``target_kind``: B int64, the scene's target kind (``graspsim.state``
    ``KIND_SPHERE``, ``KIND_BOX`` for a cube, ``KIND_CYLINDER``; drawn for target-free frames too)."""

    rgb: Tensor
    mask: Tensor
    layer_alpha: Tensor
    kind: Tensor
    background: Tensor
    target_kind: Tensor


@dataclass
class Layers:
    """Rendered object layers before compositing: ``color`` B,3,H,W float (whole frame for sim frames),
    ``alpha``/``mask`` B,H,W bool, ``kind`` and ``target_kind`` B int64 (as in :class:`Composite`),
    ``blur``/``noise`` B; ``coverage`` B,H,W float in [0, 1], the share of each pixel the objects cover, when the
    layer was supersampled (:attr:`ComposeConfig.supersample`), else None (``alpha``'s hard edges)."""

    color: Tensor
    alpha: Tensor
    mask: Tensor
    kind: Tensor
    blur: Tensor
    noise: Tensor
    target_kind: Tensor
    coverage: Tensor | None = None


def _u(lo: float, hi: float, shape, g: torch.Generator, device) -> Tensor:
    return lo + (hi - lo) * torch.rand(shape, generator=g, device=device)


def place_camera(state, cfg: SimConfig, ccfg: ComposeConfig, g: torch.Generator):
    """Move each scene's gripper so its target lands at a random pixel; returns (state, kind B int64).

    kind 0 = free target somewhere in (or just outside) the view, 1 = held between closed fingers,
    2 = target removed (placed behind the camera). Shapes: B scenes; all on ``state.device``.

    Any target kind: ``r`` (B m) is its half-width across the pads and ``hz`` (B m) its half height (a sphere's
    and a cube's ``r``, a cylinder's half height); a free target's centre is at ``hz`` above the table, a held
    one's ``1.3 hz`` above the fingertips with the fingers closed to ``2 r`` (a cube turned square to them).
    """
    B, dev = state.batch_size, state.device
    size = cfg.image_size
    r = state.sphere_radius
    hz = target_half_height(state)  # B: = r for spheres and cubes
    # the fingertips stay below the embodiment's highest TCP (the SO-101 holds its gripper vertical only low down)
    h_hi = min(ccfg.height[1], cfg.max_height)
    h = _u(min(ccfg.height[0], h_hi), h_hi, (B,), g, dev)
    # pixel where the target centre should land, back-projected onto the plane z = target centre
    m = ccfg.view_margin
    uv = _u(-m, 1.0 + m, (B, 2), g, dev) * size - size / 2
    cam = torch.cat([uv / state.focal[:, None], torch.ones((B, 1), device=dev)], 1)
    d = (state.cam_rot @ cam[..., None]).squeeze(-1)  # B,3 world direction (not normalised)
    cz = state.cam_offset[:, 2] + h  # camera height above the table
    t = (cz - hz) / (-d[:, 2]).clamp_min(1e-3)
    rel = state.cam_offset[:, :2] + t[:, None] * d[:, :2]  # target xy minus tcp xy
    tcp = torch.cat([state.sphere_pos[:, :2] - rel, h[:, None]], 1)

    roll = torch.rand((B,), generator=g, device=dev)
    kind = torch.zeros((B,), dtype=torch.long, device=dev)
    kind = torch.where(roll < ccfg.held_prob, torch.ones_like(kind), kind)
    kind = torch.where((roll >= ccfg.held_prob) & (roll < ccfg.held_prob + ccfg.empty_prob), torch.full_like(kind, 2), kind)

    width = torch.where(
        torch.rand((B,), generator=g, device=dev) < ccfg.closing_prob,
        _u(0.0, cfg.open_width, (B,), g, dev),
        torch.full((B,), cfg.open_width, device=dev),
    )
    sphere = state.sphere_pos.clone()
    # held: target between the pads, gripper lifted to a random height
    held = kind == 1
    lift = _u(0.0, min(0.12, cfg.max_height), (B,), g, dev)
    held_tcp = torch.cat([sphere[:, :2], (hz * 0.3 + lift)[:, None]], 1)
    held_sphere = held_tcp + torch.stack([torch.zeros_like(r), torch.zeros_like(r), hz * 1.3], 1)
    if cfg.body.one_jaw:  # a one-jaw gripper holds the target against its fixed pad: the TCP sits beside it
        c, s_ = torch.cos(state.wrist_yaw), torch.sin(state.wrist_yaw)
        across = cfg.body.fixed_jaw_y - r  # gripper y of the held target's centre
        held_tcp = held_tcp - torch.stack([-s_ * across, c * across, torch.zeros_like(r)], 1)
    tcp = torch.where(held[:, None], held_tcp, tcp)
    sphere = torch.where(held[:, None], held_sphere, sphere)
    width = torch.where(held, 2 * r, width)
    # a held cube is squeezed square to the pads (the wrist's yaw), as the simulator's capture leaves it
    target_yaw = torch.where(held & (state.target_kind == KIND_BOX), state.wrist_yaw, state.target_yaw)
    # empty: target 0.5 m behind the camera
    empty = kind == 2
    behind = tcp + state.cam_offset - 0.5 * state.cam_rot[:, :, 2]
    sphere = torch.where(empty[:, None], behind, sphere)
    # distractors: each lands at its own random pixel (on the table plane at its half-height)
    K = state.dist_kind.shape[1]
    dist_pos = state.dist_pos
    if K > 0:
        duv = _u(-m, 1.0 + m, (B, K, 2), g, dev) * size - size / 2
        dcam = torch.cat([duv / state.focal[:, None, None], torch.ones((B, K, 1), device=dev)], 2)
        dd = dcam @ state.cam_rot.transpose(1, 2)  # B,K,3
        dz = state.dist_pos[..., 2]
        dt = (cz[:, None] - dz) / (-dd[..., 2]).clamp_min(1e-3)
        dxy = tcp[:, None, :2] + state.cam_offset[:, None, :2] + dt[..., None] * dd[..., :2]
        dist_pos = torch.cat([dxy, dz[..., None]], -1)
    return state.replace(tcp_pos=tcp, finger_width=width, sphere_pos=sphere, dist_pos=dist_pos,
                         target_yaw=target_yaw), kind


def arm_shadow(n: int, size: int, ccfg: ComposeConfig, g: torch.Generator, device) -> Tensor:
    """Light left by the arm's shadow, n,size,size float in (0, 1]: 1 where no shadow falls. A share
    ``ccfg.arm_shadow_prob`` of the frames gets a rotated ellipse (centre anywhere in the frame or a quarter of it
    beyond, semi-axes 0.25-0.9 and 0.1-0.45 of the side) with an edge 0.5-3 px soft, inside which the light is cut
    by a fraction drawn from ``ccfg.arm_shadow_darkness``."""
    on = torch.rand((n,), generator=g, device=device) < ccfg.arm_shadow_prob
    centre = _u(-0.25, 1.25, (n, 2), g, device) * size
    axes = torch.stack([_u(0.25, 0.9, (n,), g, device), _u(0.1, 0.45, (n,), g, device)], 1) * size
    angle = _u(0.0, math.pi, (n,), g, device)
    soft = _u(0.5, 3.0, (n,), g, device)
    dark = _u(*ccfg.arm_shadow_darkness, (n,), g, device)
    px = torch.arange(size, device=device, dtype=torch.float32) + 0.5
    dy = px[None, :, None] - centre[:, 1, None, None]
    dx = px[None, None, :] - centre[:, 0, None, None]
    c, s = torch.cos(angle)[:, None, None], torch.sin(angle)[:, None, None]
    u, v = (c * dx + s * dy) / axes[:, 0, None, None], (-s * dx + c * dy) / axes[:, 1, None, None]
    # signed distance to the ellipse's edge, approximately in pixels (negative inside)
    dist = (torch.sqrt(u * u + v * v) - 1.0) * axes.amin(1)[:, None, None]
    inside = torch.sigmoid(-dist / soft[:, None, None])
    return 1.0 - (on.float() * dark)[:, None, None] * inside


CAST_SHADOW_STEPS = 6
"""Copies of the silhouette a cast shadow sweeps (:func:`cast_shadows`)."""


def cast_shadows(bg: Tensor, cover: Tensor, kind: Tensor, ccfg: ComposeConfig, g: torch.Generator) -> Tensor:
    """Darken background crops where the rendered objects' shadows fall.

    ``bg`` n,3,H,W crops in [0, 1]; ``cover`` n,H,W float, the share of each pixel the objects cover; ``kind`` n as in
    :class:`Composite`. A share ``ccfg.cast_shadow_prob`` of the frames gets a light from a direction uniform in the
    image plane: the silhouette is swept along it, from its own place to ``ccfg.cast_shadow_length`` of the frame side
    away (:data:`CAST_SHADOW_STEPS` bilinear copies, their maximum), its edge softened over 1 px, and the light under
    it cut by a fraction drawn from ``ccfg.cast_shadow_darkness``. The objects, composited later, cover their own
    part of it, so what shows is the shadow reaching out from each object's side away from the light, joined to the
    object as on a table. A shadow is never target: the label is unchanged. Fully rendered sim frames (kind 3) cast
    their own and are left alone. ``cast_shadow_prob == 0`` returns ``bg`` and draws nothing from ``g``.
    """
    if ccfg.cast_shadow_prob <= 0:
        return bg
    n, _, h, w = bg.shape
    dev = bg.device
    on = (torch.rand((n,), generator=g, device=dev) < ccfg.cast_shadow_prob) & (kind != 3)
    angle = _u(0.0, 2.0 * math.pi, (n,), g, dev)
    length = _u(*ccfg.cast_shadow_length, (n,), g, dev) * 2.0  # in grid units: the frame spans [-1, 1]
    dark = _u(*ccfg.cast_shadow_darkness, (n,), g, dev)
    base = torch.eye(2, 3, device=dev, dtype=bg.dtype).expand(n, 2, 3)
    sil = cover.to(bg.dtype)[:, None]
    shadow = torch.zeros_like(sil)
    for step in range(1, CAST_SHADOW_STEPS + 1):
        t = length * step / CAST_SHADOW_STEPS
        theta = base.clone()
        theta[:, 0, 2] = -t * torch.cos(angle)  # sample the silhouette from toward the light: it moves away from it
        theta[:, 1, 2] = -t * torch.sin(angle)
        grid = F.affine_grid(theta, list(sil.shape), align_corners=False)
        shadow = torch.maximum(shadow, F.grid_sample(sil, grid, mode="bilinear", padding_mode="zeros",
                                                     align_corners=False))
    shadow = F.avg_pool2d(shadow, 3, stride=1, padding=1, count_include_pad=False)[:, 0]
    return bg * (1.0 - (on.to(bg.dtype) * dark)[:, None, None, None] * shadow[:, None])


def _render_down(state, cfg: SimConfig, s: int, *, table: bool, shadows: bool | None):
    """Render ``state`` (B scenes) with ``render(post=False)`` at ``s`` times ``cfg.image_size`` and average each
    ``s x s`` block down. Returns (color B,3,H,W float, mask B,H,W bool, alpha B,H,W bool, coverage B,H,W float or
    None). With ``table=False`` the colour is the objects' own (their covered samples' mean) and ``coverage`` the
    share of the pixel they cover; a fully rendered frame (``table=True``) averages every sample. The mask is the
    target covering at least half of the pixel, ``alpha`` any object in it. ``s == 1``: the renderer's own pixels
    and no coverage."""
    if s == 1:
        out = render(state, cfg, table=table, post=False, shadows=shadows)
        return out.color, out.mask, out.alpha, None
    big = render(state.replace(focal=state.focal * s), dataclasses.replace(cfg, image_size=cfg.image_size * s),
                 table=table, post=False, shadows=shadows)
    color = F.avg_pool2d(big.color, s)  # background samples are black without a table
    cover = F.avg_pool2d(big.alpha[:, None].float(), s)[:, 0]
    mask = F.avg_pool2d(big.mask[:, None].float(), s)[:, 0] >= 0.5
    if not table:
        color = color / cover[:, None].clamp_min(1.0 / (s * s))
    return color, mask, cover > 0, cover  # with a table, coverage is still the objects' share (sim frames ignore it)


def match_target_color(bg: Tensor, color: Tensor, mask: Tensor, kind: Tensor, prob: float,
                       g: torch.Generator) -> Tensor:
    """Colour-matched camouflage (a training augmentation). ``bg`` n,3,H,W background crops in [0, 1]; ``color``
    n,3,H,W the rendered layers; ``mask`` n,H,W bool the visible target; ``kind`` n as in :class:`Composite`.

    With probability ``prob`` a frame's crop is shifted so that its mean colour becomes the mean rendered colour
    of the frame's target times a per-channel factor in [0.85, 1.15]; its texture and contrast are kept (values
    clamped to [0, 1]). A target-free frame takes the target colour of a random target frame of the batch, so a
    target-coloured background is not by itself a sign of a target. Fully rendered sim frames (kind 3) are left
    alone. Returns the new n,3,H,W crops; a batch without any visible target is returned unchanged.
    """
    tcol = _target_colours(color, mask, g)
    if tcol is None:
        return bg
    n, dev = bg.shape[0], bg.device
    sel = (torch.rand((n,), generator=g, device=dev) < prob) & (kind != 3)
    jitter = 1.0 + 0.15 * (torch.rand((n, 3, 1, 1), generator=g, device=dev) * 2 - 1)
    matched = (bg - bg.mean((2, 3), keepdim=True) + tcol[:, :, None, None] * jitter).clamp(0, 1)
    return torch.where(sel[:, None, None, None], matched, bg)


def _target_colours(color: Tensor, mask: Tensor, g: torch.Generator) -> Tensor | None:
    """n,3 mean rendered colour of each frame's visible target; a target-free frame takes that of a random target
    frame of the batch. None when no frame shows a target."""
    n, dev = color.shape[0], color.device
    m = mask.float()
    cnt = m.sum((1, 2))
    has = cnt > 0
    if not bool(has.any()):
        return None
    tcol = (color * m[:, None]).sum((2, 3)) / cnt.clamp_min(1)[:, None]
    src = torch.nonzero(has).flatten()
    pick = src[torch.randint(0, len(src), (n,), generator=g, device=dev)]
    return torch.where(has[:, None], tcol, tcol[pick])


DECOY_RADIUS = (0.03, 0.16)
"""Decoy semi-axes as fractions of the frame side (2-10 px at 64x64: the targets' own size range)."""


def paste_decoys(bg: Tensor, color: Tensor, mask: Tensor, kind: Tensor, prob: float, g: torch.Generator) -> Tensor:
    """Target-coloured patches of photo texture on the background (a training augmentation: hard negatives).

    ``bg`` n,3,H,W background crops in [0, 1]; ``color`` n,3,H,W the rendered layers; ``mask`` n,H,W bool the
    visible target; ``kind`` n as in :class:`Composite`. With probability ``prob`` a frame's crop gets one decoy: a
    rotated ellipse (semi-axes :data:`DECOY_RADIUS` of the frame side, an edge from hard to a 2 px ramp) anywhere in
    the frame, inside which the crop is shifted to the mean colour of a target of the batch (as
    :func:`match_target_color`, times a per-channel factor in [0.85, 1.15]) while its own texture is kept, scaled by
    a factor in [0.5, 1.5]. The decoy is not target: the label is unchanged, and the target, composited later, hides
    any decoy beneath it. What a red-orange object the camera sees on a real table looks like when it is not the
    target: the nets' confident false regions on warm photos. Fully rendered sim frames (kind 3) are left alone.
    Returns the new n,3,H,W crops; ``prob == 0`` or a batch without any visible target returns ``bg`` unchanged
    and draws nothing from ``g``.
    """
    if prob <= 0:
        return bg
    tcol = _target_colours(color, mask, g)
    if tcol is None:
        return bg
    n, _, h, w = bg.shape
    dev = bg.device
    sel = (torch.rand((n,), generator=g, device=dev) < prob) & (kind != 3)
    side = float(min(h, w))
    u = torch.rand((n, 7), generator=g, device=dev)
    cy, cx = u[:, 0] * (h - 1), u[:, 1] * (w - 1)
    lo, hi = DECOY_RADIUS
    ry, rx = side * (lo + (hi - lo) * u[:, 2]), side * (lo + (hi - lo) * u[:, 3])
    ang = u[:, 4] * math.pi
    ramp = (2.0 * u[:, 5]).clamp_min(1e-6)  # edge width (px); near 0 a hard edge
    contrast = 0.5 + u[:, 6]
    yy = torch.arange(h, device=dev, dtype=bg.dtype)[None, :, None] - cy[:, None, None]
    xx = torch.arange(w, device=dev, dtype=bg.dtype)[None, None, :] - cx[:, None, None]
    ca, sa = torch.cos(ang)[:, None, None], torch.sin(ang)[:, None, None]
    a, b = (xx * ca + yy * sa) / rx[:, None, None], (-xx * sa + yy * ca) / ry[:, None, None]
    dist = (torch.sqrt(a * a + b * b) - 1.0) * torch.minimum(rx, ry)[:, None, None]  # px outside the rim, about
    wgt = (0.5 - dist / ramp[:, None, None]).clamp(0, 1)
    wgt = wgt * sel[:, None, None].to(bg.dtype)
    area = wgt.sum((1, 2)).clamp_min(1e-6)
    local = (bg * wgt[:, None]).sum((2, 3)) / area[:, None]  # n,3 the crop's own colour under the decoy
    jitter = 1.0 + 0.15 * (torch.rand((n, 3), generator=g, device=dev) * 2 - 1)
    decoy = ((bg - local[:, :, None, None]) * contrast[:, None, None, None]
             + (tcol * jitter)[:, :, None, None]).clamp(0, 1)
    return bg + (decoy - bg) * wgt[:, None]


class Composer:
    """Draws batches of composites: ``Composer(bank, sim_cfg, compose_cfg, device)(n, generator)``.

    ``bank`` provides real background crops of size ``sim_cfg.image_size``. ``color_match_prob``: chance that a
    frame's crop gets colour-matched camouflage (:func:`match_target_color`), ``decoy_prob`` that it gets a
    target-coloured decoy (:func:`paste_decoys`); training augmentations, keep them 0 for validation and test
    composites. ``augment``: training-only appearance randomization
    (:mod:`graspsim.vision.augment`); None (validation and test composites) draws them as the renderer does.
    """

    def __init__(self, bank: BackgroundBank, sim_cfg: SimConfig | None = None, cfg: ComposeConfig | None = None,
                 device: torch.device | str = "cpu", color_match_prob: float = 0.0, augment: AugmentConfig | None = None,
                 decoy_prob: float = 0.0):
        probability("Composer", "color_match_prob", color_match_prob)
        probability("Composer", "decoy_prob", decoy_prob)
        self.augment = augment
        self.color_match_prob = float(color_match_prob)
        self.decoy_prob = float(decoy_prob)
        self.sim_cfg = sim_cfg or SimConfig()
        self.cfg = cfg or ComposeConfig()
        self.device = torch.device(device)
        if bank.size != self.sim_cfg.image_size:
            raise ValueError(f"background bank crops are {bank.size} px but SimConfig.image_size is {self.sim_cfg.image_size}")
        if self.sim_cfg.image_size * self.cfg.supersample > MAX_IMAGE_SIZE:
            raise ValueError(f"ComposeConfig.supersample {self.cfg.supersample} would render {self.sim_cfg.image_size} px "
                             f"images at {self.sim_cfg.image_size * self.cfg.supersample} px; the renderer draws at most "
                             f"{MAX_IMAGE_SIZE} px: give a smaller supersample")
        self.bank = bank

    def __call__(self, n: int, generator: torch.Generator) -> Composite:
        """``n`` composites; deterministic given the generator state (CPU)."""
        return self.composite(self.render_layers(n, generator), generator)

    def render_layers(self, n: int, generator: torch.Generator) -> Layers:
        """Render ``n`` object layers (the expensive part); :meth:`composite` puts them on backgrounds."""
        cfg, ccfg, dev, g = self.sim_cfg, self.cfg, self.device, generator
        state = sample_scenes(cfg, n, g, dev)
        if self.augment is not None:
            state = scale_targets(state, self.augment, g)
        state, kind = place_camera(state, cfg, ccfg, g)
        use_fingers = torch.rand((n,), generator=g, device=dev) < ccfg.fingers_prob
        use_sim = torch.rand((n,), generator=g, device=dev) < ccfg.sim_prob
        # fingers off: move them far above the camera (one render call for the whole batch)
        far = state.tcp_pos + torch.tensor([0.0, 0.0, 5.0], device=dev)
        layer_state = state.replace(tcp_pos=torch.where(use_fingers[:, None], state.tcp_pos, far),
                                    cam_offset=torch.where(use_fingers[:, None], state.cam_offset,
                                                           state.tcp_pos + state.cam_offset - far))
        ss = ccfg.supersample
        color, mask, alpha, cover = _render_down(layer_state, cfg, ss, table=False, shadows=ccfg.shadows)
        if bool(use_sim.any()):
            idx = torch.nonzero(use_sim).flatten()
            s_color, s_mask, s_alpha, s_cover = _render_down(state.index(idx), cfg, ss, table=True, shadows=None)
            color, mask, alpha = color.clone(), mask.clone(), alpha.clone()
            color[idx] = s_color
            mask[idx] = s_mask
            alpha[idx] = s_alpha
            if cover is not None:
                cover = cover.clone()
                cover[idx] = s_cover
            kind = torch.where(use_sim, torch.full_like(kind, 3), kind)
        return Layers(color=color, alpha=alpha, mask=mask, kind=kind, blur=state.blur, noise=state.image_noise,
                      target_kind=state.target_kind, coverage=cover)

    def composite(self, layers: Layers, generator: torch.Generator, hflip: bool = False) -> Composite:
        """Put rendered ``layers`` on fresh background crops with fresh photometric jitter and noise. With
        ``hflip``, each frame is mirrored left-right with probability 1/2 (used when layers are reused)."""
        ccfg, dev, g = self.cfg, self.device, generator
        n = layers.color.shape[0]
        color, alpha, mask = layers.color, layers.alpha, layers.mask
        cover = alpha.float() if layers.coverage is None else layers.coverage  # n,H,W object coverage
        if hflip:
            flip = torch.rand((n,), generator=g, device=dev) < 0.5
            color = torch.where(flip[:, None, None, None], color.flip(-1), color)
            alpha = torch.where(flip[:, None, None], alpha.flip(-1), alpha)
            mask = torch.where(flip[:, None, None], mask.flip(-1), mask)
            cover = torch.where(flip[:, None, None], cover.flip(-1), cover)
        bg, bg_index = self.bank.sample_tensor_indexed(n, g, dev)
        if self.color_match_prob > 0:
            bg = match_target_color(bg, color, mask, layers.kind, self.color_match_prob, g)
        bg = paste_decoys(bg, color, mask, layers.kind, self.decoy_prob, g)
        bg = cast_shadows(bg, cover, layers.kind, ccfg, g)
        bg_index = torch.where(layers.kind == 3, torch.full_like(bg_index, -1), bg_index)
        if self.augment is not None:
            color, a, bg = augment_layer(color, cover, mask, bg, layers.kind, self.augment, g)
        else:
            a = torch.where((layers.kind == 3)[:, None, None], 1.0, cover)[:, None]  # sim frames keep their own table
        color = color * a + bg * (1.0 - a)
        if self.sim_cfg.body.arm_overhead and ccfg.arm_shadow_prob > 0:
            color = color * arm_shadow(n, color.shape[-1], ccfg, g, dev)[:, None]
        gain = _u(*ccfg.gain, (n, 1, 1, 1), g, dev) * _u(*ccfg.channel_gain, (n, 3, 1, 1), g, dev)
        color = (color * gain).clamp(0.0, 1.0)
        if self.augment is not None:
            color, mask = augment_frame(color, mask, self.augment, g)
        color = postprocess(color, layers.blur, layers.noise, g)
        rgb = (color * 255.0 + 0.5).to(torch.uint8)
        if self.augment is not None:
            rgb = jpeg_frames(rgb, self.augment, g)
        return Composite(rgb=rgb, mask=mask, layer_alpha=alpha, kind=layers.kind, background=bg_index,
                         target_kind=layers.target_kind)


def compose_config_from_dict(d: dict) -> ComposeConfig:
    from graspsim.config import from_dict

    return from_dict(ComposeConfig, d)

