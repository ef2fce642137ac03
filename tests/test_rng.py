"""Counter-based per-episode random numbers (graspsim.rng)."""

from __future__ import annotations

import torch

from graspsim import rng

MASK64 = (1 << 64) - 1


def _mix_ref(x: int) -> int:
    """SplitMix64's finaliser on Python ints (mod 2^64), the reference for the int64 tensor version."""
    x &= MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


def test_int64_hash_matches_the_unsigned_reference():
    xs = [0, 1, 12345, (1 << 62) + 7, -1, -(1 << 63), 0x9E3779B97F4A7C15 - (1 << 64)]
    got = rng._mix(torch.tensor(xs, dtype=torch.long)).tolist()
    assert got == [_signed(_mix_ref(x)) for x in xs]


def test_draws_depend_on_key_counter_and_tag_only():
    keys = torch.tensor([5, 6, 7, 8], dtype=torch.long)
    steps = torch.tensor([0, 3, 3, 9])
    a = rng.uniform(keys, steps, rng.TAG_SLIP, 4)
    b = rng.uniform(keys[[2, 0]], steps[[2, 0]], rng.TAG_SLIP, 4)  # another batch, another order
    assert torch.equal(a[[2, 0]], b)
    assert not torch.equal(a, rng.uniform(keys, steps + 1, rng.TAG_SLIP, 4))
    assert not torch.equal(a, rng.uniform(keys, steps, rng.TAG_ACTION_NOISE, 4))
    assert a.dtype == torch.float32 and float(a.min()) >= 0.0 and float(a.max()) < 1.0


def test_uniform_and_normal_statistics():
    keys = torch.arange(20000, dtype=torch.long)
    u = rng.uniform(keys, 0, 1, 2)
    assert abs(float(u.mean()) - 0.5) < 0.01 and abs(float(u.var()) - 1 / 12) < 0.003
    n = rng.normal(keys, 4, 2, 3)
    assert abs(float(n.mean())) < 0.02 and abs(float(n.std()) - 1.0) < 0.02
    assert float((n.abs() > 3).float().mean()) < 0.005
