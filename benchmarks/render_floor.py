"""Floor of per-pixel work for an eager-torch wrist render on this machine (context for the 20x target).

    python benchmarks/render_floor.py --threads 2

Times the least a frame needs: the textured table plane seen through per-scene ray directions that are
cached (the camera never rotates within an episode), i.e. one division, a few multiply-adds and one
texture gather per pixel, no objects, lighting, shadows or noise. Whatever the full renderer does on top
can only be slower, so ``floor fps / pybullet fps`` bounds the speedup an eager-torch CPU renderer of
this design can reach here. Prints frames/s per batch size next to the full ``graspsim.render``.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Tuple

import torch
import tyro

from graspsim import GraspEnv, SimConfig
from graspsim.perf import tune_allocator
from graspsim.render import pixel_rays, render
from graspsim.textures import texture_bank


@dataclass(frozen=True)
class RenderFloorConfig:
    """Time the per-pixel floor of a table-only render next to the full renderer."""

    threads: int = 2
    """torch.set_num_threads for the run."""
    seconds: float = 1.0
    """Timing window per measurement (at least two calls are timed)."""
    batch_sizes: Tuple[int, ...] = (64, 256, 1024)
    """Scenes per render call, one measurement each."""

    def __post_init__(self) -> None:
        if not isinstance(self.threads, int) or self.threads < 1:
            raise ValueError(f"RenderFloorConfig.threads must be a positive int; got {self.threads!r}")
        if not (isinstance(self.seconds, (int, float)) and math.isfinite(self.seconds) and self.seconds > 0):
            raise ValueError(f"RenderFloorConfig.seconds must be a positive number; got {self.seconds!r}")
        if not self.batch_sizes or any(not isinstance(b, int) or b < 1 for b in self.batch_sizes):
            raise ValueError(f"RenderFloorConfig.batch_sizes must be positive ints; got {self.batch_sizes!r}")


def fps(fn, batch: int, seconds: float) -> float:
    fn()
    t0, k = time.perf_counter(), 0
    while k < 2 or time.perf_counter() - t0 < seconds:
        fn()
        k += 1
    return batch * k / (time.perf_counter() - t0)


def main(args: RenderFloorConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    tune_allocator()
    torch.set_num_threads(args.threads)
    cfg = SimConfig()
    bank = texture_bank("cpu")
    S, flat_bank = bank.shape[1], bank.view(-1, 3)
    for B in args.batch_sizes:
        s = GraspEnv(cfg, num_envs=B, seed=0).state
        _, d = pixel_rays(s, cfg.image_size)  # cached once per episode in this scheme
        dz, dxy = d[..., 2].contiguous(), d[..., :2].contiguous()

        def floor() -> torch.Tensor:
            o = s.tcp_pos + s.cam_offset
            p = o[:, None, :2] + (-o[:, 2:3] / dz)[..., None] * dxy
            ij = (torch.frac(p * s.tex_scale[:, None, None] + s.tex_offset[:, None]) * S).long()
            col = flat_bank[(s.table_tex[:, None] * S + ij[..., 1]) * S + ij[..., 0]] * s.table_tint[:, None]
            return (col * 255).to(torch.uint8)

        print(f"batch {B:5d}: floor {fps(floor, B, args.seconds):7.0f} frames/s | "
              f"graspsim.render {fps(lambda: render(s, cfg), B, args.seconds):7.0f} frames/s")


if __name__ == "__main__":
    main(tyro.cli(RenderFloorConfig, description=__doc__.splitlines()[0]))
