"""Training losses and schedule of the segmentation net: :func:`seg_loss` (pixel BCE + soft Tversky + frame BCE)
and :func:`lr_at` (warm-up then cosine decay)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .train_config import TrainVisionConfig


def lr_at(step: int, cfg: TrainVisionConfig) -> float:
    """Learning rate at ``step`` (0-based): linear warm-up, cosine decay to 5% of the peak."""
    warm = max(1, int(0.03 * cfg.steps))
    if step < warm:
        return cfg.lr * (step + 1) / warm
    p = min(1.0, (step - warm) / max(1, cfg.steps - warm))
    return cfg.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * p)))


def seg_loss(logits: Tensor, target: Tensor, dice_weight: float, pos_weight: float = 1.0,
             tversky_beta: float = 0.5, frame_weight: float = 0.0) -> Tensor:
    """Pixel BCE (target pixels weighted by ``pos_weight``) + ``dice_weight`` x soft Tversky loss pooled over
    the batch, ``1 - TP / (TP + (1 - beta) FP + beta FN)`` (``beta`` = 0.5 is soft Dice; larger favours
    recall) + ``frame_weight`` x the BCE of each frame's highest logit against "the target is visible in this
    frame". ``logits`` B,H,W; ``target`` B,H,W bool."""
    logits = logits.float()
    y = target.float()
    pw = None if pos_weight == 1.0 else torch.tensor(pos_weight, device=logits.device)
    bce = F.binary_cross_entropy_with_logits(logits, y, pos_weight=pw)
    if frame_weight:
        # frame level: the highest logit of a frame (the statistic the frame gate thresholds) says "target here"
        bce = bce + frame_weight * F.binary_cross_entropy_with_logits(logits.flatten(1).amax(1), y.flatten(1).amax(1))
    if dice_weight == 0:
        return bce
    p = torch.sigmoid(logits)
    tp = (p * y).sum()
    fp = p.sum() - tp
    fn = y.sum() - tp
    tversky = 1.0 - (tp + 0.5) / (tp + (1 - tversky_beta) * fp + tversky_beta * fn + 0.5)
    return bce + dice_weight * tversky
