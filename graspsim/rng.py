"""Per-episode random numbers: counter-based, so a scene's noise depends on its episode only.

The simulator draws per-step noise (action noise, grasp slip, image noise) for every scene. Drawn from
one generator for the whole batch, a scene's noise would depend on which other scenes share the batch,
so the same episode seed would play out differently at another batch size or on another rank. Here
each draw is a hash of (the scene's 64-bit key, a counter such as the step, a tag naming the purpose,
the element index): the same inputs give the same numbers on any batch, process or device.

The hash is SplitMix64's finaliser on int64 tensors (two's-complement wrap-around, as torch integer
arithmetic does on CPU and CUDA); uniforms take the top 24 bits, normals use Box-Muller.

>>> u = uniform(keys, steps, TAG_SLIP, 1)        # B,1 float32 in [0, 1)
>>> n = normal(keys, steps, TAG_ACTION_NOISE, 3)  # B,3 float32 ~ N(0, 1)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

TAG_ACTION_NOISE = 1
TAG_SLIP = 2
TAG_IMAGE_NOISE = 3
TAG_EXPERT_NOISE = 4
TAG_EXPERT_CHOICE = 5
"""Purposes of draws (distinct tags give independent streams for the same key and counter)."""

_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15 as a signed int64
_M1 = -4658895280553007687  # 0xBF58476D1CE4E5B9
_M2 = -7723592293110705685  # 0x94D049BB133111EB


def _shr(x: Tensor, k: int) -> Tensor:
    """Logical right shift of int64 ``x`` by ``k`` bits (torch's ``>>`` is arithmetic)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def _mix(x: Tensor) -> Tensor:
    x = (x ^ _shr(x, 30)) * _M1
    x = (x ^ _shr(x, 27)) * _M2
    return x ^ _shr(x, 31)


def bits(key: Tensor, counter: Tensor | int, tag: int, n: int) -> Tensor:
    """B,n int64 of well-mixed bits for keys ``key`` (B int64), ``counter`` (B int64 or an int) and ``tag``."""
    key = key.long()
    counter = torch.as_tensor(counter, dtype=torch.long, device=key.device).expand(key.shape)
    base = _mix(key * _GOLDEN + tag)  # B
    base = _mix(base ^ (counter * _GOLDEN))
    idx = torch.arange(1, n + 1, dtype=torch.long, device=key.device)
    return _mix(base[:, None] + idx[None, :] * _GOLDEN)


def uniform(key: Tensor, counter: Tensor | int, tag: int, n: int) -> Tensor:
    """B,n float32 uniform in [0, 1) (24-bit resolution); see :func:`bits`."""
    return _shr(bits(key, counter, tag, n), 40).float() * (1.0 / (1 << 24))


def normal(key: Tensor, counter: Tensor | int, tag: int, n: int) -> Tensor:
    """B,n float32 standard normal (Box-Muller on two uniforms per element); see :func:`bits`."""
    u = uniform(key, counter, tag, 2 * n)
    u1 = u[:, :n].clamp_min(1.0 / (1 << 25))  # avoid log(0)
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos((2.0 * math.pi) * u[:, n:])


def key_from_floats(x: Tensor) -> Tensor:
    """B int64 keys hashed from the bit patterns of ``x`` (B,k float32, e.g. a scene's own random draws).

    Deriving a scene's key from what was already drawn for it costs no further draws from the caller's
    generator, so code that samples scenes from a shared generator (the vision composer) sees the same
    stream as before keys existed."""
    bits32 = x.float().contiguous().view(torch.int32).long() & 0xFFFFFFFF
    h = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
    for j in range(x.shape[1]):
        h = _mix(h * _GOLDEN + bits32[:, j])
    return h


__all__ = ["TAG_ACTION_NOISE", "TAG_EXPERT_CHOICE", "TAG_EXPERT_NOISE", "TAG_IMAGE_NOISE", "TAG_SLIP", "bits",
           "key_from_floats", "normal", "uniform"]
