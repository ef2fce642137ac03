"""One training step's input: composites (optionally mixed with HDF5 frames) cut into square patches."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch
from torch import Tensor

from .compose import Composer, Layers
from .train_config import TrainVisionConfig

if TYPE_CHECKING:
    from .hdf5_frames import HDF5Frames
    from .labelled import RealFrames


def random_patches(rgb: Tensor, mask: Tensor, side: int, per_frame: int, target_prob: float,
                   g: torch.Generator) -> tuple[Tensor, Tensor]:
    """Cut ``per_frame`` square patches of ``side`` px from every frame.

    ``rgb`` B,3,H,W, ``mask`` B,H,W bool -> (B*per_frame,3,side,side, B*per_frame,side,side), patches of frame
    ``i`` at rows ``i*per_frame ...``. With probability ``target_prob`` a patch of a target-visible frame is
    placed uniformly among the windows that contain the target's centre pixel; otherwise uniformly in the frame.
    """
    B, _, H, W = rgb.shape
    dev = rgb.device
    n = B * per_frame
    frame = torch.arange(B, device=dev).repeat_interleave(per_frame)
    # target centre pixel per frame, then one row per patch
    ys = torch.arange(H, device=dev, dtype=torch.float32)
    xs = torch.arange(W, device=dev, dtype=torch.float32)
    area = mask.sum((1, 2)).clamp_min(1).float()
    cy = ((mask.sum(2).float() * ys).sum(1) / area).round().long()[frame]
    cx = ((mask.sum(1).float() * xs).sum(1) / area).round().long()[frame]
    has = mask.flatten(1).any(1)[frame]
    u = torch.rand((n, 2), generator=g, device=dev)
    # windows [o, o + side) containing c: o in [max(0, c - side + 1), min(c, H - side)]
    lo_y, hi_y = (cy - side + 1).clamp_min(0), cy.clamp_max(H - side)
    lo_x, hi_x = (cx - side + 1).clamp_min(0), cx.clamp_max(W - side)
    ty = lo_y + (u[:, 0] * (hi_y - lo_y + 1)).long().clamp_max(hi_y - lo_y)
    tx = lo_x + (u[:, 1] * (hi_x - lo_x + 1)).long().clamp_max(hi_x - lo_x)
    v = torch.rand((n, 2), generator=g, device=dev)
    ry = (v[:, 0] * (H - side + 1)).long().clamp_max(H - side)
    rx = (v[:, 1] * (W - side + 1)).long().clamp_max(W - side)
    aim = has & (torch.rand((n,), generator=g, device=dev) < target_prob)
    oy, ox = torch.where(aim, ty, ry), torch.where(aim, tx, rx)
    k = torch.arange(side, device=dev)
    rows = (oy[:, None] + k)[:, :, None]  # n,side,1
    cols = (ox[:, None] + k)[:, None, :]  # n,1,side
    f = frame[:, None, None]
    patch_rgb = rgb.permute(0, 2, 3, 1)[f, rows, cols].permute(0, 3, 1, 2)
    return patch_rgb, mask[f, rows, cols]


def _hdf5_share(cfg: TrainVisionConfig, hdf5: "HDF5Frames | None") -> int:
    """Frames of each training batch taken from ``hdf5`` (0 without it)."""
    return int(round(cfg.batch_size * cfg.hdf5_fraction)) if hdf5 is not None else 0


def _real_share(cfg: TrainVisionConfig, real: "RealFrames | None") -> int:
    """Frames of each training batch taken from the user's labelled ``real`` frames (0 without them)."""
    return int(round(cfg.batch_size * cfg.real_fraction)) if real is not None else 0


def training_batch(composer: Composer, cfg: TrainVisionConfig, gen: torch.Generator, hdf5: "HDF5Frames | None" = None,
                   layers: Optional[Layers] = None, real: "RealFrames | None" = None,
                   with_frames: bool = False) -> tuple[Tensor, ...]:
    """One step's training input: ``x`` N,3,S,S float32 in [0, 1] (channels-last on CPU) and ``mask`` N,S,S bool.

    Draws ``cfg.batch_size`` composites (a ``cfg.hdf5_fraction`` share from ``hdf5`` when given; with ``layers``,
    those rendered layers on fresh background crops instead of new renders; a ``cfg.real_fraction`` share from ``real``
    when given) and cuts them into
    ``cfg.patches_per_frame`` patches of ``cfg.patch`` px (N = batch * patches; S = patch), or keeps whole frames
    (N = batch, S = image size) when ``cfg.patch`` is 0 or not smaller than the image. ``with_frames`` (the locator of
    a cropped net learns on them) adds the whole frames before cutting: ``(x, mask, frames, frames_mask)``,
    frames B,3,H,W float32 in [0, 1] and B,H,W bool."""
    n_hdf5, n_real = _hdf5_share(cfg, hdf5), _real_share(cfg, real)
    comp = composer(cfg.batch_size - n_hdf5 - n_real, gen) if layers is None else composer.composite(layers, gen, hflip=True)
    rgb, mask = comp.rgb, comp.mask
    for source, n in ((hdf5, n_hdf5), (real, n_real)):
        if n:
            sr, sm = source.sample(n, gen)
            rgb, mask = torch.cat([rgb, sr.to(rgb.device)]), torch.cat([mask, sm.to(rgb.device)])
    frames = (rgb.float().div_(255.0), mask) if with_frames else ()
    if 0 < cfg.patch < rgb.shape[-1]:
        rgb, mask = random_patches(rgb, mask, cfg.patch, cfg.patches_per_frame, cfg.patch_target_prob, gen)
    x = rgb.float().div_(255.0)
    if x.device.type == "cpu":
        x = x.contiguous(memory_format=torch.channels_last)
    return (x, mask, *frames)
