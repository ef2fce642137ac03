"""Run by the distributed tests under ``torchrun`` (not collected by pytest): ``python tests/dist_worker.py KIND OUT``.

Each rank records a digest of its weights after every optimizer step (``vision``) or every DAgger iteration's
training (``dagger``) into ``OUT/digests-rank{R}.json`` (``weights``), with a digest of the step's own training
batch (``vision``: ``batches``), so a test can check that the ranks stayed bit-identical while seeing other data.
The library runs as it does from the command line; only its step function is wrapped to take the digests.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from graspsim import distributed


def main(kind: str, out: Path) -> None:
    digests: list[str] = []
    batches: list[str] = []
    if kind == "vision":
        import vision.train as vt
        from vision.model import SegNetConfig

        inner = vt.train_step

        def spy(model, opt, x, *args, **kw):
            batches.append(hashlib.sha256(x.contiguous().numpy().tobytes()).hexdigest())
            loss = inner(model, opt, x, *args, **kw)
            digests.append(distributed.digest(getattr(model, "module", model)))
            return loss

        vt.train_step = spy
        vt.train_vision(vt.TrainVisionConfig(
            out=out / "run", steps=4, batch_size=4, val_every=4, ckpt_every=2, n_val=8, n_test=8, threads=1,
            progress=False, model=SegNetConfig(base_channels=4, max_channels=8, depth=2), transfer=None,
            operating_point="composite", dist_timeout=60))
    elif kind == "dagger":
        import dagger.train as dt

        inner = dt.train_steps

        def spy(model, *args, **kw):
            losses = inner(model, *args, **kw)
            digests.append(distributed.digest(getattr(model, "module", model)))
            return losses

        dt.train_steps = spy
        dt.run_dagger(dt.DaggerConfig(out=out / "run", iterations=2, episodes_per_iter=4, eval_episodes=2,
                                      num_envs=2, train_steps=3, batch_size=8, threads=1, progress=False,
                                      dist_timeout=60))
    else:
        raise SystemExit(f"unknown kind {kind!r}")
    (out / f"digests-rank{distributed.rank()}.json").write_text(json.dumps({"weights": digests, "batches": batches}))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
