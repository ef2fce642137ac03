"""Run by the distributed tests under ``torchrun`` (not collected by pytest):
``python tests/dist_worker.py vision|dagger|both OUT``.

Each rank records a digest of its weights after every optimizer step (``vision``, run in ``OUT/vision``) and
after every DAgger iteration's training (``dagger``, in ``OUT/dagger``), with a digest of each vision step's own
training batch, into ``OUT/digests-rank{R}.json`` = ``{kind: {"weights": [...], "batches": [...]}}``, so a test
can check that the ranks stayed bit-identical while training on different data. The library runs as it does
from the command line; only its step functions are wrapped to take the digests.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from graspsim import distributed
from graspsim.runtime import RuntimeConfig


def run_vision(out: Path) -> dict:
    import graspsim.vision.train as vt
    from graspsim.vision.model import SegNetConfig

    record: dict = {"weights": [], "batches": []}
    inner = vt.train_step

    def spy(model, opt, x, *args, **kw):
        record["batches"].append(hashlib.sha256(x.contiguous().numpy().tobytes()).hexdigest())
        loss = inner(model, opt, x, *args, **kw)
        record["weights"].append(distributed.digest(getattr(model, "module", model)))
        return loss

    vt.train_step = spy
    try:
        vt.train_vision(vt.TrainVisionConfig(
            out=out, steps=4, batch_size=4, val_every=4, ckpt_every=2, n_val=8, n_test=8,
            runtime=RuntimeConfig(threads=1, progress=False, dist_timeout=60),
            model=SegNetConfig(base_channels=4, max_channels=8, depth=2), transfer=None, operating_point="composite"))
    finally:
        vt.train_step = inner
    return record


def run_dagger(out: Path) -> dict:
    import graspsim.dagger.train as dt

    record: dict = {"weights": [], "batches": []}
    inner = dt.train_steps

    def spy(model, *args, **kw):
        losses = inner(model, *args, **kw)
        record["weights"].append(distributed.digest(getattr(model, "module", model)))
        return losses

    dt.train_steps = spy
    try:
        dt.run_dagger(dt.DaggerConfig(out=out, iterations=2, episodes_per_iter=4, eval_episodes=2, num_envs=2,
                                      train_steps=3, batch_size=8,
                                      runtime=RuntimeConfig(threads=1, progress=False, dist_timeout=60)))
    finally:
        dt.train_steps = inner
    return record


def main(kind: str, out: Path) -> None:
    kinds = {"vision": run_vision, "dagger": run_dagger}
    chosen = list(kinds) if kind == "both" else [kind]
    if any(k not in kinds for k in chosen):
        raise SystemExit(f"unknown kind {kind!r}")
    result = {k: kinds[k](out / k) for k in chosen}
    (out / f"digests-rank{distributed.rank()}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
