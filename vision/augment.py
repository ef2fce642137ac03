"""Training-only appearance randomization of sim-real composites: what the target and the camera may look like
beyond what our renderer draws.

Our renderer draws the target with one directional light, Blinn-Phong shading, one sample per pixel (hard edges)
and no shadow on the photo. A real sphere seen by a real wrist camera, or one drawn by another renderer, differs
in all of these. :class:`AugmentConfig` widens each of them, all batched torch on the composites' device (JPEG
alone goes through OpenCV on the CPU). Every draw comes from the caller's ``torch.Generator``, so the same seed
gives the same batch on CPU.

Stages, in the order :class:`graspsim.vision.compose.Composer` applies them:

1. **Geometry** (when layers are rendered): target scale (:attr:`AugmentConfig.target_scale`).
2. **Object layer** (before compositing): coloured light on the rendered objects, specular highlights and a
   speckled surface on the target, a cast shadow on the photo, anti-aliased (soft) object edges.
3. **Frame** (after compositing): occluders over part of the target (removed from the mask), exposure, white
   balance and gamma, vignetting, defocus and motion blur, signal-dependent sensor noise, JPEG artefacts.

The label (the target mask) changes only where an occluder hides the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from graspsim.state import target_half_height
from graspsim.validate import probability


Range = Tuple[float, float]
KERNEL = 7  # side of the per-frame blur kernels (px)


@dataclass(frozen=True)
class AugmentConfig:
    """Training-only appearance randomization (all ``*_prob`` are per-frame probabilities)."""

    target_scale: Range = (0.75, 1.6)
    """Target size multiplier, uniform (every dimension of a cube or cylinder alike): with the simulator's 12.5-15 mm
    sphere it spans about 2-12 px across at 64x64 over the approach heights (1.0, 1.0 keeps the simulator's sizes)."""
    light_tint_prob: float = 0.3
    """Coloured light on the rendered objects (a per-channel gain of the layer only, not of the photo)."""
    light_tint: Range = (0.8, 1.2)
    """Per-channel gain range of the coloured light."""
    highlight_prob: float = 0.2
    """Specular highlights on the target: 1-2 bright, soft spots within the visible target."""
    highlight_strength: Range = (0.2, 0.8)
    """Blend towards white at a highlight's centre."""
    speckle_prob: float = 0.1
    """A multiplicative low-frequency texture on the target's surface."""
    speckle_strength: Range = (0.05, 0.25)
    """Relative amplitude of the speckle."""
    shadow_prob: float = 0.3
    """A cast shadow of the rendered objects on the photo: their silhouette, shifted and blurred, darkens it (a short
    one; :attr:`graspsim.vision.compose.ComposeConfig.cast_shadow_prob` draws long ones, swept from the object)."""
    shadow_darkness: Range = (0.2, 0.6)
    """Fraction of light the shadow removes at its core."""
    shadow_shift: float = 3.0
    """Largest shift of the shadow from its object (px, each axis)."""
    shadow_softness: Range = (0.0, 1.5)
    """Gaussian sigma of the shadow's edge (px; 0 = a hard shadow)."""
    soft_edge_prob: float = 0.6
    """Anti-aliased object edges: the layer's coverage is blurred at its border, as a multi-sample renderer or a
    real camera would show it (the mask keeps the pixel-centre rule)."""
    occluder_prob: float = 0.03
    """A grey or dark rectangle over part of the target (those pixels leave the mask)."""
    exposure_prob: float = 0.15
    """An extra exposure gain on the whole frame."""
    exposure: Range = (0.7, 1.35)
    """Exposure gain range."""
    white_balance_prob: float = 0.15
    """An extra per-channel gain on the whole frame (white balance error)."""
    white_balance: Range = (0.88, 1.12)
    """Per-channel gain range of the white balance error."""
    gamma_prob: float = 0.15
    """A gamma curve on the whole frame."""
    gamma: Range = (0.75, 1.35)
    """Gamma range (exponent applied to [0, 1] intensities)."""
    vignette_prob: float = 0.1
    """Radial darkening towards the corners, with a random centre."""
    vignette_strength: Range = (0.1, 0.4)
    """Darkening at the frame corner."""
    defocus_prob: float = 0.08
    """Gaussian defocus blur."""
    defocus_sigma: Range = (0.4, 1.0)
    """Defocus sigma (px)."""
    motion_blur_prob: float = 0.05
    """Linear motion blur in a random direction."""
    motion_length: Range = (1.5, 3.5)
    """Motion blur length (px)."""
    shot_noise_prob: float = 0.12
    """Signal-dependent sensor noise, std ``k * sqrt(intensity)``."""
    shot_noise: Range = (0.01, 0.04)
    """Range of ``k``."""
    jpeg_prob: float = 0.05
    """JPEG compression artefacts (OpenCV, on the CPU)."""
    jpeg_quality: Range = (60.0, 95.0)
    """JPEG quality range."""
    clean_fraction: float = 0.8
    """Share of each batch left exactly as the renderer draws it (target scale 1, no stage at all), so that part
    of every batch stays in our own composites' distribution while the rest is randomized (the first
    ``round(clean_fraction * n)`` frames of a batch; frames are drawn i.i.d., so which ones does not matter).
    Half and half gave +0.03 composite validation IoU over none at 1000 steps, transfer unchanged; at 2,500 steps
    0.8 gave +0.016 composite and +0.010 transfer validation IoU over 0.5 (two seeds, docs/notes/vision_log.md, round 10)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name.endswith("_prob"):
                probability("AugmentConfig", f.name, v)
            elif isinstance(v, tuple):
                if len(v) != 2 or not all(isinstance(x, (int, float)) and math.isfinite(x) for x in v) or v[0] > v[1] or v[0] < 0:
                    raise ValueError(f"AugmentConfig.{f.name} must be a (low, high) pair with 0 <= low <= high; got {v!r}")
        probability("AugmentConfig", "clean_fraction", self.clean_fraction)
        for name in ("target_scale", "light_tint", "exposure", "white_balance", "gamma"):
            if getattr(self, name)[0] <= 0:
                raise ValueError(f"AugmentConfig.{name} must be positive; got {getattr(self, name)!r}")
        for name in ("highlight_strength", "shadow_darkness"):
            if getattr(self, name)[1] > 1:
                raise ValueError(f"AugmentConfig.{name} must lie in [0, 1]; got {getattr(self, name)!r}")
        if not 0 <= self.shadow_shift <= KERNEL:
            raise ValueError(f"AugmentConfig.shadow_shift must be in [0, {KERNEL}]; got {self.shadow_shift!r}")
        if self.jpeg_quality[1] > 100:
            raise ValueError(f"AugmentConfig.jpeg_quality must lie in [0, 100]; got {self.jpeg_quality!r}")
        if self.motion_length[1] > KERNEL or self.defocus_sigma[1] > KERNEL / 4 or self.shadow_softness[1] > KERNEL / 4:
            raise ValueError(f"AugmentConfig: blur sizes must fit a {KERNEL}x{KERNEL} kernel (motion_length <= {KERNEL}, "
                             f"defocus_sigma and shadow_softness <= {KERNEL / 4})")

    @classmethod
    def off(cls) -> "AugmentConfig":
        """Every augmentation off (target scale 1): composites exactly as the renderer draws them."""
        kw = {f.name: 0.0 for f in fields(cls) if f.name.endswith("_prob")}
        return cls(target_scale=(1.0, 1.0), clean_fraction=0.0, **kw)


# ----------------------------------------------------------------------------------------------- helpers
def _u(r: Range, shape, g: torch.Generator, device) -> Tensor:
    return r[0] + (r[1] - r[0]) * torch.rand(shape, generator=g, device=device)


def _pick(p: float, n: int, g: torch.Generator, device) -> Tensor:
    """n bool: each frame selected with probability ``p`` (always draws, so the stream does not depend on p)."""
    return torch.rand((n,), generator=g, device=device) < p


def clean_frames(n: int, cfg: AugmentConfig, device) -> Tensor:
    """n bool: the frames of a batch that no stage touches (the first ``round(cfg.clean_fraction * n)``)."""
    return torch.arange(n, device=device) < int(round(cfg.clean_fraction * n))


def _grid(K: int, device) -> tuple[Tensor, Tensor]:
    k = torch.arange(K, device=device, dtype=torch.float32) - (K - 1) / 2
    return k[None, :, None].expand(1, K, K), k[None, None, :].expand(1, K, K)  # 1,K,K row (y) and column (x)


def gaussian_kernels(sigma: Tensor, K: int = KERNEL) -> Tensor:
    """Normalised Gaussian kernels ``n,K,K`` of per-frame ``sigma`` (n, px); sigma 0 gives the identity."""
    ky, kx = _grid(K, sigma.device)
    s = sigma.clamp_min(1e-3)[:, None, None]
    k = torch.exp(-(kx**2 + ky**2) / (2 * s * s))
    return k / k.sum((1, 2), keepdim=True)


def motion_kernels(length: Tensor, angle: Tensor, K: int = KERNEL) -> Tensor:
    """Normalised line kernels ``n,K,K``: a segment of ``length`` px (n) at ``angle`` rad (n), anti-aliased."""
    ky, kx = _grid(K, length.device)
    c, s = torch.cos(angle)[:, None, None], torch.sin(angle)[:, None, None]
    along = kx * c + ky * s
    across = -kx * s + ky * c
    half = (length / 2)[:, None, None]
    w = (1 - across.abs()).clamp_min(0) * (half + 0.5 - along.abs()).clamp(0, 1)
    return w / w.sum((1, 2), keepdim=True).clamp_min(1e-6)


def filter_frames(x: Tensor, kernels: Tensor) -> Tensor:
    """Convolve each frame of ``x`` (n,C,H,W) with its own kernel (n,K,K, odd K), replicate border."""
    n, C, H, W = x.shape
    if n == 0:  # a batch whose frames are all clean leaves nothing to filter
        return x
    K = kernels.shape[-1]
    w = kernels.repeat_interleave(C, 0)[:, None]  # n*C,1,K,K
    out = F.conv2d(F.pad(x.reshape(1, n * C, H, W), (K // 2,) * 4, mode="replicate"), w, groups=n * C)
    return out.view(n, C, H, W)


def _target_geometry(mask: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Centroid (cy, cx) and equivalent radius (px) of each frame's visible target, and whether it has one."""
    n, H, W = mask.shape
    m = mask.float()
    area = m.sum((1, 2))
    has = area > 0
    ys = torch.arange(H, device=mask.device, dtype=torch.float32)
    xs = torch.arange(W, device=mask.device, dtype=torch.float32)
    cy = (m.sum(2) * ys).sum(1) / area.clamp_min(1)
    cx = (m.sum(1) * xs).sum(1) / area.clamp_min(1)
    return cy, cx, (area / math.pi).sqrt().clamp_min(0.5), has


# ----------------------------------------------------------------------------------------------- stages
def scale_targets(state, cfg: AugmentConfig, g: torch.Generator):
    """Scale each scene's whole target by a factor drawn from ``cfg.target_scale``: its half-width
    (``sphere_radius``: a sphere's radius, half a cube's side, a cylinder's radius) and its half height
    (``target_half_height``) alike, so a cube stays a cube and a cylinder keeps its proportions; the target keeps
    resting on the table (centre at its new half height, ``graspsim.state.target_half_height``). ``state``: a
    :class:`graspsim.State` of B scenes; returns the new state."""
    s = _u(cfg.target_scale, (state.batch_size,), g, state.device)
    s = torch.where(clean_frames(state.batch_size, cfg, state.device), torch.ones_like(s), s)
    scaled = state.replace(sphere_radius=state.sphere_radius * s, target_half_height=state.target_half_height * s)
    pos = torch.cat([state.sphere_pos[:, :2], target_half_height(scaled)[:, None]], 1)
    return scaled.replace(sphere_pos=pos)


def augment_layer(color: Tensor, alpha: Tensor, mask: Tensor, bg: Tensor, kind: Tensor, cfg: AugmentConfig,
                  g: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """Object-layer stage. ``color`` n,3,H,W float in [0, 1] (the rendered layer; whole frame for sim frames),
    ``alpha`` / ``mask`` n,H,W bool, ``bg`` n,3,H,W photo crops in [0, 1], ``kind`` n (3 = fully rendered sim frame,
    left alone except for tint and target looks). Returns (color, coverage n,1,H,W float in [0, 1], bg): the
    composite is ``color * coverage + bg * (1 - coverage)``.

    Every random draw is made for all ``n`` frames, in a fixed order, so the stream does not depend on the clean
    share; the per-pixel work is done only on the frames after the clean ones (:func:`clean_frames`)."""
    n, _, H, W = color.shape
    dev = color.device
    k = int(clean_frames(n, cfg, dev).sum())  # the first k frames are clean
    sim_all = (kind == 3)[:, None, None, None]
    hard = torch.where(sim_all[:k], 1.0, alpha[:k, None].float())  # the clean frames' coverage
    color0, bg0 = color, bg
    color, bg, mask, sim = color[k:], bg[k:], mask[k:], sim_all[k:]
    a = alpha[k:, None].float()
    m = mask[:, None].float()
    # coloured light on the objects
    tint = torch.where(_pick(cfg.light_tint_prob, n, g, dev)[k:, None, None, None],
                       _u(cfg.light_tint, (n, 3, 1, 1), g, dev)[k:], torch.ones((n - k, 3, 1, 1), device=dev))
    color = color * torch.where(sim, tint, 1 + (tint - 1) * a)
    # target surface: speckle (low-frequency multiplicative texture)
    sp = _pick(cfg.speckle_prob, n, g, dev)[k:, None, None, None] * _u(cfg.speckle_strength, (n, 1, 1, 1), g, dev)[k:]
    tex = F.interpolate(torch.randn((n, 1, H // 4, W // 4), generator=g, device=dev)[k:], size=(H, W),
                        mode="bilinear", align_corners=False)
    color = color * (1 + sp * tex * m)
    # specular highlights: 1-2 soft bright spots inside the target, offset from its centre towards the light
    cy, cx, rad, has = _target_geometry(mask)
    ys = torch.arange(H, device=dev, dtype=torch.float32)[None, :, None]
    xs = torch.arange(W, device=dev, dtype=torch.float32)[None, None, :]
    spot = torch.zeros((n - k, H, W), device=dev)
    two = (torch.rand((n,), generator=g, device=dev) < 0.3)[k:]
    for j in range(2):
        ang = torch.rand((n,), generator=g, device=dev)[k:] * 2 * math.pi
        off = (0.2 + 0.5 * torch.rand((n,), generator=g, device=dev)[k:]) * rad
        sig = (0.1 + 0.2 * torch.rand((n,), generator=g, device=dev)[k:]) * rad + 0.2
        py, px = cy + off * torch.sin(ang), cx + off * torch.cos(ang)
        blob = torch.exp(-((ys - py[:, None, None]) ** 2 + (xs - px[:, None, None]) ** 2) / (2 * sig[:, None, None] ** 2))
        keep = torch.ones_like(two) if j == 0 else two
        spot = torch.maximum(spot, blob * keep[:, None, None])
    hl = ((_pick(cfg.highlight_prob, n, g, dev)[k:] & has)[:, None, None, None]
          * _u(cfg.highlight_strength, (n, 1, 1, 1), g, dev)[k:])
    w = (hl * spot[:, None] * m).clamp(0, 1)
    light = torch.clamp(tint * 1.1, max=1.0)
    color = color * (1 - w) + light * w
    # cast shadow on the photo: the objects' silhouette shifted and blurred
    shift = torch.round(_u((-cfg.shadow_shift, cfg.shadow_shift), (n, 2), g, dev))[k:]
    ky, kx = _grid(KERNEL, dev)
    delta = ((ky - shift[:, 0, None, None]).abs() < 0.5) & ((kx - shift[:, 1, None, None]).abs() < 0.5)
    soft = _u(cfg.shadow_softness, (n,), g, dev)[k:]
    kern = filter_frames(delta.float()[:, None], gaussian_kernels(soft, KERNEL))[:, 0]  # shifted Gaussian
    kern = kern / kern.sum((1, 2), keepdim=True).clamp_min(1e-6)
    sh = filter_frames(a, kern)
    dark = ((_pick(cfg.shadow_prob, n, g, dev)[k:, None, None, None] & ~sim)
            * _u(cfg.shadow_darkness, (n, 1, 1, 1), g, dev)[k:])
    bg = bg * (1 - dark * sh)
    # soft edges: blurred coverage, with the layer's colour extended past its border by normalised convolution
    edge = (_pick(cfg.soft_edge_prob, n, g, dev)[k:, None, None, None] & ~sim).float()
    box = torch.tensor([[1.0, 2.0, 1.0]], device=dev)
    k3 = (box.T @ box / 16).expand(n - k, 3, 3)
    a_soft = filter_frames(a, k3)
    c_ext = filter_frames(color * a, k3) / a_soft.clamp_min(1e-3)
    cover = torch.where(sim, torch.ones_like(a), a + edge * (a_soft - a))
    color = torch.where((edge > 0) & (a == 0), c_ext, color)
    return (torch.cat([color0[:k], color.clamp(0, 1)]), torch.cat([hard, cover.clamp(0, 1)]),
            torch.cat([bg0[:k], bg]))


def augment_frame(color: Tensor, mask: Tensor, cfg: AugmentConfig, g: torch.Generator) -> tuple[Tensor, Tensor]:
    """Frame stage on composites ``color`` n,3,H,W float in [0, 1] with target ``mask`` n,H,W bool (before sensor
    noise and quantisation); returns (color, mask). Draws for all ``n`` frames and works on the frames after the
    clean ones, as :func:`augment_layer` does."""
    n, _, H, W = color.shape
    dev = color.device
    k = int(clean_frames(n, cfg, dev).sum())  # the first k frames are clean
    color0, mask0 = color, mask
    color, mask = color[k:], mask[k:]
    # occluders: a rectangle near the target's centre hides part of it
    cy, cx, rad, has = _target_geometry(mask)
    occ = _pick(cfg.occluder_prob, n, g, dev)[k:] & has
    oc = torch.stack([cy, cx], 1) + (torch.rand((n, 2), generator=g, device=dev)[k:] * 2 - 1) * (rad[:, None] + 1)
    half = 0.5 + torch.rand((n, 2), generator=g, device=dev)[k:] * (rad[:, None] + 2)
    ys = torch.arange(H, device=dev, dtype=torch.float32)[None, :, None]
    xs = torch.arange(W, device=dev, dtype=torch.float32)[None, None, :]
    box = ((ys - oc[:, 0, None, None]).abs() <= half[:, 0, None, None]) & ((xs - oc[:, 1, None, None]).abs() <= half[:, 1, None, None])
    box = box & occ[:, None, None]
    shade = (torch.rand((n, 1, 1, 1), generator=g, device=dev)[k:] * 0.6
             * (1 + 0.1 * torch.randn((n, 3, 1, 1), generator=g, device=dev)[k:]))
    color = torch.where(box[:, None], shade.clamp(0, 1).expand(n - k, 3, H, W), color)
    mask = mask & ~box
    # exposure, white balance, gamma
    ones = torch.ones((n - k, 1, 1, 1), device=dev)
    exp = torch.where(_pick(cfg.exposure_prob, n, g, dev)[k:, None, None, None], _u(cfg.exposure, (n, 1, 1, 1), g, dev)[k:], ones)
    wb = torch.where(_pick(cfg.white_balance_prob, n, g, dev)[k:, None, None, None],
                     _u(cfg.white_balance, (n, 3, 1, 1), g, dev)[k:], ones.expand(n - k, 3, 1, 1))
    gam = torch.where(_pick(cfg.gamma_prob, n, g, dev)[k:, None, None, None], _u(cfg.gamma, (n, 1, 1, 1), g, dev)[k:], ones)
    color = (color * exp * wb).clamp(0, 1).pow(gam)
    # vignetting around a jittered centre
    c = (torch.rand((n, 2), generator=g, device=dev)[k:] - 0.5) * 0.4 * torch.tensor([H, W], device=dev) + torch.tensor(
        [(H - 1) / 2, (W - 1) / 2], device=dev)
    r2 = ((ys - c[:, 0, None, None]) ** 2 + (xs - c[:, 1, None, None]) ** 2) / ((H * H + W * W) / 4)  # 1 at a corner
    vig = _pick(cfg.vignette_prob, n, g, dev)[k:, None, None] * _u(cfg.vignette_strength, (n, 1, 1), g, dev)[k:]
    color = color * (1 - vig * r2.clamp(max=1.5))[:, None]
    # defocus or motion blur (one kernel per frame), convolving only the frames that drew one
    defocus = _pick(cfg.defocus_prob, n, g, dev)
    motion = _pick(cfg.motion_blur_prob, n, g, dev) & ~defocus
    sigma = _u(cfg.defocus_sigma, (n,), g, dev)
    length, angle = _u(cfg.motion_length, (n,), g, dev), torch.rand((n,), generator=g, device=dev) * math.pi
    blur = torch.nonzero((defocus | motion)[k:]).flatten()
    if len(blur):
        i = blur + k
        kern = torch.where(motion[i, None, None], motion_kernels(length[i], angle[i]), gaussian_kernels(sigma[i]))
        color = color.index_copy(0, blur, filter_frames(color[blur], kern))
    # signal-dependent (shot) noise
    s = _pick(cfg.shot_noise_prob, n, g, dev)[k:, None, None, None] * _u(cfg.shot_noise, (n, 1, 1, 1), g, dev)[k:]
    color = color + s * color.clamp_min(0).sqrt() * torch.randn((n, 3, H, W), generator=g, device=dev)[k:]
    return torch.cat([color0[:k], color.clamp(0, 1)]), torch.cat([mask0[:k], mask])


def jpeg_frames(rgb: Tensor, cfg: AugmentConfig, g: torch.Generator) -> Tensor:
    """JPEG-compress a random share (``cfg.jpeg_prob``) of ``rgb`` n,3,H,W uint8 frames at a random quality
    (OpenCV on the CPU; the result returns to ``rgb``'s device)."""
    n = rgb.shape[0]
    sel = _pick(cfg.jpeg_prob, n, g, rgb.device) & ~clean_frames(n, cfg, rgb.device)
    q = _u(cfg.jpeg_quality, (n,), g, rgb.device).round().int().tolist()
    idx = torch.nonzero(sel).flatten().tolist()
    if not idx:
        return rgb
    import cv2
    import numpy as np

    out = rgb.clone()
    frames = rgb[idx].permute(0, 2, 3, 1).cpu().numpy()
    for j, i in enumerate(idx):
        ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(frames[j][..., ::-1]), [cv2.IMWRITE_JPEG_QUALITY, q[i]])
        if ok:
            dec = cv2.imdecode(buf, cv2.IMREAD_COLOR)[..., ::-1]
            out[i] = torch.from_numpy(np.ascontiguousarray(dec)).permute(2, 0, 1).to(rgb.device)
    return out
