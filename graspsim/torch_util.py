"""Small generic torch helpers (nothing of ours: usable by every room)."""

from __future__ import annotations

from torch import nn


def count_parameters(model: nn.Module) -> int:
    """Number of scalar parameters of ``model`` (every ``Parameter``, trainable or not; buffers excluded)."""
    return sum(p.numel() for p in model.parameters())


__all__ = ["count_parameters"]
