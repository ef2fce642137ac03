"""Vision inference throughput on this CPU: the checkpoint's own precision beside float32, with and without mirror
averaging, in one run.

    python benchmarks/vision_throughput.py --vision vision/assets/segnet.pt --batch 256 --threads 2

Each row times :meth:`graspsim.vision.infer.Segmenter.predict_mask` on random ``batch,3,S,S`` uint8 frames
(:func:`graspsim.vision.infer.throughput`: one untimed warm-up call, then ``--iters`` timed calls):

- ``auto``: the precision eval-real, calibrate and deploy pick (bf16 autocast where the CPU has native bf16 and the
  checkpoint's probe frames agree with float32), with the checkpoint's mirror averaging;
- ``fp32``: float32 with the checkpoint's mirror averaging;
- ``fp32_no_mirror``: float32, one pass per frame (what mirror averaging costs).

Prints one JSON object with the three rows, the ratios to ``fp32`` and the bf16 disagreement measured on the probe
frames (None when bf16 is not used).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import tyro

from graspsim.validate import non_negative_int, positive_int

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class VisionThroughputConfig:
    """Time vision inference (frames -> masks) at the checkpoint's precision, float32 and float32 without mirroring."""

    vision: Path = REPO / "vision" / "assets" / "segnet.pt"
    """Vision checkpoint (written by graspsim train-vision, or the shipped vision/assets/segnet.pt)."""
    batch: int = 256
    """Frames per predict_mask call."""
    iters: int = 5
    """Timed calls per row (after one untimed warm-up call)."""
    threads: int = 0
    """torch.set_num_threads (0 = leave the default)."""

    def __post_init__(self) -> None:
        for name in ("batch", "iters"):
            positive_int("VisionThroughputConfig", name, getattr(self, name))
        non_negative_int("VisionThroughputConfig", "threads", self.threads)


def main(cfg: VisionThroughputConfig) -> dict:
    from graspsim.vision.infer import Segmenter, throughput

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    auto = Segmenter.from_checkpoint(cfg.vision)
    seg32 = Segmenter.from_checkpoint(cfg.vision, precision="fp32")
    rows = {"auto": throughput(auto, cfg.batch, cfg.iters), "fp32": throughput(seg32, cfg.batch, cfg.iters)}
    seg32.mirror_tta = False  # one pass per frame, for comparison with the checkpoint's mirror averaging
    rows["fp32_no_mirror"] = throughput(seg32, cfg.batch, cfg.iters)
    base = rows["fp32"]["img_per_s"]
    return {**rows, "ratio_to_fp32": {k: round(r["img_per_s"] / base, 3) for k, r in rows.items()},
            "bf16_disagreement": auto.bf16_disagreement}


if __name__ == "__main__":
    print(json.dumps(main(tyro.cli(VisionThroughputConfig)), indent=2))
