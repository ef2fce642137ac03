"""SegNet: a small convolutional net trained from scratch that maps a wrist image to target logits.

Input ``B,3,H,W float32`` RGB in [0, 1] (H, W multiples of :attr:`SegNet.multiple`); output ``B,H,W`` logits
(float32 or the autocast dtype). Two designs (``SegNetConfig.arch``):

* ``"unet"`` (the default, and every checkpoint before issue 27): a U-Net at full resolution. Encoder: ``depth``
  stages of two 3x3 conv + BatchNorm + ReLU, each followed by 2x2 max pooling, channels doubling from
  ``base_channels``; a bottleneck stage; decoder: bilinear upsampling, concatenation with the skip, two 3x3 convs; a
  1x1 conv gives one logit per pixel. 192 MFLOP per 64x64 frame at 12/24/48/96 channels.
* ``"halfres"`` (issue 27's cheaper design, not the default: it missed the accuracy targets): the same
  encoder-decoder idea run at half resolution. A stride-2 3x3 stem; ``depth`` stages of max pooling + two 3x3 convs;
  a light decoder (1x1 projection, bilinear 2x upsampling, *added* to the skip, one 3x3 conv). Its full-resolution
  output comes either from a 1x1 conv giving four logits per half-resolution pixel, rearranged into the 2x2 pixels
  it covers (sub-pixel output, ``pixel_shuffle``; 31 MFLOP at 16/32/64 channels), or, with ``full_channels`` > 0,
  from a thin full-resolution stage before the stem whose features come back through a full-resolution decoder
  stage (36 MFLOP with 8 full-resolution channels). Counts by ``torch.utils.flop_counter``.

A ``unet`` with ``crop`` > 0 is a *cropped cascade* (issue 27): the target covers a few pixels of the frame, so most
of a whole-frame U-Net's work is spent where there is nothing to find. A :class:`Locator` of a few MFLOP scores
every 4x4 cell of the whole frame, and the U-Net runs only on the ``crop`` x ``crop`` window around the best cell;
pixels outside it get :data:`OUTSIDE_LOGIT`. The U-Net trains on patches of the window's side (as every ``unet``
does) and on the windows the locator picks, so what it sees at inference is what it learned on; the locator learns
from the same composites' whole frames (:func:`locator_loss`). The whole cascade, windows included, is gathered and
scattered with index tensors: batched, no per-frame loop, and exportable to ONNX with a dynamic batch.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn
import torch.nn.functional as F

from graspsim.torch_util import count_parameters  # noqa: F401 (re-exported; defined once in graspsim.torch_util)
from graspsim.validate import boolean, int_in


@dataclass(frozen=True)
class SegNetConfig:
    """Design and size of the segmentation network."""

    base_channels: int = 8
    """Channels of the full-resolution stage; doubled at every down-sampling (capped by max_channels)."""
    max_channels: int = 64
    """Channel cap for deep stages."""
    depth: int = 3
    """Number of 2x max-pooling stages (``halfres``: after the stride-2 stem). Input sides must be multiples of
    :attr:`multiple`."""
    chroma: bool = False
    """Also feed brightness-free colour features (chromaticity r, g, b / (r + g + b) and the spread max - min of
    the three channels) beside RGB: the target is defined by its hue, which these keep under shading, exposure
    and highlights. Off in older checkpoints."""
    arch: Literal["unet", "halfres"] = "unet"
    """``unet``: full-resolution U-Net (the default; stored configs without this key rebuild it); ``halfres``:
    stride-2 stem, light decoder, full-resolution output (module docstring), about a fifth of the cost."""

    crop: int = 0
    """``unet`` only: 0 = the U-Net reads the whole frame; > 0 = a cropped cascade (issue 27). A small *locator* net
    reads the whole frame and scores every 4x4 cell for "the target is here"; the U-Net then runs only on the
    ``crop`` x ``crop`` window centred on the best cell, and every pixel outside it gets the logit
    :data:`OUTSIDE_LOGIT`. Training cuts patches of the same side (``--patch`` must equal it), so the U-Net sees at
    inference the windows it was trained on, and also trains on the windows the locator picks. A multiple of :attr:`multiple`."""
    locator_channels: int = 8
    """``crop`` > 0: channels of the locator's first (half-resolution) stage; its quarter- and eighth-resolution
    stages have 2x and 4x as many."""
    recentre: int = 0
    """``crop`` > 0: centre the window on the centroid of the locator's confident cells (logit > 1, weighted by their
    probability) within this many cells of the best one, instead of on the best cell itself: a large target's best
    cell often lies near its edge, and a window centred there cuts the target. 0 (every checkpoint before it) = the
    best cell. An inference setting: the weights do not change with it."""
    context: bool = False
    """``crop`` > 0: the locator's eighth-resolution features, pooled over the whole frame (mean and max), are added
    to the window U-Net's bottleneck, so the window is judged with what the rest of the frame looks like."""

    full_channels: int = 0
    """``halfres`` only: 0 = the stride-2 stem reads the input and a sub-pixel head gives the full-resolution logits;
    > 0 = a full-resolution 3x3 stage of this many channels before the stride-2 stem, whose features come back
    through a full-resolution decoder stage (upsampled features added, one 3x3 conv, 1x1 head)."""

    @property
    def multiple(self) -> int:
        """The net's total stride: input sides (and training patches) must be multiples of it."""
        return 2 ** (self.depth + (self.arch == "halfres"))

    def __post_init__(self) -> None:
        if self.arch not in ("unet", "halfres"):
            raise ValueError(f"SegNetConfig.arch must be 'unet' or 'halfres'; got {self.arch!r}")
        int_in("SegNetConfig", "base_channels", self.base_channels, 4, 128)
        if not isinstance(self.max_channels, int) or self.max_channels < self.base_channels:
            raise ValueError(f"SegNetConfig.max_channels must be an int >= base_channels; got {self.max_channels!r}")
        int_in("SegNetConfig", "depth", self.depth, 1, 5)
        boolean("SegNetConfig", "chroma", self.chroma)
        int_in("SegNetConfig", "full_channels", self.full_channels, 0, 128)
        if self.full_channels and self.arch != "halfres":
            raise ValueError("SegNetConfig.full_channels needs arch='halfres'")
        int_in("SegNetConfig", "crop", self.crop, 0, 1024)
        int_in("SegNetConfig", "locator_channels", self.locator_channels, 2, 128)
        if self.crop and self.arch != "unet":
            raise ValueError("SegNetConfig.crop needs arch='unet'")
        boolean("SegNetConfig", "context", self.context)
        int_in("SegNetConfig", "recentre", self.recentre, 0, 64)
        if self.recentre and not self.crop:
            raise ValueError("SegNetConfig.recentre moves the cascade's window: it needs crop > 0")
        if self.context and not self.crop:
            raise ValueError("SegNetConfig.context is the window U-Net's view of the whole frame: it needs crop > 0")
        if self.crop % self.multiple:
            raise ValueError(f"SegNetConfig.crop must be a multiple of the net's stride {self.multiple}; got {self.crop}")


def _cbr(cin: int, cout: int, k: int = 3, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(*_cbr(cin, cout), *_cbr(cout, cout))


OUTSIDE_LOGIT = -20.0
"""The logit a cropped cascade gives every pixel outside its window (probability 2e-9)."""
LOCATOR_STRIDE = 4
"""Side in px of the cells a :class:`Locator` scores."""


class Locator(nn.Module):
    """The cheap first stage of a cropped cascade: input features B,C,H,W (H, W multiples of 8) -> one logit per
    4x4 cell, B,H/4,W/4, "this cell holds target pixels". Two stride-2 3x3 stages (``c`` then ``2c`` channels), a
    3x3 stage at quarter resolution, an eighth-resolution branch (max pooling, two 3x3 stages of ``4c``) whose 1x1
    projection is upsampled and added back, one more 3x3 stage and a 1x1 head: about 6 MFLOP per 64x64 frame at
    ``c`` = 8, with a receptive field that spans most of the frame (a red blob is judged in its surroundings)."""

    def __init__(self, cin: int, c: int):
        super().__init__()
        self.down = nn.Sequential(*_cbr(cin, c, stride=2), *_cbr(c, 2 * c, stride=2), *_cbr(2 * c, 2 * c))
        self.deep = nn.Sequential(nn.MaxPool2d(2), *_cbr(2 * c, 4 * c), *_cbr(4 * c, 4 * c), *_cbr(4 * c, 2 * c, k=1))
        self.fuse = nn.Sequential(*_cbr(2 * c, 2 * c))
        self.head = nn.Conv2d(2 * c, 1, 1)

    def forward(self, f: Tensor, pooled: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Cell logits B,H/4,W/4; with ``pooled``, also the eighth-resolution features' mean and max over the frame,
        B,4c (the cascade's whole-frame context, :attr:`SegNetConfig.context`)."""
        a = self.down(f)
        d = self.deep(a)
        cells = self.head(self.fuse(a + F.interpolate(d, size=a.shape[-2:], mode="nearest")))[:, 0]
        if not pooled:
            return cells
        return cells, torch.cat([d.mean((2, 3)), d.amax((2, 3))], 1)


RECENTRE_LOGIT = 1.0
"""Cells above this logit count in the window's centroid (:attr:`SegNetConfig.recentre`)."""


def window_indices(cells: Tensor, side: int, size: tuple[int, int], recentre: int = 0) -> Tensor:
    """Flat pixel indices B,side*side (row-major, into frames of ``size`` = H, W) of the ``side`` x ``side`` window
    of every frame centred on the best cell of ``cells`` B,h,w (logits of :data:`LOCATOR_STRIDE`-px cells), or with
    ``recentre`` > 0 on the probability-weighted centroid of the cells above :data:`RECENTRE_LOGIT` within
    ``recentre`` cells of it (:attr:`SegNetConfig.recentre`), moved inside the frame where it would stick out. Built
    without the batch size in any shape, so an ONNX export keeps a dynamic batch."""
    H, W = size
    h, w = cells.shape[-2:]
    best = cells.flatten(1).argmax(1)
    by, bx = torch.div(best, w, rounding_mode="floor"), best % w
    half = LOCATOR_STRIDE // 2
    if recentre:
        gy = torch.arange(h, device=cells.device)[None, :, None]
        gx = torch.arange(w, device=cells.device)[None, None, :]
        near = ((gy - by[:, None, None]).abs() <= recentre) & ((gx - bx[:, None, None]).abs() <= recentre)
        weight = torch.sigmoid(cells.float()) * (near & (cells > RECENTRE_LOGIT))
        weight = weight + 1e-6 * ((gy == by[:, None, None]) & (gx == bx[:, None, None]))  # the best cell if alone
        total = weight.sum((1, 2))
        cy = torch.round((weight * gy).sum((1, 2)) / total * LOCATOR_STRIDE).long() + half
        cx = torch.round((weight * gx).sum((1, 2)) / total * LOCATOR_STRIDE).long() + half
    else:
        cy = by * LOCATOR_STRIDE + half
        cx = bx * LOCATOR_STRIDE + half
    y0 = (cy - side // 2).clamp(0, H - side)
    x0 = (cx - side // 2).clamp(0, W - side)
    k = torch.arange(side, device=cells.device)
    return ((y0[:, None] + k)[:, :, None] * W + (x0[:, None] + k)[:, None, :]).flatten(1)


def gather_windows(f: Tensor, index: Tensor, side: int) -> Tensor:
    """The windows ``index`` (:func:`window_indices`) of ``f`` B,C,H,W -> B,C,side,side (channels-last memory)."""
    flat = f.permute(0, 2, 3, 1).flatten(1, 2)  # B,H*W,C: free for channels-last input
    win = torch.gather(flat, 1, index[:, :, None].expand(-1, -1, f.shape[1]))
    return win.unflatten(1, (side, side)).permute(0, 3, 1, 2)


def locator_loss(cells: Tensor, mask: Tensor) -> Tensor:
    """Training loss of a :class:`Locator`: ``cells`` B,h,w logits, ``mask`` B,H,W bool (H = h * 4). For every frame
    with target pixels, the softmax over its cells must put its mass on cells that hold target pixels
    (``-log`` of that mass, averaged over those frames); the window is centred on the argmax cell, so this trains
    exactly the choice made at inference. Target-free frames add nothing: whether a window shows the target is the
    U-Net's call (it also trains on the windows the locator picks in them, :meth:`SegNet.forward`). 0 for a batch
    without targets."""
    hit = F.max_pool2d(mask[:, None].float(), LOCATOR_STRIDE)[:, 0].flatten(1) > 0
    has = hit.any(1)
    if not bool(has.any()):
        return cells.sum() * 0.0
    c = cells.float().flatten(1)[has]
    on = c.masked_fill(~hit[has], float("-inf"))
    return (torch.logsumexp(c, 1) - torch.logsumexp(on, 1)).mean()


def _twin(layer: nn.Module, x: Tensor) -> Tensor:
    """``layer`` (a convolution, an eval-mode BatchNorm, a ReLU, an Identity, or an ``nn.Sequential`` of them) on ``x``
    B,2C,H,W that holds two inputs' C channels side by side: each half gets exactly what ``layer`` would give it
    alone (the weights repeated, the convolution grouped in two)."""
    if isinstance(layer, nn.Sequential):
        for m in layer:
            x = _twin(m, x)
        return x
    if isinstance(layer, nn.Conv2d) and layer.padding_mode == "zeros":
        bias = None if layer.bias is None else torch.cat([layer.bias, layer.bias])
        return F.conv2d(x, torch.cat([layer.weight, layer.weight]), bias, layer.stride, layer.padding, layer.dilation,
                        2 * layer.groups)
    if isinstance(layer, nn.BatchNorm2d) and not layer.training:
        two = (lambda t: None if t is None else torch.cat([t, t]))
        return F.batch_norm(x, two(layer.running_mean), two(layer.running_var), two(layer.weight), two(layer.bias),
                            False, 0.0, layer.eps)
    if isinstance(layer, (nn.ReLU, nn.Identity)):
        return layer(x)
    raise TypeError(f"_twin: no side-by-side form for {type(layer).__name__}")


class SegNet(nn.Module):
    """Segmentation net; see the module docstring. ``SegNet(SegNetConfig())`` (a 8/16/32/64 ``unet``) has 122,465
    parameters, the ``train-vision`` default (12/24/48/96) 275,281, ``halfres`` at 16/32/64 with 8 full-resolution
    channels 86,225, the cropped cascade ``graspsim.vision.train_config.CROPPED_MODEL`` 172,294 (169,158 without its context layer)."""

    # fixed input normalisation (ImageNet-free: mean/std of natural images are close to 0.45/0.25)
    MEAN = 0.45
    STD = 0.25

    def __init__(self, cfg: SegNetConfig | None = None):
        super().__init__()
        self.cfg = cfg = cfg or SegNetConfig()
        c = [min(cfg.base_channels * 2**i, cfg.max_channels) for i in range(cfg.depth + 1)]
        self.channels = c
        cin = 7 if cfg.chroma else 3
        if cfg.arch == "unet":
            self.enc = nn.ModuleList([_block(cin, c[0])] + [_block(c[i - 1], c[i]) for i in range(1, cfg.depth)])
            self.mid = _block(c[cfg.depth - 1], c[cfg.depth])
            self.dec = nn.ModuleList([_block(c[i + 1] + c[i], c[i]) for i in reversed(range(cfg.depth))])
            self.head = nn.Conv2d(c[0], 1, 1)
            if cfg.crop:
                self.locator = Locator(cin, cfg.locator_channels)
                if cfg.context:
                    self.context = nn.Linear(4 * cfg.locator_channels, c[cfg.depth])
        else:  # halfres: levels 0..depth at 1/2, 1/4, ... of the input side
            f = cfg.full_channels
            if f:
                self.full = nn.Sequential(*_cbr(cin, f))
                self.stem = nn.Sequential(*_cbr(f, c[0], stride=2))
            else:
                self.stem = nn.Sequential(*_cbr(cin, c[0], stride=2), *_cbr(c[0], c[0]))
            self.enc = nn.ModuleList([_block(c[i - 1], c[i]) for i in range(1, cfg.depth + 1)])
            self.proj = nn.ModuleList([nn.Sequential(*_cbr(c[i + 1], c[i], k=1)) for i in reversed(range(cfg.depth))])
            self.dec = nn.ModuleList([nn.Sequential(*_cbr(c[i], c[i])) for i in reversed(range(cfg.depth))])
            if f:
                self.proj_full = nn.Sequential(*_cbr(c[0], f, k=1))
                self.dec_full = nn.Sequential(*_cbr(f, f))
                self.head = nn.Conv2d(f, 1, 1)
            else:
                self.head = nn.Conv2d(c[0], 4, 1)  # the 2x2 full-resolution pixels under each half-resolution one
        nn.init.constant_(self.head.bias, -4.0)  # start near the (rare) positive rate

    @property
    def multiple(self) -> int:
        return self.cfg.multiple

    def _inputs(self, x: Tensor) -> Tensor:
        """``x`` B,3,H,W in [0, 1] -> the first layer's input: normalised RGB (and the chroma features)."""
        # the one place that picks the layout: the U-Net's convolutions run channels-last on CPU; halfres (and every
        # net on other devices) reads the plain layout
        last = self.cfg.arch == "unet" and x.device.type == "cpu"
        # a net whose weights are stored in bfloat16 (Segmenter's inference copy) gets its input in bfloat16 at once:
        # the same rounding autocast would apply at the first convolution, without a float32 copy of the features
        dtype = self.head.weight.dtype if self.head.weight.dtype == torch.bfloat16 else x.dtype
        if not self.cfg.chroma:
            y = (x - self.MEAN) / self.STD
            return y.to(dtype, memory_format=torch.channels_last if last else torch.preserve_format)
        return input_features(x, self.MEAN, self.STD, channels_last=last, dtype=dtype)

    def forward(self, x: Tensor, frames: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor, Tensor]:
        """``x``: B,3,H,W float in [0, 1] -> logits B,H,W. A cropped net (``crop`` > 0) runs its cascade on inputs
        larger than the crop and the U-Net alone on inputs of at most the crop's area (training patches).
        Training a cropped net: with ``frames`` N,3,H',W' (whole frames), the locator scores ``frames``, and the
        U-Net runs on the patches ``x`` followed by the N windows the locator picks (in target-free frames these are
        the hard negatives the cascade meets at inference); with ``context``, patch i is taken to come from frame
        i // (patches per frame) and gets that frame's context. Returns (U-Net logits B+N,crop,crop, the locator's cell
        logits N,H'/4,W'/4, the windows' flat pixel indices N,crop*crop of :func:`window_indices`), in one call so
        that data-parallel training sees every parameter."""
        if frames is not None:
            if not self.cfg.crop:
                raise ValueError("SegNet.forward(frames=...) is for cropped nets (SegNetConfig.crop > 0)")
            f = self._inputs(frames)
            cells, ctx = self._locate(f)
            index = window_indices(cells.detach(), self.cfg.crop, tuple(f.shape[-2:]), self.cfg.recentre)
            win = gather_windows(f, index, self.cfg.crop)
            if ctx is not None:  # patch i was cut from frame i // (patches per frame)
                if x.shape[0] % f.shape[0]:
                    raise ValueError(f"SegNet.forward: with context, the patches ({x.shape[0]}) must be a whole "
                                     f"number per frame ({f.shape[0]} frames), in frame order")
                ctx = torch.cat([ctx.repeat_interleave(x.shape[0] // f.shape[0], 0), ctx])
            return self._unet(torch.cat([self._inputs(x), win.to(memory_format=torch.channels_last)]), ctx), cells, index
        if x.dim() != 4 or x.shape[1] != 3:
            raise ValueError(f"SegNet expects B,3,H,W input; got {tuple(x.shape)}")
        if x.shape[2] % self.multiple or x.shape[3] % self.multiple:
            raise ValueError(f"SegNet input sides must be multiples of {self.multiple}; got {tuple(x.shape[2:])}")
        x = self._inputs(x)
        if self.cfg.arch == "halfres":
            return self._forward_halfres(x)
        if self._crops(x):
            return self._cascade(x, mirror=False)
        return self._unet(x)

    def _crops(self, x: Tensor) -> bool:
        """Whether ``x`` (B,C,H,W) goes through the cascade: a cropped net on inputs larger than its window (inputs of
        at most the window's area, such as training patches, go to the U-Net alone; with ``context`` that U-Net then
        runs without the frame's context, which only ``forward(x, frames=...)`` supplies)."""
        return bool(self.cfg.crop) and x.shape[-1] * x.shape[-2] > self.cfg.crop ** 2

    def _locate(self, f: Tensor) -> tuple[Tensor, Tensor | None]:
        """The locator's cell logits of features ``f`` and, with ``context``, the bottleneck offsets B,C."""
        if not self.cfg.context:
            return self.locator(f), None
        cells, pooled = self.locator(f, pooled=True)
        return cells, self.context(pooled)

    def _unet(self, x: Tensor, ctx: Tensor | None = None) -> Tensor:
        """The U-Net on input features ``x`` B,C,H,W -> logits B,H,W (``ctx`` B,C: added to the bottleneck)."""
        return self._unet_views(x, ctx, 1)[:, 0]

    def _unet_mirrored(self, x: Tensor, ctx: Tensor | None = None) -> Tensor:
        """``0.5 * (_unet(x, ctx) + _unet(x.flip(-1), ctx).flip(-1))`` (logits B,H,W; eval mode) in one pass: the
        window and its mirror ride side by side in the channels (B,2C,H,W) through grouped convolutions that apply the
        same weights to each half (:func:`_twin`). The window U-Net's 8- and 16-channel layers then run as 16 and 32
        channels, which oneDNN vectorises better: 1.035x for the whole cascade at batch 256 on one thread. For the
        shipped nets the logits are bit for bit those of two passes (float32 and bf16, AMD EPYC Zen 4, also with
        oneDNN limited to AVX2, 2026-11-26); other nets and CPUs may differ in the last float bits."""
        layout = torch.channels_last if x.is_contiguous(memory_format=torch.channels_last) else torch.contiguous_format
        out = self._unet_views(torch.cat([x, x.flip(-1)], 1).contiguous(memory_format=layout), ctx, 2)
        return 0.5 * (out[:, 0] + out[:, 1].flip(-1))

    def _unet_views(self, x: Tensor, ctx: Tensor | None, views: int) -> Tensor:
        """The U-Net on ``views`` inputs held side by side in the channels of ``x`` (B,views*C,H,W) -> logits
        B,views,H,W, each view's what it would get alone. One view runs the layers as they are; two run them through
        :func:`_twin` (eval mode)."""
        run = _twin if views == 2 else (lambda layer, t: layer(t))
        skips = []
        for blk in self.enc:
            x = run(blk, x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = run(self.mid, x)
        if ctx is not None:
            c = ctx[:, :, None, None].to(x.dtype)
            x = x + (c if views == 1 else torch.cat([c] * views, 1))
        for blk, s in zip(self.dec, reversed(skips)):
            x = F.interpolate(x, size=s.shape[-2:], mode="bilinear", align_corners=False)
            # each view's upsampled features, then its skip
            x = run(blk, torch.cat([t for pair in zip(x.chunk(views, 1), s.chunk(views, 1)) for t in pair], 1))
        return run(self.head, x)

    def mirror_averaged(self, x: Tensor) -> Tensor:
        """Test-time augmentation: logits B,H,W averaged over ``x`` (B,3,H,W in [0, 1]) and its left-right mirror
        (whose logits are flipped back). It costs about 2x :meth:`forward`: a cropped net in eval mode runs the two
        windows side by side in one grouped pass (:meth:`_unet_mirrored`), otherwise two passes (one pass over the
        concatenated batch measured 1.5x slower than two on CPU). The scenes are left-right symmetric in
        distribution, so the mirror is a second, equally valid view. On the default net, averaging the two raised
        held-out IoU by about 0.02 (docs/vision.md)."""
        if self._crops(x):
            return self._cascade(self._inputs(x), mirror=True)
        mirrored = x.flip(-1)
        if x.is_contiguous(memory_format=torch.channels_last):
            mirrored = mirrored.contiguous(memory_format=torch.channels_last)
        return 0.5 * (self(x) + self(mirrored).flip(-1))

    def locate(self, x: Tensor) -> Tensor:
        """Cropped cascade: the locator's cell logits B,H/4,W/4 for frames ``x`` B,3,H,W in [0, 1]."""
        return self.locator(self._inputs(x))

    def _cascade(self, f: Tensor, mirror: bool) -> Tensor:
        """Cropped cascade on input features ``f`` B,C,H,W: locate, cut each frame's window (gathered, no per-frame
        loop), run the U-Net there (with ``mirror``, averaged with the mirrored window's flipped logits) and place
        its logits in frames of :data:`OUTSIDE_LOGIT`. Logits B,H,W."""
        H, W = f.shape[-2:]
        side = self.cfg.crop
        if H % (2 * LOCATOR_STRIDE) or W % (2 * LOCATOR_STRIDE) or H < side or W < side:
            raise ValueError(f"a cropped SegNet needs frames at least {side} px with sides multiples of "
                             f"{2 * LOCATOR_STRIDE}; got {H}x{W}")
        cells, ctx = self._locate(f)
        index = window_indices(cells, side, (H, W), self.cfg.recentre)
        win = gather_windows(f, index, side)
        if not mirror:
            out = self._unet(win, ctx)
        elif self.training:  # batch statistics: each view normalised on its own, as in two calls
            out = 0.5 * (self._unet(win, ctx) + self._unet(win.flip(-1), ctx).flip(-1))
        else:
            out = self._unet_mirrored(win, ctx)
        full = torch.full_like(f[:, 0], OUTSIDE_LOGIT, dtype=out.dtype).flatten(1)
        return full.scatter(1, index, out.flatten(1)).unflatten(1, (H, W))

    def _forward_halfres(self, x: Tensor) -> Tensor:
        full = self.full(x) if self.cfg.full_channels else None
        x = self.stem(x if full is None else full)
        skips = [x]
        for blk in self.enc:
            x = blk(F.max_pool2d(x, 2))
            skips.append(x)
        for proj, blk, s in zip(self.proj, self.dec, reversed(skips[:-1])):
            x = blk(F.interpolate(proj(x), size=s.shape[-2:], mode="bilinear", align_corners=False) + s)
        if full is None:
            return F.pixel_shuffle(self.head(x), 2)[:, 0]
        up = F.interpolate(self.proj_full(x), size=full.shape[-2:], mode="bilinear", align_corners=False)
        return self.head(self.dec_full(up + full))[:, 0]


@torch.no_grad()
def locator_coverage(model: SegNet, rgb: Tensor, mask: Tensor, chunk: int = 256) -> float:
    """Cropped nets: the share of all target pixels of ``mask`` n,H,W bool that fall inside the windows the
    locator chooses for ``rgb`` n,3,H,W uint8 (1.0 = the locator never cuts off a target pixel; eval mode, no
    autocast)."""
    was = model.training
    model.eval()
    dev = next(model.parameters()).device
    inside = total = 0
    for i in range(0, rgb.shape[0], chunk):
        m = mask[i:i + chunk].to(dev)
        cells = model.locate(rgb[i:i + chunk].to(dev).float() / 255.0)
        index = window_indices(cells, model.cfg.crop, tuple(m.shape[-2:]), model.cfg.recentre)
        inside += int(m.flatten(1).gather(1, index).sum())
        total += int(m.sum())
    model.train(was)
    return inside / total if total else float("nan")


def fold_batchnorm(model: nn.Module) -> nn.Module:
    """An inference copy of ``model`` in eval mode in which every ``Conv2d`` directly followed by a ``BatchNorm2d``
    inside an ``nn.Sequential`` becomes one ``Conv2d`` with the BatchNorm's running statistics and affine map folded
    into its weights and bias (the BatchNorm becomes ``Identity``). Same outputs up to float rounding, one pass less
    over every feature map. ``model`` itself is not changed; later changes to it are not seen by the copy."""
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    folded = copy.deepcopy(model).eval()
    for seq in folded.modules():
        if not isinstance(seq, nn.Sequential):
            continue
        for i in range(len(seq) - 1):
            if isinstance(seq[i], nn.Conv2d) and isinstance(seq[i + 1], nn.BatchNorm2d):
                seq[i] = fuse_conv_bn_eval(seq[i], seq[i + 1])
                seq[i + 1] = nn.Identity()
    return folded


FEATURE_CHUNK = 32
"""Frames per slice when :func:`input_features` writes channels-last: a slice's planes (32 x 64 x 64 float32, 0.5 MB
each) stay in the core's cache between the element-wise passes."""


def input_features(x: Tensor, mean: float, std: float, channels_last: bool, dtype: torch.dtype | None = None) -> Tensor:
    """The chroma nets' first-layer input for ``x`` B,3,H,W in [0, 1] (either memory layout): B,7,H,W, the
    normalised RGB ``(x - mean) / std``, then the brightness-free colour: chromaticity (each channel over the sum,
    centred on grey) and the channel spread (max - min, a saturation that ignores hue), both scaled to about unit
    range. With ``channels_last`` the result has channels-last memory, else the plain layout; its dtype is ``dtype``
    (default ``x``'s), rounded from the float32 values.

    Every feature is computed in float32 on whole colour planes and only then turned to the output layout and dtype:
    on CPU, element-wise work across the channels of a channels-last tensor runs on stride-3 rows, and stacking seven
    planes along a new last axis cost half of this function (profiled at batch 256, 2026-11-25 and 2026-11-26). The
    channels-last result is built :data:`FEATURE_CHUNK` frames at a time in a reused float32 slice, so the passes
    stay in cache (1.037x for the whole cascade at batch 256, one thread, 2026-11-26); under ONNX tracing, which
    drops writes into slices, for an empty batch and when ``x`` needs gradients (the slices are written with
    ``out=``), the same values come from whole planes. The values are bit for bit those of the per-pixel form
    either way."""
    out_dtype = dtype or x.dtype
    needs_grad = x.requires_grad and torch.is_grad_enabled()
    if channels_last and x.shape[0] and not torch.jit.is_tracing() and not needs_grad:
        return _features_channels_last(x, mean, std, out_dtype)
    r, g, b = x.float().contiguous().unbind(1)
    total = r + g + b + 0.06
    planes = [(c - mean) / std for c in (r, g, b)]
    planes += [((c + 0.02) / total - 1.0 / 3.0) * 4.0 for c in (r, g, b)]
    spread = torch.maximum(torch.maximum(r, g), b) - torch.minimum(torch.minimum(r, g), b)
    planes.append((spread - 0.2) * 3.0)
    out = torch.stack(planes, 1)
    if channels_last:  # the transposing pass in float32, then the rounding: 1.4x faster than one converting transpose
        out = out.contiguous(memory_format=torch.channels_last)
    return out.to(out_dtype)


def _features_channels_last(x: Tensor, mean: float, std: float, dtype: torch.dtype) -> Tensor:
    """:func:`input_features` with channels-last output, :data:`FEATURE_CHUNK` frames at a time: each slice's seven
    planes are computed in place in one float32 scratch, by the same operations in the same order, then copied into
    the output (one converting transpose per slice)."""
    B, _, H, W = x.shape
    out = torch.empty((B, 7, H, W), dtype=dtype, device=x.device, memory_format=torch.channels_last)
    n0 = min(FEATURE_CHUNK, B)
    f_all = torch.empty((n0, 7, H, W), dtype=torch.float32, device=x.device)
    t_all = torch.empty((n0, H, W), dtype=torch.float32, device=x.device)
    for i in range(0, B, n0):
        n = min(n0, B - i)
        f, t = f_all[:n], t_all[:n]
        f[:, :3].copy_(x[i:i + n])
        r, g, b = f[:, 0], f[:, 1], f[:, 2]
        torch.add(r, g, out=t).add_(b).add_(0.06)
        for k, c in enumerate((r, g, b)):
            torch.add(c, 0.02, out=f[:, 3 + k]).div_(t).sub_(1.0 / 3.0).mul_(4.0)
        spread = f[:, 6]
        torch.maximum(r, g, out=t)
        torch.maximum(t, b, out=t)
        torch.minimum(r, g, out=spread)
        torch.minimum(spread, b, out=spread)
        torch.sub(t, spread, out=spread).sub_(0.2).mul_(3.0)
        f[:, :3].sub_(mean).div_(std)
        out[i:i + n].copy_(f)
    return out


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
