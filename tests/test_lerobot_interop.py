"""Our LeRobotDataset exports loaded by LeRobot's own reader (``-m interop``; not in the default suite).

Builds a separate virtual environment with ``lerobot-dataset`` (:data:`LEROBOT_DATASET`, the standalone
``LeRobotDataset`` that installs on Python 3.11; it pins numpy, opencv and av below ours, so it never enters our
environment) plus torch, torchvision and torchcodec from the package registry, exports a small expert file as PNG
and as AV1 video, loads both through ``LeRobotDataset`` there and compares every frame with the HDF5 source.

torchcodec (LeRobot's video decoder) needs FFmpeg's shared libraries. The test points it at the FFmpeg that the
PyAV wheel of that environment bundles (symlinks under their plain sonames), so no system FFmpeg is needed.
``GRASPSIM_INTEROP_VENV=DIR`` reuses (or creates) the environment at DIR instead of a temporary one; creating it
downloads about 3 GB (torch with its CUDA libraries) and takes minutes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import venv
from pathlib import Path

import numpy as np
import pytest

from graspsim.dataset import read_episodes

pytestmark = [pytest.mark.interop, pytest.mark.timeout(3600)]

LEROBOT_DATASET = "lerobot-dataset==0.4.4"
EXTRA = ["torch", "torchvision", "torchcodec"]  # lerobot-dataset imports them without declaring them
VIDEO_MAE = 8.0
"""Mean absolute difference (0-255) allowed between LeRobot's decoded video frames and the source (as in
tests/test_lerobot.py)."""

CHECK = r'''
import json, sys
import numpy as np
from ledataset.datasets.lerobot_dataset import LeRobotDataset

root, dump = sys.argv[1], sys.argv[2]
fps = json.load(open(root + "/meta/info.json"))["fps"]
ds = LeRobotDataset("graspsim/export", root=root, delta_timestamps={"action": [k / fps for k in range(4)]})
items = [ds[i] for i in range(len(ds))]
out = {k: np.stack([it[k].numpy() for it in items]) for k in items[0] if k != "task"}
out["task"] = np.array([it["task"] for it in items])
out["num_episodes"] = np.array(ds.num_episodes)
out["fps"] = np.array(ds.fps)
out["camera_keys"] = np.array(ds.meta.camera_keys)
out["video_keys"] = np.array(ds.meta.video_keys)
out["stats_image_mean"] = ds.meta.stats["observation.images.wrist"]["mean"]
np.savez(dump, **out)
'''


def _python(env: Path) -> Path:
    return env / "bin" / "python"


def _venv(tmp_path_factory) -> Path:
    env = Path(os.environ.get("GRASPSIM_INTEROP_VENV") or tmp_path_factory.mktemp("interop") / "venv")
    if not _python(env).exists():
        venv.create(env, with_pip=True)
    probe = subprocess.run([_python(env), "-c", "import ledataset, torchcodec"], capture_output=True)
    if probe.returncode:
        pip = subprocess.run([_python(env), "-m", "pip", "install", "-q", LEROBOT_DATASET, *EXTRA],
                             capture_output=True, text=True, timeout=3000)
        assert pip.returncode == 0, f"pip could not install {LEROBOT_DATASET}: {pip.stderr[-3000:]}"
    return env


def _ffmpeg_dir(env: Path, where: Path) -> Path:
    """Symlinks ``libavutil.so.59`` ... to the FFmpeg libraries bundled in the environment's PyAV wheel."""
    libs = next((env / "lib").glob("python3*/site-packages/av.libs"))
    where.mkdir(exist_ok=True)
    for lib in libs.iterdir():
        m = re.match(r"^(lib(?:avutil|avcodec|avformat|avdevice|avfilter|swscale|swresample))-[0-9a-f]+\.so\.(\d+)",
                     lib.name)
        if m:
            link = where / f"{m.group(1)}.so.{m.group(2)}"
            if not link.exists():
                link.symlink_to(lib)
    return where


@pytest.fixture(scope="module")
def interop(tmp_path_factory):
    from graspsim.expert.collect import CollectConfig, collect
    from graspsim import SimConfig
    from graspsim.runtime import RuntimeConfig

    root = tmp_path_factory.mktemp("interop_data")
    env = _venv(tmp_path_factory)
    h5 = root / "demos.h5"
    collect(CollectConfig(out=h5, episodes=3, num_envs=3, seed=5, runtime=RuntimeConfig(progress=False),
                          sim=SimConfig(image_size=32, max_steps=10, shadows=False)))
    return env, h5, root


@pytest.mark.parametrize("images", ["png", "video"])
def test_lerobot_dataset_loads_our_export(interop, images):
    env, h5, root = interop
    from graspsim.dataset.lerobot import export_lerobot

    out = root / f"export_{images}"
    if not out.exists():
        export_lerobot([h5], out, images=images)
    script = root / "check.py"
    script.write_text(CHECK)
    dump = root / f"{images}.npz"
    run_env = dict(os.environ, LD_LIBRARY_PATH=str(_ffmpeg_dir(env, root / "ffmpeg")), HF_HUB_OFFLINE="1",
                   HF_DATASETS_CACHE=str(root / "hf_cache"))
    proc = subprocess.run([_python(env), script, out, dump], capture_output=True, text=True, env=run_env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = dict(np.load(dump))

    eps = list(read_episodes(h5))
    rgb = np.concatenate([ep.obs["rgb"] for ep in eps])
    assert int(got["num_episodes"]) == len(eps) and int(got["fps"]) == 10
    assert list(got["camera_keys"]) == ["observation.images.wrist"]
    assert list(got["video_keys"]) == (["observation.images.wrist"] if images == "video" else [])
    frames = np.round(got["observation.images.wrist"] * 255).astype(np.int16).transpose(0, 2, 3, 1)  # N,H,W,3
    if images == "png":
        assert np.array_equal(frames, rgb)
    else:
        assert np.abs(frames - rgb).mean() <= VIDEO_MAE
    assert np.array_equal(got["observation.state"], np.concatenate([ep.obs["gripper"] for ep in eps]))
    assert np.array_equal(got["observation.mask"], np.concatenate([ep.obs["mask"] for ep in eps]) != 0)
    # the action chunk LeRobot assembles from delta_timestamps stays inside each episode, padded at its end
    actions = [ep.actions for ep in eps]
    want, pad = [], []
    for a in actions:
        for t in range(len(a)):
            idx = [min(t + k, len(a) - 1) for k in range(4)]
            want.append(a[idx])
            pad.append([t + k >= len(a) for k in range(4)])
    assert np.array_equal(got["action"], np.stack(want)) and np.array_equal(got["action_is_pad"], np.array(pad))
    assert set(got["task"]) == {"grasp the small sphere"}
    stats = json.loads((out / "meta/stats.json").read_text())
    assert np.allclose(got["stats_image_mean"], np.array(stats["observation.images.wrist"]["mean"]))
