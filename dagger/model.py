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
  fingertips touch the table (the grasp height, which the mask barely shows). With the wrist
  (``ControlNetConfig.wrist``, for cubes and cylinders) it is ``B,5``: the sine and cosine of the wrist angle follow;
  with ``ControlNetConfig.fingertip_pixels`` ``B,9``: then the 4 fingertip senses, where the fingertip centre and a
  point 2 cm above it appear in the image (:func:`graspsim.env.fingertip_senses`, constants of the camera mount).

Output ``B,4`` float32 *raw* network values: ``out[:, :3]`` is the pre-tanh velocity (the velocity in
m/s is ``tanh(out[:, :3]) * max_speed``) and ``out[:, 3]`` is the grip logit (> 0 closes).
:func:`to_action` converts to simulator units; :mod:`graspsim.dagger.policy` wraps it for inference.

With the wrist the output is ``B,5``: the velocity (pre-tanh) in the *gripper's* frame, the pre-tanh wrist yaw
rate (``tanh(out[:, 3]) * max_yaw_rate`` rad/s) and the grip logit. The wrist camera turns with the gripper, so a
target seen at the same pixel asks for the same gripper-frame motion at any wrist angle; :func:`to_action` turns
that motion into the world frame with the wrist angle from the senses (a fixed rotation, not something the net has
to learn). A cube's faces repeat every quarter turn, so its orientation in the image is read by two more exact
statistics (:func:`quarter_turn_stats`): the mask's fourth angular harmonic about its centroid, which is near zero
for a round blob.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graspsim.config import gripper_width
from graspsim.physics import rotate_xy
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
    wrist: bool = False
    """Whether the net turns the wrist (SimConfig.wrist, for target kinds beyond spheres): gripper senses and outputs
    become 5 wide (see the module doc). False is the sphere-only net of every checkpoint from before kinds existed."""
    max_yaw_rate: float = 1.5
    """Wrist yaw rate scale (rad/s) with the wrist: tanh(.) * max_yaw_rate (SimConfig.max_yaw_rate)."""
    fingertip_pixels: bool = False
    """With the wrist: the net also reads the 4 fingertip senses (where the fingertips appear in the image), 9 senses
    in all. ``graspsim dagger`` sets it from ``--sim.fingertip-pixels``. False is every wrist net from before that
    input existed (5 senses)."""

    def __post_init__(self) -> None:
        if not isinstance(self.image_size, int) or not 32 <= self.image_size <= 512 or self.image_size % 16:
            raise ValueError(f"ControlNetConfig.image_size must be a multiple of 16 in 32..512; got {self.image_size!r}")
        ch = tuple(self.channels)
        if len(ch) != 3 or not all(isinstance(c, int) and c > 0 for c in ch):
            raise ValueError(f"ControlNetConfig.channels must be three positive ints; got {self.channels!r}")
        object.__setattr__(self, "channels", ch)
        positive_int("ControlNetConfig", "hidden", self.hidden)
        finite_positive("ControlNetConfig", "max_speed", self.max_speed, unit="m/s")
        if not isinstance(self.wrist, bool):
            raise ValueError(f"ControlNetConfig.wrist must be true or false; got {self.wrist!r}")
        if not isinstance(self.fingertip_pixels, bool):
            raise ValueError(f"ControlNetConfig.fingertip_pixels must be true or false; got {self.fingertip_pixels!r}")
        if self.fingertip_pixels and not self.wrist:
            raise ValueError("ControlNetConfig.fingertip_pixels needs wrist = true (sphere-only nets read 3 senses)")
        finite_positive("ControlNetConfig", "max_yaw_rate", self.max_yaw_rate, unit="rad/s")

    @property
    def gripper_dim(self) -> int:
        """Width of the gripper senses the net reads: 3; 5 with the wrist; 9 with the fingertip senses too
        (``SimConfig.gripper_dim``)."""
        return gripper_width(self.wrist, self.fingertip_pixels)

    @property
    def action_dim(self) -> int:
        """Width of its outputs and actions: 5 with the wrist ``(vx, vy, vz, wz, grip)``, else 4."""
        return 5 if self.wrist else 4

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


def quarter_turn_stats(mask: Tensor) -> Tensor:
    """Orientation modulo a quarter turn of binary masks ``B,H,W`` -> ``B,2`` float32.

    The fourth angular harmonic of the blob about its centroid, ``sum m (dx + i dy)^4 / sum m |d|^4`` (pixel
    offsets), as (real, imaginary). Its angle is four times the blob's orientation (a square seen from above
    turned by ``a`` gives ``4a`` plus a constant), its length how square the blob is (about 0.4 for a square,
    near 0 for a disc). Empty masks give zeros."""
    B, H, W = mask.shape
    m = mask.float()
    area = m.sum(dim=(1, 2)).clamp_min(1.0)
    ys = torch.arange(H, device=m.device, dtype=torch.float32)
    xs = torch.arange(W, device=m.device, dtype=torch.float32)
    cx = (m.sum(1) * xs).sum(1) / area
    cy = (m.sum(2) * ys).sum(1) / area
    dx = xs[None, None, :] - cx[:, None, None]  # B,1,W
    dy = ys[None, :, None] - cy[:, None, None]  # B,H,1
    dx2, dy2 = dx * dx, dy * dy
    re = (m * (dx2 * dx2 - 6 * dx2 * dy2 + dy2 * dy2)).sum(dim=(1, 2))  # Re (dx + i dy)^4
    im = (m * (4 * dx * dy * (dx2 - dy2))).sum(dim=(1, 2))  # Im (dx + i dy)^4
    norm = (m * (dx2 + dy2) ** 2).sum(dim=(1, 2)).clamp_min(1e-6)
    return torch.stack([re / norm, im / norm], 1)


class ControlNet(nn.Module):
    """CoordConv CNN + soft-argmax + mask statistics + gripper state -> ``B,4`` raw outputs, ``B,5`` with the wrist
    (see module doc)."""

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
        n_in = cfg.hidden + 8 * 2 + NUM_STATS + 2 * cfg.wrist + cfg.gripper_dim
        self.head = nn.Sequential(
            nn.Linear(n_in, cfg.hidden), nn.ReLU(inplace=True),
            nn.Linear(cfg.hidden, cfg.hidden), nn.ReLU(inplace=True),
            nn.Linear(cfg.hidden, cfg.action_dim),
        )
        H = cfg.image_size // 2
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, H), torch.linspace(-1, 1, H), indexing="ij")
        self.register_buffer("coords", torch.stack([xs, ys])[None], persistent=False)  # 1,2,H,W
        gs, gx = torch.meshgrid(torch.linspace(-1, 1, s), torch.linspace(-1, 1, s), indexing="ij")
        self.register_buffer("grid", torch.stack([gx.flatten(), gs.flatten()], -1), persistent=False)  # s*s,2

    def forward(self, mask: Tensor, gripper: Tensor) -> Tensor:
        """``mask`` B,1,H,W or B,H,W (0/1), ``gripper`` B,``cfg.gripper_dim`` -> raw outputs B,``cfg.action_dim``
        (float32)."""
        if mask.dim() == 4:
            if mask.shape[1] != 1:
                raise ValueError(f"ControlNet: mask must be B,H,W or B,1,H,W; got {tuple(mask.shape)}")
            mask = mask[:, 0]
        H = self.cfg.image_size
        if mask.dim() != 3 or mask.shape[1:] != (H, H):
            raise ValueError(f"ControlNet: mask must be B,{H},{H} (image_size={H}); got {tuple(mask.shape)}")
        if gripper.shape != (mask.shape[0], self.cfg.gripper_dim):
            raise ValueError(f"ControlNet: gripper must be ({mask.shape[0]}, {self.cfg.gripper_dim}); got "
                             f"{tuple(gripper.shape)}" + (" (this net turns the wrist: 3 senses + sin, cos of the wrist "
                                                         "angle" + (" + 4 fingertip senses)" if self.cfg.fingertip_pixels
                                                                    else ")") if self.cfg.wrist else " (a sphere-only net)"))
        m = mask.float()
        B = m.shape[0]
        pooled = F.max_pool2d(m[:, None], 2)  # B,1,H/2,W/2: keeps every target pixel
        x = torch.cat([pooled, self.coords.expand(B, -1, -1, -1)], 1)
        if x.device.type == "cpu":
            x = x.contiguous(memory_format=torch.channels_last)
        f = self.conv(x)  # B,c3,s,s
        kp = self.keypoints(f).flatten(2).float().softmax(-1)  # B,8,s*s
        pts = (kp @ self.grid).flatten(1)  # B,16
        stats = [mask_stats(m), quarter_turn_stats(m)] if self.cfg.wrist else [mask_stats(m)]
        z = torch.cat([F.relu(self.flat(f.flatten(1))).float(), pts, *stats, gripper.float()], 1)
        return self.head(z).float()


def to_action(raw: Tensor, cfg: ControlNetConfig, gripper: Tensor | None = None) -> Tensor:
    """Raw net outputs ``B,cfg.action_dim`` -> simulator action of the same width, float32: (vx, vy, vz) m/s, with
    the wrist wz rad/s, and grip (> 0 closes). With the wrist, ``gripper`` (the senses ``B,5`` the net read) gives
    the wrist angle that turns the net's gripper-frame velocity into the world frame."""
    vel = torch.tanh(raw[:, :3].float()) * cfg.max_speed
    if not cfg.wrist:
        return torch.cat([vel, raw[:, 3:4].float()], 1)
    if gripper is None:
        raise ValueError("to_action: a net that turns the wrist needs the gripper senses (the wrist angle)")
    world = rotate_xy(vel, gripper[:, 4].float(), gripper[:, 3].float())
    wz = torch.tanh(raw[:, 3:4].float()) * cfg.max_yaw_rate
    return torch.cat([world, wz, raw[:, 4:5].float()], 1)


def to_gripper_frame(action: Tensor, gripper: Tensor) -> Tensor:
    """World-frame actions ``B,5`` -> the same with (vx, vy) in the gripper's frame (the inverse turn of
    :func:`to_action`; ``gripper`` B,5 holds the sine and cosine of the wrist angle at columns 3 and 4)."""
    return rotate_xy(action, gripper[:, 4], -gripper[:, 3])


__all__ = ["ControlNet", "ControlNetConfig", "NUM_STATS", "count_parameters", "mask_stats", "quarter_turn_stats",
           "to_action", "to_gripper_frame"]
