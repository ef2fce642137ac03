"""The closed-loop control network: target mask + gripper state -> end-effector velocity and grip.

Inputs (policy-visible only, never privileged state):

* ``mask``: ``B,1,H,W`` or ``B,H,W`` float/bool in {0, 1}, the binary target mask of the wrist image
  (ground truth or predicted by the vision module). The target is tiny (about 4-15 pixels across at
  64x64), so the network sees it three ways: (1) a small CNN over the mask with two CoordConv channels
  (pixel x, y in [-1, 1]) after a 2x2 max-pool (max-pooling keeps every one-pixel blob, unlike strided
  sampling or average pooling, so nothing of the target is lost at 32x32); (2) a spatial soft-argmax of the CNN features (where each feature
  fires, as image coordinates); (3) exact mask statistics: visible flag, centroid (x, y in [-1, 1]),
  square root of the area fraction (the blob grows as the camera descends, so it carries the height)
  and the bounding-box extent. All three are functions of the mask alone.
* ``gripper``: ``B,3`` float32 = (finger gap / open gap, last executed close command 0/1, table contact
  0/1), the simulator's ``obs["gripper"]``: it tells the net whether it is closing or holding, and when the
  fingertips touch the table (the grasp height, which the mask barely shows).

Output ``B,4`` float32 *raw* network values: ``out[:, :3]`` is the pre-tanh velocity (the velocity in
m/s is ``tanh(out[:, :3]) * max_speed``) and ``out[:, 3]`` is the grip logit (> 0 closes).
:func:`to_action` converts to simulator units; :mod:`graspsim.dagger.policy` wraps it for inference.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graspsim.env import GRIPPER_DIM
from graspsim.torch_util import count_parameters  # re-exported (defined once in graspsim.torch_util)
from graspsim.validate import finite_positive, positive_int

NUM_STATS = 7  # visible, cx, cy, sqrt(area), width, height, 1/sqrt(area) proxy (see mask_stats)


@dataclass(frozen=True)
class ControlNetConfig:
    """Size of the control network."""

    image_size: int = 64
    """Mask height and width (pixels); must match the simulator's image_size."""
    channels: tuple[int, int, int] = (16, 32, 32)
    """Channels of the three stride-2 convolution stages."""
    hidden: int = 128
    """Width of the two hidden fully connected layers."""
    max_speed: float = 0.10
    """Velocity scale (m/s): the net outputs tanh(.) * max_speed per axis (SimConfig.max_speed)."""

    def __post_init__(self) -> None:
        if not isinstance(self.image_size, int) or not 32 <= self.image_size <= 512 or self.image_size % 16:
            raise ValueError(f"ControlNetConfig.image_size must be a multiple of 16 in 32..512; got {self.image_size!r}")
        ch = tuple(self.channels)
        if len(ch) != 3 or not all(isinstance(c, int) and c > 0 for c in ch):
            raise ValueError(f"ControlNetConfig.channels must be three positive ints; got {self.channels!r}")
        object.__setattr__(self, "channels", ch)
        positive_int("ControlNetConfig", "hidden", self.hidden)
        finite_positive("ControlNetConfig", "max_speed", self.max_speed, unit="m/s")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def mask_stats(mask: Tensor) -> Tensor:
    """Exact statistics of binary masks ``B,H,W`` (float 0/1) -> ``B,NUM_STATS`` float32.

    (visible 0/1, centroid x, centroid y in [-1, 1], 4*sqrt(area / (H*W)), 8*bbox width / W, 8*bbox height / H,
    visible / (1 + 8*sqrt(area / (H*W)))). Empty masks give visible = 0 and zeros elsewhere.
    """
    B, H, W = mask.shape
    m = mask.float()
    area = m.sum(dim=(1, 2))  # B
    visible = (area > 0).float()
    ys = torch.linspace(-1.0, 1.0, H, device=m.device)
    xs = torch.linspace(-1.0, 1.0, W, device=m.device)
    col = m.sum(1)  # B,W
    row = m.sum(2)  # B,H
    denom = area.clamp_min(1.0)
    cx = (col * xs).sum(1) / denom
    cy = (row * ys).sum(1) / denom
    root = (area / (H * W)).sqrt()
    # bounding box extent from occupied rows/columns
    colx = torch.where(col > 0, xs.expand(B, W), torch.full_like(col, math.nan))
    rowy = torch.where(row > 0, ys.expand(B, H), torch.full_like(row, math.nan))
    bw = torch.nan_to_num(colx.nan_to_num(-2.0).amax(1) - colx.nan_to_num(2.0).amin(1), 0.0).clamp_min(0) / 2
    bh = torch.nan_to_num(rowy.nan_to_num(-2.0).amax(1) - rowy.nan_to_num(2.0).amin(1), 0.0).clamp_min(0) / 2
    bw, bh = bw * visible, bh * visible
    inv = visible / (1.0 + 8.0 * root)
    # scaled so that every feature spans roughly [-1, 1] over the blob sizes seen in a grasp (4-20 px)
    return torch.stack([visible, cx, cy, 4.0 * root, 8.0 * bw, 8.0 * bh, inv], dim=1)


class ControlNet(nn.Module):
    """CoordConv CNN + soft-argmax + mask statistics + gripper state -> ``B,4`` raw outputs (see module doc)."""

    def __init__(self, cfg: ControlNetConfig | None = None):
        super().__init__()
        self.cfg = cfg = cfg or ControlNetConfig()
        c1, c2, c3 = cfg.channels
        self.conv = nn.Sequential(
            nn.Conv2d(3, c1, 3, stride=2, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(c1, c2, 3, stride=2, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(c2, c3, 3, stride=2, padding=1), nn.ReLU(inplace=True),
        )
        s = cfg.image_size // 16  # 2x2 max-pool, then three stride-2 stages
        self.keypoints = nn.Conv2d(c3, 8, 1)  # 8 soft-argmax keypoints
        self.flat = nn.Linear(c3 * s * s, cfg.hidden)
        n_in = cfg.hidden + 8 * 2 + NUM_STATS + GRIPPER_DIM
        self.head = nn.Sequential(
            nn.Linear(n_in, cfg.hidden), nn.ReLU(inplace=True),
            nn.Linear(cfg.hidden, cfg.hidden), nn.ReLU(inplace=True),
            nn.Linear(cfg.hidden, 4),
        )
        H = cfg.image_size // 2
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, H), torch.linspace(-1, 1, H), indexing="ij")
        self.register_buffer("coords", torch.stack([xs, ys])[None], persistent=False)  # 1,2,H,W
        gs, gx = torch.meshgrid(torch.linspace(-1, 1, s), torch.linspace(-1, 1, s), indexing="ij")
        self.register_buffer("grid", torch.stack([gx.flatten(), gs.flatten()], -1), persistent=False)  # s*s,2

    def forward(self, mask: Tensor, gripper: Tensor) -> Tensor:
        """``mask`` B,1,H,W or B,H,W (0/1), ``gripper`` B,GRIPPER_DIM -> raw outputs B,4 (float32)."""
        if mask.dim() == 4:
            if mask.shape[1] != 1:
                raise ValueError(f"ControlNet: mask must be B,H,W or B,1,H,W; got {tuple(mask.shape)}")
            mask = mask[:, 0]
        H = self.cfg.image_size
        if mask.dim() != 3 or mask.shape[1:] != (H, H):
            raise ValueError(f"ControlNet: mask must be B,{H},{H} (image_size={H}); got {tuple(mask.shape)}")
        if gripper.shape != (mask.shape[0], GRIPPER_DIM):
            raise ValueError(f"ControlNet: gripper must be ({mask.shape[0]}, {GRIPPER_DIM}); got {tuple(gripper.shape)}")
        m = mask.float()
        B = m.shape[0]
        pooled = F.max_pool2d(m[:, None], 2)  # B,1,H/2,W/2: keeps every target pixel
        x = torch.cat([pooled, self.coords.expand(B, -1, -1, -1)], 1)
        if x.device.type == "cpu":
            x = x.contiguous(memory_format=torch.channels_last)
        f = self.conv(x)  # B,c3,s,s
        kp = self.keypoints(f).flatten(2).float().softmax(-1)  # B,8,s*s
        pts = (kp @ self.grid).flatten(1)  # B,16
        z = torch.cat([F.relu(self.flat(f.flatten(1))).float(), pts, mask_stats(m), gripper.float()], 1)
        return self.head(z).float()


def to_action(raw: Tensor, max_speed: float) -> Tensor:
    """Raw net outputs ``B,4`` -> simulator action ``B,4`` float32: (vx, vy, vz) m/s and grip (> 0 closes)."""
    vel = torch.tanh(raw[:, :3]) * max_speed
    return torch.cat([vel, raw[:, 3:4]], 1).float()


__all__ = ["ControlNet", "ControlNetConfig", "NUM_STATS", "count_parameters", "mask_stats", "to_action"]
