"""train-vision --init CKPT --real DIR: fine-tuning on a user's labelled frames mixed with composites."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from graspsim.runtime import RuntimeConfig
from graspsim.vision.checkpoint import load_checkpoint, save_checkpoint
from graspsim.vision.labelled import RealFrames
from graspsim.vision.model import SegNet, SegNetConfig
from graspsim.vision.train import TrainVisionConfig, fine_tune_config, train_vision

from frame_sets import TINY, write_png as _png

torch.set_num_threads(2)


def _frames(root: Path, n: int = 6, size: int = 64, width: int | None = None, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    for i in range(n):
        img = rng.integers(0, 256, (size, width or size, 3), dtype=np.uint8)
        mask = np.zeros((size, width or size), np.uint8)
        if i % 3:
            cv2.circle(mask, (20 + i, 30), 3, 255, -1)
            img[mask > 0] = (30, 40, 220)
        _png(root / "images" / f"r{i:02d}.png", img)
        _png(root / "masks" / f"r{i:02d}.png", mask)
    return root


def _init(path: Path, seed: int = 0) -> Path:
    torch.manual_seed(seed)
    model = SegNet(TINY)
    save_checkpoint(path, {"model": model.state_dict(), "model_config": dataclasses.asdict(model.cfg), "config": {},
                           "step": 123, "threshold": 0.4, "peak_threshold": 0.9, "image_size": 64})
    return path


def _kw(tmp_path: Path, **over) -> dict:
    kw = dict(out=tmp_path / "run", batch_size=8, val_every=4, ckpt_every=4, n_val=16, n_test=8, transfer=None,
              operating_point="composite", init_steps=4, runtime=RuntimeConfig(threads=2, progress=False))
    kw.update(over)
    return kw


def test_real_frames_sample_mirrors_images_and_masks_together(tmp_path):
    real = RealFrames([_frames(tmp_path / "a", n=3, size=32)], size=64)
    assert real.rgb.shape == (3, 3, 64, 64) and real.mask.shape == (3, 64, 64)
    assert real.record()["n_frames"] == 3 and real.record()["n_target"] == 2 and real.record()["frame_size"] == 32
    rgb, mask = real.sample(64, torch.Generator().manual_seed(0))
    keys = {(bytes(r.numpy()), bytes(m.numpy())) for r, m in zip(rgb, mask)}
    ref = {(bytes(r.numpy()), bytes(m.numpy())) for r, m in zip(real.rgb, real.mask)}
    ref |= {(bytes(r.flip(-1).numpy()), bytes(m.flip(-1).numpy())) for r, m in zip(real.rgb, real.mask)}
    assert keys <= ref and len(keys) > 3  # every draw is a stored frame, mirrored or not, with its own mask


def test_fine_tune_starts_from_init_records_its_frames_and_resumes(tmp_path):
    init = _init(tmp_path / "init.pt")
    real = _frames(tmp_path / "mine")
    cfg = TrainVisionConfig(init=init, real=(real,), **_kw(tmp_path))
    assert fine_tune_config(cfg).model == TINY and fine_tune_config(cfg).steps == 4  # the init's net, short schedule
    r = train_vision(cfg)
    ck = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    ft = ck["fine_tune"]
    assert ft["init"] == str(init.resolve()) and ft["init_step"] == 123 and ft["steps"] == 4
    assert ft["real"]["folders"] == [str(real.resolve())] and ft["real"]["n_frames"] == 6 and ft["real"]["n_target"] == 4
    assert r["fine_tune"] == ft and json.loads((tmp_path / "run" / "metrics.json").read_text())["fine_tune"] == ft
    assert ck["step"] == 4 and SegNetConfig(**ck["model_config"]) == TINY
    start = load_checkpoint(init)["model"]
    assert any(not torch.equal(start[k], ck["model"][k]) for k in start)  # it trained
    # the one resume rule: --init-steps may grow, a changed real fraction is refused
    with pytest.raises(ValueError, match="real_fraction"):
        train_vision(TrainVisionConfig(init=init, real=(real,), resume=True, real_fraction=0.25, **_kw(tmp_path)))
    r2 = train_vision(TrainVisionConfig(init=init, real=(real,), resume=True, **_kw(tmp_path, init_steps=8)))
    assert r2["steps"] == 8 and r2["fine_tune"] == ft


def test_fine_tune_bad_input_errors(tmp_path, capsys):
    from graspsim.cli import main

    init = _init(tmp_path / "init.pt")
    real = _frames(tmp_path / "mine")
    torch.save({"kind": "graspsim-control", "model": {}, "config": {}}, tmp_path / "control.pt")
    code = main(["train-vision", "--out", str(tmp_path / "r0"), "--init", str(tmp_path / "control.pt"),
                 "--real", str(real), "--transfer", "None", "--operating-point", "composite"])
    assert code == 2 and "graspsim-control" in capsys.readouterr().err
    assert not (tmp_path / "r0").exists()
    with pytest.raises(ValueError, match="--init-steps"):
        fine_tune_config(TrainVisionConfig(init=init, steps=1000, **_kw(tmp_path)))
    other = _frames(tmp_path / "other", size=48)
    with pytest.raises(ValueError, match="48x48.*64x64.*one size"):
        train_vision(TrainVisionConfig(init=init, real=(Path(f"{real},{other}"),), **_kw(tmp_path)))
    wide = _frames(tmp_path / "wide", width=80)
    with pytest.raises(ValueError, match="80x64.*square"):
        train_vision(TrainVisionConfig(init=init, real=(wide,), **_kw(tmp_path)))
    (real / "masks" / "r01.png").unlink()
    with pytest.raises(ValueError, match="have no mask.*r01"):
        train_vision(TrainVisionConfig(init=init, real=(real,), **_kw(tmp_path)))
    _png(real / "masks" / "r01.png", np.zeros((32, 64), np.uint8))
    with pytest.raises(ValueError, match="r01.png is 64x32.*must match"):
        train_vision(TrainVisionConfig(init=init, real=(real,), **_kw(tmp_path)))
    with pytest.raises(FileNotFoundError, match="no images/ folder"):
        train_vision(TrainVisionConfig(init=init, real=(tmp_path,), **_kw(tmp_path)))
    with pytest.raises(ValueError, match="real_fraction"):
        TrainVisionConfig(out=tmp_path / "x", real=(real,), real_fraction=1.0)
    assert not (tmp_path / "run").exists()
