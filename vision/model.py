"""SegNet: a small U-Net trained from scratch that maps a wrist image to target logits.

Input ``B,3,H,W float32`` RGB in [0, 1] (H, W multiples of ``2**depth``); output ``B,H,W`` logits
(float32 or the autocast dtype). Encoder: ``depth`` stages of two 3x3 conv + BatchNorm + ReLU, each
followed by 2x2 max pooling, channels doubling from ``base_channels``; a bottleneck stage; decoder:
bilinear upsampling, concatenation with the skip, two 3x3 convs. A 1x1 conv gives one logit per pixel.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
import torch.nn.functional as F

from graspsim.torch_util import count_parameters  # noqa: F401 (re-exported; defined once in graspsim.torch_util)
from graspsim.validate import boolean, int_in


@dataclass(frozen=True)
class SegNetConfig:
    """Size of the segmentation network."""

    base_channels: int = 8
    """Channels of the full-resolution stage; doubled at every down-sampling (capped by max_channels)."""
    max_channels: int = 64
    """Channel cap for deep stages."""
    depth: int = 3
    """Number of 2x down-sampling stages (input sides must be multiples of 2**depth)."""
    chroma: bool = False
    """Also feed brightness-free colour features (chromaticity r, g, b / (r + g + b) and the spread max - min of
    the three channels) beside RGB: the target is defined by its hue, which these keep under shading, exposure
    and highlights. Off in older checkpoints."""

    def __post_init__(self) -> None:
        int_in("SegNetConfig", "base_channels", self.base_channels, 4, 128)
        if not isinstance(self.max_channels, int) or self.max_channels < self.base_channels:
            raise ValueError(f"SegNetConfig.max_channels must be an int >= base_channels; got {self.max_channels!r}")
        int_in("SegNetConfig", "depth", self.depth, 1, 5)
        boolean("SegNetConfig", "chroma", self.chroma)


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
    )


class SegNet(nn.Module):
    """Small U-Net; see the module docstring. ``SegNet(SegNetConfig())`` has 122,465 parameters."""

    # fixed input normalisation (ImageNet-free: mean/std of natural images are close to 0.45/0.25)
    MEAN = 0.45
    STD = 0.25

    def __init__(self, cfg: SegNetConfig | None = None):
        super().__init__()
        self.cfg = cfg or SegNetConfig()
        c = [min(self.cfg.base_channels * 2**i, self.cfg.max_channels) for i in range(self.cfg.depth + 1)]
        self.channels = c
        self.enc = nn.ModuleList([_block(7 if self.cfg.chroma else 3, c[0])] + [_block(c[i - 1], c[i]) for i in range(1, self.cfg.depth)])
        self.mid = _block(c[self.cfg.depth - 1], c[self.cfg.depth])
        self.dec = nn.ModuleList([_block(c[i + 1] + c[i], c[i]) for i in reversed(range(self.cfg.depth))])
        self.head = nn.Conv2d(c[0], 1, 1)
        nn.init.constant_(self.head.bias, -4.0)  # start near the (rare) positive rate

    @property
    def multiple(self) -> int:
        return 2**self.cfg.depth

    def forward(self, x: Tensor) -> Tensor:
        """``x``: B,3,H,W float in [0, 1] -> logits B,H,W."""
        if x.dim() != 4 or x.shape[1] != 3:
            raise ValueError(f"SegNet expects B,3,H,W input; got {tuple(x.shape)}")
        if x.shape[2] % self.multiple or x.shape[3] % self.multiple:
            raise ValueError(f"SegNet input sides must be multiples of {self.multiple}; got {tuple(x.shape[2:])}")
        if self.cfg.chroma:
            x = torch.cat([(x - self.MEAN) / self.STD] + chroma_features(x), 1)
        else:
            x = (x - self.MEAN) / self.STD
        skips = []
        for blk in self.enc:
            x = blk(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.mid(x)
        for blk, s in zip(self.dec, reversed(skips)):
            x = F.interpolate(x, size=s.shape[-2:], mode="bilinear", align_corners=False)
            x = blk(torch.cat([x, s], 1))
        return self.head(x)[:, 0]

    def mirror_averaged(self, x: Tensor) -> Tensor:
        """Test-time augmentation: logits B,H,W averaged over ``x`` (B,3,H,W in [0, 1]) and its left-right mirror
        (whose logits are flipped back). Two forward passes, so it costs about 2x :meth:`forward`; one pass over
        the concatenated batch measured 1.5x slower than two on CPU. The scenes are left-right symmetric in
        distribution, so the mirror is a second, equally valid view. On the default net, averaging the two raised
        held-out IoU by about 0.02 (docs/vision.md)."""
        mirrored = x.flip(-1)
        if x.is_contiguous(memory_format=torch.channels_last):
            mirrored = mirrored.contiguous(memory_format=torch.channels_last)
        return 0.5 * (self(x) + self(mirrored).flip(-1))


def chroma_features(x: Tensor) -> list[Tensor]:
    """Brightness-free colour of ``x`` B,3,H,W in [0, 1]: chromaticity B,3,H,W (each channel over the sum, centred
    on grey) and the channel spread B,1,H,W (max - min, a saturation that ignores hue), both scaled to about unit
    range."""
    xf = x.float()
    total = xf.sum(1, keepdim=True)
    chrom = (xf + 0.02) / (total + 0.06) - 1.0 / 3.0
    spread = xf.amax(1, keepdim=True) - xf.amin(1, keepdim=True)
    return [(chrom * 4.0).to(x.dtype), ((spread - 0.2) * 3.0).to(x.dtype)]


def cpu_has_fast_bf16() -> bool:
    """True when this CPU has native bfloat16 matrix instructions (AMX-BF16 or AVX512-BF16).

    Without them PyTorch emulates bf16 convolutions, which measured ~10x *slower* than float32 for
    :class:`SegNet` on an AVX2-only AMD EPYC (4.97 s vs 0.47 s per training step of 48 images), so bf16
    autocast is only worth using when this returns True. Reads ``/proc/cpuinfo`` (Linux); elsewhere False.
    """
    try:
        with open("/proc/cpuinfo") as f:
            flags = set()
            for line in f:
                if line.startswith("flags"):
                    flags.update(line.split(":", 1)[1].split())
                    break
    except OSError:
        return False
    return bool({"amx_bf16", "avx512_bf16"} & flags)
