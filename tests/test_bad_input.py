"""Bad inputs and faults through the real ``graspsim`` entry point, for every verb (issue 20).

Each case runs ``graspsim.cli.main(argv)`` in-process (a handful run as a subprocess, where the exit code and
the absence of a traceback must hold for the real process) inside a copy of a small prepared folder, and checks:

* the exit code: 2 for a refused input, 0 where the input is legitimately accepted;
* no "Traceback" in the output;
* the message names the offending thing (and, where there is one, says what to do);
* nothing already written is lost or left stale: a refused input leaves the folder byte for byte as it was
  (nothing written, not even an empty folder); an accepted one changes only the paths it may change.

Budgets are tiny (32x32 images, 8-step episodes, 2-3 episodes, one training step) so the file stays fast.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import cv2
import h5py
import numpy as np
import pytest
import torch

from graspsim.runtime import RuntimeConfig
from graspsim.cli import main

SIM = ["--sim.image-size", "32", "--sim.max-steps", "8", "--sim.no-shadows"]
COLLECT = ["--num-envs", "2", *SIM, "--no-progress"]
DAGGER = ["--iterations", "1", "--episodes-per-iter", "2", "--eval-episodes", "2", "--num-envs", "2",
          "--train-steps", "1", "--batch-size", "4", "--no-progress", *SIM]
EVAL_SIM = ["--episodes", "2", "--num-envs", "2", "--gifs", "1", "--no-progress", *SIM]
TRAIN_VISION = ["--steps", "1", "--batch-size", "2", "--n-val", "4", "--n-test", "4", "--val-every", "1",
                "--ckpt-every", "1", "--patch", "0", "--no-mirror-tta", "--no-progress", "--model.crop", "0",
                "--model.no-context", "--model.base-channels", "4", "--model.max-channels", "8", "--model.depth", "2", *SIM]
BENCH = ["--image-size", "32", "--batch-sizes", "1", "--bullet-configs", "--loop-batch", "0", "--train-batch", "1",
         "--warmup", "0", "--min-steps", "1", "--seconds", "0.01", "--threads", "1", "--paired-rounds", "0",
         "--no-profile", "--no-plot"]


# ------------------------------------------------------------------------------------------ the prepared folder
def _png(path: Path, img: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    ok, buf = cv2.imencode(path.suffix, img)
    assert ok
    path.write_bytes(buf.tobytes())


def _build(root: Path) -> None:
    from graspsim.dagger.model import ControlNet, ControlNetConfig
    from graspsim.dagger.policy import save_checkpoint as save_control
    from graspsim.expert.collect import CollectConfig, collect
    from graspsim import SimConfig
    from graspsim.dataset import EpisodeWriter, read_episodes
    from graspsim.vision.checkpoint import save_checkpoint as save_vision
    from graspsim.vision.model import SegNet, SegNetConfig

    rng = np.random.default_rng(0)
    for i, name in enumerate("abc"):
        img = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
        mask = np.zeros((32, 32), np.uint8)
        if i:  # a.png shows no target
            mask[8:8 + 5 * i, 6:6 + 5 * i] = 255
        _png(root / "images" / f"{name}.png", img)
        _png(root / "masks" / f"{name}.png", mask)
        _png(root / "m16" / f"{name}.png", (mask // 255).astype(np.uint16))  # 16-bit 0/1 masks
        _png(root / "noise_masks" / f"{name}.png", rng.integers(0, 256, (32, 32), dtype=np.uint8))
        _png(root / "small_masks" / f"{name}.png", mask[:16] if name == "b" else mask)
        _png(root / "dup_images" / f"{name}.png", img)
        if name != "c":
            _png(root / "masks_partial" / f"{name}.png", mask)
    _png(root / "dup_images" / "a.jpg", rng.integers(0, 256, (32, 32, 3), dtype=np.uint8))
    _png(root / "bad_images" / "a.png", rng.integers(0, 256, (32, 32, 3), dtype=np.uint8))
    (root / "bad_images" / "b.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    (root / "all_bad").mkdir()
    (root / "all_bad" / "x.png").write_bytes(b"garbage")
    (root / "empty").mkdir()
    (root / "full").mkdir()
    (root / "full" / "keep.txt").write_text("mine")
    (root / "file.txt").write_text("a file")
    (root / "old.png").write_bytes(b"an earlier picture")
    (root / "dir.png").mkdir()
    (root / "dir.h5").mkdir()
    (root / "garbage.h5").write_bytes(b"not hdf5 at all")
    with h5py.File(root / "nodata.h5", "w") as f:
        f.create_dataset("x", data=np.arange(3))
    with h5py.File(root / "foreign.h5", "w") as f:  # robomimic layout, no graspsim attrs, no success field
        g = f.create_group("data/demo_0")
        g.attrs["num_samples"] = 5
        g.create_dataset("obs/rgb", data=np.zeros((5, 32, 32, 3), np.uint8))
        g.create_dataset("actions", data=np.zeros((5, 4), np.float32))
    # checkpoints
    torch.manual_seed(0)
    seg_cfg = SegNetConfig(base_channels=4, max_channels=8, depth=2)
    save_vision(root / "vision.pt", {"model": SegNet(seg_cfg).state_dict(), "model_config": dataclasses.asdict(seg_cfg),
                                     "config": {}, "step": 0, "threshold": 0.5, "image_size": 32, "probe_rgb": None})
    (root / "vision_run").mkdir()
    shutil.copy(root / "vision.pt", root / "vision_run" / "checkpoint.pt")
    save_control(root / "policy.pt", ControlNet(ControlNetConfig(image_size=32)), None, iteration=0)
    (root / "policy_run").mkdir()
    shutil.copy(root / "policy.pt", root / "policy_run" / "best.pt")
    # a dataset, and an interrupted copy of it whose middle part file is damaged
    sim = SimConfig(image_size=32, max_steps=8, shadows=False)
    collect(CollectConfig(out=root / "demos.h5", episodes=3, num_envs=2, sim=sim, runtime=RuntimeConfig(progress=False)))
    with h5py.File(root / "demos.h5", "r") as f:
        config, env_args = json.loads(f.attrs["config"]), json.loads(f["data"].attrs["env_args"])
    with EpisodeWriter(root / "broken.h5", config, env_args=env_args, consolidate=False) as w:
        for ep in read_episodes(root / "demos.h5"):
            w.append([ep])
    (root / "broken.h5.parts" / "part-000001.h5").write_bytes(b"\x00" * 4096)
    with EpisodeWriter(root / "empty.h5", config, env_args=env_args):
        pass
    # earlier outputs of eval-real (a masked run on 8 frames), eval-sim (4 GIFs) and bench
    for k in "abcdefgh":
        _png(root / "er_done" / "predictions" / f"{k}.png", np.zeros((4, 4), np.uint8))
        _png(root / "er_done" / "overlays" / f"{k}.png", np.zeros((4, 4, 3), np.uint8))
    (root / "er_done" / "metrics.json").write_text(json.dumps({"num_images": 8}))
    (root / "er_done" / "pr_curve.png").write_bytes(b"old curve")
    (root / "er_done" / "per_image.csv").write_text("file\n" + "".join(f"{k}.png\n" for k in "abcdefgh"))
    (root / "er_done" / "report.html").write_text("<html>old</html>")
    (root / "es_done").mkdir()
    (root / "es_done" / "metrics.json").write_text(json.dumps({"old": True}))
    (root / "es_done" / "report.md").write_text("old")
    for k in range(4):
        (root / "es_done" / f"rollout_{k}.gif").write_bytes(b"old gif")
    (root / "bench_done").mkdir()
    (root / "bench_done" / "bench.json").write_text("{}")
    (root / "bench_done" / "fps_vs_batch.png").write_bytes(b"old plot")
    # DAgger run folders: one whose config differs from the defaults, one with an unreadable metrics.json
    (root / "dagger_run").mkdir()
    (root / "dagger_run" / "config.json").write_text(json.dumps({"lr": 0.5}))
    (root / "dagger_run" / "metrics.json").write_text("[]")
    (root / "dagger_bad").mkdir()
    (root / "dagger_bad" / "metrics.json").write_text("{not json")
    (root / "runs" / "taken").mkdir(parents=True)
    (root / "runs" / "taken" / "keep.txt").write_text("mine")


def prepare(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """A prepared folder ``<tmp>/<name>N/world`` filled by ``build`` (once per session or module)."""
    root = tmp_path_factory.mktemp(name) / "world"
    root.mkdir()
    build(root)
    return root


def copy_world(template: Path, tmp_path: Path) -> Path:
    """A case's own copy of the prepared folder, with the untouched originals beside it as ``template``."""
    dst = tmp_path / "w"
    shutil.copytree(template, dst)
    (tmp_path / "template").symlink_to(template)  # for checks that compare with the originals
    return dst


@pytest.fixture(scope="session")
def template(tmp_path_factory) -> Path:
    return prepare(tmp_path_factory, "bad_input", _build)


@pytest.fixture
def world(template: Path, tmp_path: Path) -> Path:
    return copy_world(template, tmp_path)


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> content hash (files) or "dir", for everything under ``root``."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = "dir"
        for f in filenames:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, root)] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
    return out


def run_cli(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as e:  # tyro's own usage errors and --help exit this way
        return int(e.code or 0)


# ------------------------------------------------------------------------------------------ checks of accepted runs
def _metrics(path: Path) -> dict:
    return json.loads(path.read_text())


def _check_er_masked(w: Path, log: str) -> None:
    m = _metrics(w / "o" / "metrics.json")
    assert m["num_images"] == 3 and m["headline"] == "pooled"
    assert set(m["per_frame"]) >= {"precision", "recall", "iou", "f1"} and m["per_frame"]["num_frames"] == 2
    assert m["suspect_masks"] == []
    assert sorted(p.name for p in (w / "o" / "predictions").iterdir()) == ["a.png", "b.png", "c.png"]


def _check_er_16bit(w: Path, log: str) -> None:
    m = _metrics(w / "o" / "metrics.json")
    assert m["num_target_images"] == 2 and m["num_empty_images"] == 1  # a 16-bit 1 is a target pixel
    assert m["tp_pixels"] + m["fn_pixels"] == 25 + 100  # every ground-truth pixel of b and c counted


def _check_er_noise(w: Path, log: str) -> None:
    assert "look like images" in log and "check --masks" in log
    assert len(_metrics(w / "o" / "metrics.json")["suspect_masks"]) == 3


def _check_er_replaced(w: Path, log: str) -> None:
    out = w / "er_done"
    assert sorted(p.name for p in (out / "predictions").iterdir()) == ["a.png", "b.png", "c.png"]
    assert sorted(p.name for p in (out / "overlays").iterdir()) == ["a.png", "b.png", "c.png"]
    assert not (out / "metrics.json").exists() and not (out / "pr_curve.png").exists()  # no stale masked outputs
    assert len((out / "per_image.csv").read_text().strip().splitlines()) == 4
    assert not [p for p in w.iterdir() if p.name.startswith(".")]  # no staging folder left behind


def _check_foreign_kept(w: Path, log: str) -> None:
    assert (w / "full" / "keep.txt").read_text() == "mine" and len(list((w / "full").iterdir())) > 1


def _check_er_skip(w: Path, log: str) -> None:
    assert [p.name for p in (w / "o" / "predictions").iterdir()] == ["a.png"] and "b.png" in log


def _check_es_replaced(w: Path, log: str) -> None:
    out = w / "es_done"
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json", "report.md", "rollout_0.gif"]
    assert _metrics(out / "metrics.json")["num_episodes"] == 2


def _check_es_new(w: Path, log: str) -> None:
    assert _metrics(w / "o" / "metrics.json")["num_episodes"] == 2


def _check_collect_new(w: Path, log: str) -> None:
    from graspsim.dataset import describe

    assert describe(w / "new.h5")["episodes"] == 2


def _check_collect_replaced(w: Path, log: str) -> None:
    from graspsim.dataset import describe

    info = describe(w / "demos.h5")
    assert info["episodes"] == 2 and info["config"]["seed"] == 7
    assert not [p for p in w.iterdir() if ".overwrite" in p.name]


def _check_inspect_foreign(w: Path, log: str) -> None:
    assert "unknown" in log and "0.00%" not in log


def _check_repaired(w: Path, log: str) -> None:
    from graspsim.dataset import describe, read_episodes

    assert describe(w / "broken.h5")["episodes"] == 2 and describe(w / "broken.h5")["consolidated"]
    first = [e.attrs["episode_index"] for e in read_episodes(w / "demos.h5")]
    assert [e.attrs["episode_index"] for e in read_episodes(w / "broken.h5")] == [first[0], first[2]]
    assert not (w / "broken.h5.parts").exists()
    assert "demo_1" in log and "dropped 1" in log


def _check_repair_keeps_all(w: Path, log: str) -> None:
    from graspsim.dataset import read_episodes

    assert "dropped 0" in log
    for a, b in zip(read_episodes(w / "demos.h5"), read_episodes(w.parent / "template" / "demos.h5"), strict=True):
        for k in a.obs:
            np.testing.assert_array_equal(a.obs[k], b.obs[k])
        np.testing.assert_array_equal(a.actions, b.actions)
        assert a.attrs == b.attrs


def _check_media(w: Path, log: str) -> None:
    assert (w / "media" / "demos_demo0.png").stat().st_size > 0 and (w / "media" / "demos_demo0.gif").is_file()


def _check_show(w: Path, log: str) -> None:
    assert (w / "s.png").stat().st_size > 0


def _check_show_replaced(w: Path, log: str) -> None:
    assert (w / "old.png").read_bytes()[:4] == b"\x89PNG"


def _check_tv(w: Path, log: str) -> None:
    assert (w / "tv" / "checkpoint.pt").is_file() and (w / "tv" / "metrics.json").is_file()


def _check_dagger(w: Path, log: str) -> None:
    assert len(_metrics(w / "dg" / "metrics.json")) == 1 and (w / "dg" / "policy.pt").is_file()


def _check_bench(w: Path, log: str) -> None:
    assert sorted(p.name for p in (w / "bench_done").iterdir()) == ["bench.json"]  # the stale plot is gone
    assert _metrics(w / "bench_done" / "bench.json")["torch_sim"][0]["batch"] == 1


# ------------------------------------------------------------------------------------------ the cases
@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    rc: int = 2
    must: tuple[str, ...] = ()
    """Substrings of the output (stdout, stderr and log) that name the offending thing / say what to do."""
    changes: tuple[str, ...] = ()
    """For accepted runs: the only paths (relative prefixes) that may appear, change or go."""
    check: Optional[Callable[[Path, str], None]] = None
    ours: bool = True
    """The error is reported by our handler ("graspsim <verb>: error: ..."), not by tyro's usage box."""
    hide: tuple[str, ...] = ()
    """Modules made unimportable for the case, as if their extra were not installed (tests/test_bad_input_verbs.py)."""


def C(id: str, *argv: str, **kw) -> Case:
    return Case(id, tuple(argv), **kw)


T = "{w}"  # replaced by the case's folder
CASES = [
    # --- top level
    C("no-args-prints-usage", rc=0, must=("usage: graspsim",)),
    C("unknown-verb-suggests", "colect", must=("unknown verb 'colect'", "did you mean 'collect'"), ours=False),
    C("verb-help", "eval-real", "--help", rc=0, must=("--images",)),
    # --- show
    C("show-ok", "show", "--out", f"{T}/s.png", "--num", "2", *SIM, rc=0, changes=("s.png",), check=_check_show),
    C("show-existing-file-refused", "show", "--out", f"{T}/old.png", "--num", "2", *SIM,
      must=("old.png", "already exists", "--overwrite")),
    C("show-existing-file-overwrite", "show", "--out", f"{T}/old.png", "--num", "2", "--overwrite", *SIM, rc=0,
      changes=("old.png",), check=_check_show_replaced),
    C("show-out-not-png", "show", "--out", f"{T}/s.jpg", must=("ShowConfig.out", ".png")),
    C("show-out-is-folder", "show", "--out", f"{T}/dir.png", *SIM, must=("dir.png", "is a folder")),
    C("show-out-parent-is-file", "show", "--out", f"{T}/file.txt/s.png", *SIM, must=("file.txt", "not a folder")),
    C("show-num-zero", "show", "--num", "0", must=("ShowConfig.num",)),
    C("show-num-not-int", "show", "--num", "abc", must=("--num",), ours=False),
    C("show-scale-zero", "show", "--scale", "0", must=("ShowConfig.scale",)),
    C("show-backend-unknown", "show", "--backend", "mujoco", must=("ShowConfig.backend", "mujoco")),
    C("show-device-cuda", "show", "--device", "cuda", must=("RuntimeConfig.device", "CUDA is not available", "--device cpu")),
    C("show-device-gpu", "show", "--device", "gpu", must=("RuntimeConfig.device", "'gpu'", "use cpu or cuda")),
    C("show-unknown-flag", "show", "--nmu", "3", must=("--nmu",), ours=False),
    C("show-image-size-too-small", "show", "--sim.image-size", "8", must=("SimConfig.image_size", "8")),
    C("show-range-reversed", "show", "--sim.randomization.blur", "0.5", "0.2", must=("blur",)),
    C("show-open-width-too-small", "show", "--sim.open-width", "0.001", must=("open_width",)),
    # --- collect
    C("collect-new-file", "collect", "--out", f"{T}/new.h5", "--episodes", "2", *COLLECT, rc=0, changes=("new.h5",),
      check=_check_collect_new),
    C("collect-existing-refused", "collect", "--out", f"{T}/demos.h5", "--episodes", "2", *COLLECT,
      must=("demos.h5", "already exists", "--resume", "--overwrite")),
    C("collect-overwrite-replaces", "collect", "--out", f"{T}/demos.h5", "--episodes", "2", "--seed", "7",
      "--overwrite", *COLLECT, rc=0, changes=("demos.h5",), check=_check_collect_replaced),
    C("collect-resume-and-overwrite", "collect", "--out", f"{T}/demos.h5", "--resume", "--overwrite",
      must=("--resume and --overwrite",)),
    C("collect-out-not-h5", "collect", "--out", f"{T}/d.txt", must=("CollectConfig.out", ".h5")),
    C("collect-out-is-folder", "collect", "--out", f"{T}/dir.h5", *COLLECT, must=("dir.h5", "folder")),
    C("collect-folder-missing", "collect", "--out", f"{T}/nope/d.h5", *COLLECT, must=("nope", "does not exist")),
    C("collect-parent-is-file", "collect", "--out", f"{T}/file.txt/d.h5", *COLLECT, must=("file.txt", "not a folder")),
    C("collect-episodes-zero", "collect", "--out", f"{T}/n.h5", "--episodes", "0", must=("CollectConfig.episodes",)),
    C("collect-episodes-negative", "collect", "--out", f"{T}/n.h5", "--episodes", "-3", must=("CollectConfig.episodes",)),
    C("collect-episodes-float", "collect", "--out", f"{T}/n.h5", "--episodes", "2.5", must=("--episodes",), ours=False),
    C("collect-num-envs-zero", "collect", "--out", f"{T}/n.h5", "--num-envs", "0", must=("CollectConfig.num_envs",)),
    C("collect-seed-negative", "collect", "--out", f"{T}/n.h5", "--seed", "-1", must=("CollectConfig.seed",)),
    C("collect-noise-negative", "collect", "--out", f"{T}/n.h5", "--noise", "-0.1", must=("CollectConfig.noise",)),
    C("collect-noise-nan", "collect", "--out", f"{T}/n.h5", "--noise", "nan", must=("CollectConfig.noise",)),
    C("collect-compression-unknown", "collect", "--out", f"{T}/n.h5", "--compression", "zip",
      must=("CollectConfig.compression", "zip")),
    C("collect-flush-negative", "collect", "--out", f"{T}/n.h5", "--flush-seconds", "-1",
      must=("CollectConfig.flush_seconds",)),
    C("collect-valid-fraction-one", "collect", "--out", f"{T}/n.h5", "--valid-fraction", "1",
      must=("CollectConfig.valid_fraction",)),
    C("collect-device-cuda-writes-nothing", "collect", "--out", f"{T}/n.h5", "--device", "cuda", *COLLECT,
      must=("RuntimeConfig.device", "CUDA is not available", "--device cpu")),
    C("collect-device-gpu", "collect", "--out", f"{T}/n.h5", "--device", "gpu", must=("'gpu'", "not a torch device")),
    C("collect-device-cuda-index", "collect", "--out", f"{T}/n.h5", "--device", "cuda:7", must=("cuda:7",)),
    C("collect-resume-config-differs", "collect", "--out", f"{T}/demos.h5", "--resume", "--seed", "5", *COLLECT,
      must=("--resume", "differs", "seed")),
    C("collect-resume-foreign-file", "collect", "--out", f"{T}/foreign.h5", "--resume", *COLLECT,
      must=("foreign.h5", "not a graspsim episode file")),
    C("collect-resume-not-hdf5", "collect", "--out", f"{T}/garbage.h5", "--resume", *COLLECT,
      must=("garbage.h5", "not a readable HDF5")),
    C("collect-resume-damaged-part", "collect", "--out", f"{T}/broken.h5", "--resume", "--episodes", "4", *COLLECT,
      must=("broken.h5", "demo_1", "--repair")),
    C("collect-sim-max-steps-zero", "collect", "--out", f"{T}/n.h5", "--sim.max-steps", "0",
      must=("SimConfig.max_steps",)),
    # --- inspect
    C("inspect-summary", "inspect", f"{T}/demos.h5", "--no-media", rc=0, must=("success rate", "episodes")),
    C("inspect-media-into-new-folder", "inspect", f"{T}/demos.h5", "--out", f"{T}/media", rc=0, changes=("media",),
      check=_check_media),
    C("inspect-media-existing-refused", "inspect", f"{T}/demos.h5", "--png", f"{T}/old.png",
      must=("old.png", "already exists", "--overwrite")),
    C("inspect-out-is-file", "inspect", f"{T}/demos.h5", "--out", f"{T}/file.txt", must=("file.txt", "not a folder")),
    C("inspect-png-folder-missing", "inspect", f"{T}/demos.h5", "--png", f"{T}/nope/x.png",
      must=("nope", "does not exist")),
    C("inspect-missing-file", "inspect", f"{T}/nope.h5", must=("nope.h5", "not found")),
    C("inspect-folder-as-file", "inspect", f"{T}/dir.h5", must=("dir.h5", "directory")),
    C("inspect-not-hdf5", "inspect", f"{T}/garbage.h5", must=("garbage.h5", "not a readable HDF5")),
    C("inspect-no-data-group", "inspect", f"{T}/nodata.h5", must=("nodata.h5", "'data' group")),
    C("inspect-foreign-success-unknown", "inspect", f"{T}/foreign.h5", "--no-media", rc=0,
      must=("success rate",), check=_check_inspect_foreign),
    C("inspect-empty-file-media", "inspect", f"{T}/empty.h5", must=("empty.h5", "no episodes")),
    C("inspect-demo-out-of-range", "inspect", f"{T}/demos.h5", "--demo", "9", must=("demo=9", "demos 0..2")),
    C("inspect-demo-negative", "inspect", f"{T}/demos.h5", "--demo", "-1", must=("InspectConfig.demo",)),
    C("inspect-frames-zero", "inspect", f"{T}/demos.h5", "--frames", "0", must=("InspectConfig.frames",)),
    C("inspect-png-wrong-suffix", "inspect", f"{T}/demos.h5", "--png", f"{T}/x.jpg", must=("InspectConfig.png",)),
    C("inspect-damaged-part", "inspect", f"{T}/broken.h5", "--no-media", must=("broken.h5", "demo_1", "--repair")),
    C("inspect-repair", "inspect", f"{T}/broken.h5", "--no-media", "--repair", rc=0,
      changes=("broken.h5", "broken.h5.parts"), check=_check_repaired),
    C("inspect-repair-not-hdf5", "inspect", f"{T}/garbage.h5", "--repair", must=("garbage.h5", "not a readable HDF5")),
    C("inspect-repair-missing-file", "inspect", f"{T}/nope/x.h5", "--repair", must=("x.h5", "not found")),
    C("inspect-repair-healthy-file", "inspect", f"{T}/demos.h5", "--no-media", "--repair", rc=0, changes=("demos.h5",),
      check=_check_repair_keeps_all),
    C("inspect-no-path", "inspect", must=("PATH",), ours=False),
    # --- train-vision
    C("tv-tiny-run", "train-vision", "--out", f"{T}/tv", *TRAIN_VISION, rc=0, changes=("tv",), check=_check_tv),
    C("tv-out-not-empty", "train-vision", "--out", f"{T}/full", *TRAIN_VISION, must=("full", "not empty", "--resume")),
    C("tv-out-is-file", "train-vision", "--out", f"{T}/file.txt", *TRAIN_VISION, must=("file.txt", "not a folder")),
    C("tv-resume-without-checkpoint", "train-vision", "--out", f"{T}/empty", "--resume", *TRAIN_VISION,
      must=("--resume", "no checkpoint")),
    C("tv-backgrounds-missing-writes-nothing", "train-vision", "--out", f"{T}/tv", "--backgrounds", f"{T}/nope",
      *TRAIN_VISION, must=("nope", "does not exist")),
    C("tv-backgrounds-without-split", "train-vision", "--out", f"{T}/tv", "--backgrounds", f"{T}/images",
      *TRAIN_VISION, must=("val",)),
    C("tv-val-equals-train", "train-vision", "--out", f"{T}/tv", "--backgrounds", f"{T}/images", "--val-backgrounds",
      f"{T}/images", *TRAIN_VISION, must=("must differ",)),
    C("tv-hdf5-missing", "train-vision", "--out", f"{T}/tv", "--hdf5", f"{T}/nope.h5", *TRAIN_VISION,
      must=("nope.h5", "no such dataset file")),
    C("tv-hdf5-damaged-part", "train-vision", "--out", f"{T}/tv", "--hdf5", f"{T}/broken.h5", *TRAIN_VISION,
      must=("broken.h5", "demo_1", "--repair")),
    C("tv-hdf5-is-folder", "train-vision", "--out", f"{T}/tv", "--hdf5", f"{T}/dir.h5", *TRAIN_VISION,
      must=("dir.h5", "is a folder")),
    C("tv-hdf5-not-hdf5", "train-vision", "--out", f"{T}/tv", "--hdf5", f"{T}/garbage.h5", *TRAIN_VISION,
      must=("garbage.h5", "cannot open")),
    C("tv-hdf5-without-masks", "train-vision", "--out", f"{T}/tv", "--hdf5", f"{T}/foreign.h5", *TRAIN_VISION,
      must=("foreign.h5", "lacks rgb or mask")),
    C("tv-hdf5-no-episodes", "train-vision", "--out", f"{T}/tv", "--hdf5", f"{T}/empty.h5", *TRAIN_VISION,
      must=("empty.h5", "no episodes")),
    C("tv-steps-zero", "train-vision", "--out", f"{T}/tv", "--steps", "0", must=("TrainVisionConfig.steps",)),
    C("tv-lr-zero", "train-vision", "--out", f"{T}/tv", "--lr", "0", must=("TrainVisionConfig.lr",)),
    C("tv-patch-not-multiple", "train-vision", "--out", f"{T}/tv", "--patch", "12", must=("TrainVisionConfig.patch",)),
    C("tv-min-precision-above-one", "train-vision", "--out", f"{T}/tv", "--min-precision", "2",
      must=("min_precision",)),
    C("tv-threads-negative", "train-vision", "--out", f"{T}/tv", "--threads", "-1", must=("RuntimeConfig.threads",)),
    C("tv-device-cuda", "train-vision", "--out", f"{T}/tv", "--device", "cuda", must=("RuntimeConfig.device",)),
    C("tv-image-size-not-multiple", "train-vision", "--out", f"{T}/tv", "--sim.image-size", "33",
      must=("image_size 33",)),
    # --- eval-real
    C("er-masked", "eval-real", "--images", f"{T}/images", "--masks", f"{T}/masks", "--vision", f"{T}/vision.pt",
      "--out", f"{T}/o", rc=0, changes=("o",), check=_check_er_masked),
    C("er-16bit-masks", "eval-real", "--images", f"{T}/images", "--masks", f"{T}/m16", "--vision", f"{T}/vision.pt",
      "--out", f"{T}/o", rc=0, changes=("o",), check=_check_er_16bit),
    C("er-noise-masks-warn", "eval-real", "--images", f"{T}/images", "--masks", f"{T}/noise_masks", "--vision",
      f"{T}/vision.pt", "--out", f"{T}/o", rc=0, changes=("o",), check=_check_er_noise),
    C("er-overwrite-replaces-as-whole", "eval-real", "--images", f"{T}/images", "--vision", f"{T}/vision.pt",
      "--out", f"{T}/er_done", "--overwrite", rc=0, changes=("er_done",), check=_check_er_replaced),
    C("er-skip-bad", "eval-real", "--images", f"{T}/bad_images", "--vision", f"{T}/vision.pt", "--out", f"{T}/o",
      "--skip-bad", rc=0, changes=("o",), check=_check_er_skip),
    C("er-earlier-outputs-refused", "eval-real", "--images", f"{T}/images", "--vision", f"{T}/vision.pt",
      "--out", f"{T}/er_done", must=("er_done", "not empty", "--overwrite")),
    C("er-foreign-folder-refused", "eval-real", "--images", f"{T}/images", "--vision", f"{T}/vision.pt",
      "--out", f"{T}/full", must=("full", "keep.txt", "not empty", "--overwrite")),
    C("er-overwrite-keeps-foreign-files", "eval-real", "--images", f"{T}/images", "--vision", f"{T}/vision.pt",
      "--out", f"{T}/full", "--overwrite", rc=0, changes=("full/predictions", "full/overlays", "full/report.html",
                                                          "full/per_image.csv"), check=_check_foreign_kept),
    C("er-out-is-images-folder", "eval-real", "--images", f"{T}/images", "--vision", f"{T}/vision.pt",
      "--out", f"{T}/images", "--overwrite", must=("is the --images folder", "choose another --out")),
    C("er-out-is-masks-folder", "eval-real", "--images", f"{T}/images", "--masks", f"{T}/masks", "--vision",
      f"{T}/vision.pt", "--out", f"{T}/masks", "--overwrite", must=("is the --masks folder",)),
    C("er-same-stem-no-masks", "eval-real", "--images", f"{T}/dup_images", "--vision", f"{T}/vision.pt",
      "--out", f"{T}/o", must=("share a stem", "a.jpg", "a.png")),
    C("er-same-stem-with-masks", "eval-real", "--images", f"{T}/dup_images", "--masks", f"{T}/masks", "--vision",
      f"{T}/vision.pt", "--out", f"{T}/o", must=("share a stem",)),
    C("er-masks-are-images", "eval-real", "--images", f"{T}/images", "--masks", f"{T}/images", "--vision",
      f"{T}/vision.pt", "--out", f"{T}/o", must=("images folder",)),
    C("er-mask-wrong-size-writes-nothing", "eval-real", "--images", f"{T}/images", "--masks", f"{T}/small_masks",
      "--vision", f"{T}/vision.pt", "--out", f"{T}/o", must=("b.png", "must match")),
    C("er-mask-missing", "eval-real", "--images", f"{T}/images", "--masks", f"{T}/masks_partial", "--vision",
      f"{T}/vision.pt", "--out", f"{T}/o", must=("1 image(s)", "c.png", "no mask", "all-zero mask")),
    C("er-masks-folder-empty", "eval-real", "--images", f"{T}/images", "--masks", f"{T}/empty", "--vision",
      f"{T}/vision.pt", "--out", f"{T}/o", must=("no mask", "a.png")),
    C("er-masks-folder-missing", "eval-real", "--images", f"{T}/images", "--masks", f"{T}/nope", "--vision",
      f"{T}/vision.pt", "--out", f"{T}/o", must=("nope", "does not exist")),
    C("er-masks-is-file", "eval-real", "--images", f"{T}/images", "--masks", f"{T}/file.txt", "--vision",
      f"{T}/vision.pt", "--out", f"{T}/o", must=("file.txt", "not a folder")),
    C("er-corrupt-image-writes-nothing", "eval-real", "--images", f"{T}/bad_images", "--vision", f"{T}/vision.pt",
      "--out", f"{T}/o", must=("b.png", "cannot read")),
    C("er-failure-removes-created-parents", "eval-real", "--images", f"{T}/bad_images", "--vision", f"{T}/vision.pt",
      "--out", f"{T}/n1/n2/o", must=("b.png", "cannot read")),
    C("er-all-skipped-writes-nothing", "eval-real", "--images", f"{T}/all_bad", "--vision", f"{T}/vision.pt",
      "--out", f"{T}/o", "--skip-bad", must=("no readable images",)),
    C("er-images-missing", "eval-real", "--images", f"{T}/nope", "--vision", f"{T}/vision.pt", "--out", f"{T}/o",
      must=("nope", "does not exist")),
    C("er-images-empty", "eval-real", "--images", f"{T}/empty", "--vision", f"{T}/vision.pt", "--out", f"{T}/o",
      must=("empty", "no PNG/JPEG")),
    C("er-images-is-file", "eval-real", "--images", f"{T}/file.txt", "--vision", f"{T}/vision.pt", "--out", f"{T}/o",
      must=("file.txt", "not a folder")),
    C("er-vision-missing", "eval-real", "--images", f"{T}/images", "--vision", f"{T}/nope.pt", "--out", f"{T}/o",
      must=("nope.pt", "no such")),
    C("er-vision-is-folder", "eval-real", "--images", f"{T}/images", "--vision", f"{T}/vision_run", "--out", f"{T}/o",
      must=("vision_run", "is a folder", "checkpoint.pt")),
    C("er-vision-is-control-checkpoint", "eval-real", "--images", f"{T}/images", "--vision", f"{T}/policy.pt",
      "--out", f"{T}/o", must=("policy.pt", "graspsim-vision")),
    C("er-vision-not-a-checkpoint", "eval-real", "--images", f"{T}/images", "--vision", f"{T}/file.txt",
      "--out", f"{T}/o", must=("file.txt", "not a readable torch checkpoint")),
    C("er-out-is-file", "eval-real", "--images", f"{T}/images", "--vision", f"{T}/vision.pt", "--out", f"{T}/file.txt",
      must=("file.txt", "not a folder")),
    C("er-out-parent-is-file", "eval-real", "--images", f"{T}/images", "--vision", f"{T}/vision.pt",
      "--out", f"{T}/file.txt/o", must=("file.txt", "not a folder")),
    C("er-threshold-above-one", "eval-real", "--images", f"{T}/images", "--vision", f"{T}/vision.pt", "--out",
      f"{T}/o", "--threshold", "1.5", must=("EvalRealConfig.threshold",)),
    C("er-peak-threshold-one", "eval-real", "--images", f"{T}/images", "--vision", f"{T}/vision.pt", "--out",
      f"{T}/o", "--peak-threshold", "1", must=("EvalRealConfig.peak_threshold",)),
    C("er-min-pixels-zero", "eval-real", "--images", f"{T}/images", "--vision", f"{T}/vision.pt", "--out", f"{T}/o",
      "--min-pixels", "0", must=("EvalRealConfig.min_pixels",)),
    C("er-batch-size-zero", "eval-real", "--images", f"{T}/images", "--vision", f"{T}/vision.pt", "--out", f"{T}/o",
      "--batch-size", "0", must=("EvalRealConfig.batch_size",)),
    C("er-precision-unknown", "eval-real", "--images", f"{T}/images", "--vision", f"{T}/vision.pt", "--out", f"{T}/o",
      "--precision", "fp8", must=("EvalRealConfig.precision", "fp8")),
    C("er-device-cuda", "eval-real", "--images", f"{T}/images", "--vision", f"{T}/vision.pt", "--out", f"{T}/o",
      "--device", "cuda", must=("RuntimeConfig.device", "CUDA")),
    C("er-missing-required", "eval-real", "--images", f"{T}/images", must=("--vision",), ours=False),
    # --- dagger
    C("dagger-tiny-run", "dagger", "--out", f"{T}/dg", *DAGGER, rc=0, changes=("dg",), check=_check_dagger),
    C("dagger-out-not-empty", "dagger", "--out", f"{T}/full", *DAGGER, must=("full", "not empty", "--resume")),
    C("dagger-out-is-file", "dagger", "--out", f"{T}/file.txt", *DAGGER, must=("file.txt", "not a folder")),
    C("dagger-resume-config-differs", "dagger", "--out", f"{T}/dagger_run", "--resume", *DAGGER,
      must=("--resume", "differs", "lr")),
    C("dagger-resume-unreadable-metrics", "dagger", "--out", f"{T}/dagger_bad", "--resume", *DAGGER,
      must=("dagger_bad", "not a readable DAgger run folder")),
    C("dagger-predicted-needs-vision", "dagger", "--out", f"{T}/dg", "--masks", "predicted",
      must=("--masks predicted", "--vision")),
    C("dagger-vision-missing", "dagger", "--out", f"{T}/dg", "--masks", "predicted", "--vision", f"{T}/nope.pt",
      must=("nope.pt", "no such")),
    C("dagger-vision-is-folder", "dagger", "--out", f"{T}/dg", "--vision", f"{T}/vision_run",
      must=("vision_run", "is a folder", "checkpoint.pt")),
    C("dagger-vision-wrong-kind-writes-nothing", "dagger", "--out", f"{T}/dg", "--masks", "predicted", "--vision",
      f"{T}/policy.pt", *DAGGER, must=("policy.pt", "graspsim-vision")),
    C("dagger-iterations-zero", "dagger", "--out", f"{T}/dg", "--iterations", "0", must=("DaggerConfig.iterations",)),
    C("dagger-beta-above-one", "dagger", "--out", f"{T}/dg", "--beta-start", "2", must=("DaggerConfig.beta_start",)),
    C("dagger-schedule-unknown", "dagger", "--out", f"{T}/dg", "--schedule", "cosine", must=("--schedule",), ours=False),
    C("dagger-lr-negative", "dagger", "--out", f"{T}/dg", "--lr", "-1", must=("DaggerConfig.lr",)),
    C("dagger-lr-final-frac-zero", "dagger", "--out", f"{T}/dg", "--lr-final-frac", "0",
      must=("DaggerConfig.lr_final_frac",)),
    C("dagger-device-gpu", "dagger", "--out", f"{T}/dg", "--device", "gpu", must=("RuntimeConfig.device",)),
    # --- eval-sim
    C("es-new-folder", "eval-sim", "--policy", f"{T}/policy.pt", "--out", f"{T}/o", *EVAL_SIM, rc=0, changes=("o",),
      check=_check_es_new),
    C("es-overwrite-replaces-as-whole", "eval-sim", "--policy", f"{T}/policy.pt", "--out", f"{T}/es_done",
      "--overwrite", *EVAL_SIM, rc=0, changes=("es_done",), check=_check_es_replaced),
    C("es-earlier-results-refused", "eval-sim", "--policy", f"{T}/policy.pt", "--out", f"{T}/es_done", *EVAL_SIM,
      must=("es_done", "not empty", "--overwrite")),
    C("es-overwrite-keeps-foreign-files", "eval-sim", "--policy", f"{T}/policy.pt", "--out", f"{T}/full",
      "--overwrite", *EVAL_SIM, rc=0, changes=("full/metrics.json", "full/report.md", "full/rollout_0.gif"),
      check=_check_foreign_kept),
    C("es-out-is-file", "eval-sim", "--policy", f"{T}/policy.pt", "--out", f"{T}/file.txt", *EVAL_SIM,
      must=("file.txt", "not a folder")),
    C("es-policy-missing", "eval-sim", "--policy", f"{T}/nope.pt", "--out", f"{T}/o", must=("nope.pt", "no such")),
    C("es-policy-is-folder", "eval-sim", "--policy", f"{T}/policy_run", "--out", f"{T}/o",
      must=("policy_run", "is a folder", "best.pt")),
    C("es-policy-is-vision-checkpoint", "eval-sim", "--policy", f"{T}/vision.pt", "--out", f"{T}/o", *EVAL_SIM,
      must=("vision.pt", "graspsim-control")),
    C("es-policy-not-a-checkpoint", "eval-sim", "--policy", f"{T}/file.txt", "--out", f"{T}/o", *EVAL_SIM,
      must=("file.txt", "not a readable torch checkpoint")),
    C("es-vision-missing", "eval-sim", "--policy", f"{T}/policy.pt", "--vision", f"{T}/nope.pt", "--out", f"{T}/o",
      must=("nope.pt", "no such")),
    C("es-vision-is-folder", "eval-sim", "--policy", f"{T}/policy.pt", "--vision", f"{T}/vision_run", "--out",
      f"{T}/o", must=("vision_run", "is a folder", "checkpoint.pt")),
    C("es-predicted-needs-vision", "eval-sim", "--policy", f"{T}/policy.pt", "--masks", "predicted", "--out", f"{T}/o",
      must=("--masks predicted", "--vision")),
    C("es-image-size-mismatch-writes-nothing", "eval-sim", "--policy", f"{T}/policy.pt", "--out", f"{T}/o",
      "--sim.image-size", "64", "--no-progress", must=("image_size",)),
    C("es-episodes-zero", "eval-sim", "--policy", f"{T}/policy.pt", "--out", f"{T}/o", "--episodes", "0",
      must=("EvalSimConfig.episodes",)),
    C("es-gifs-negative", "eval-sim", "--policy", f"{T}/policy.pt", "--out", f"{T}/o", "--gifs", "-1",
      must=("EvalSimConfig.gifs",)),
    C("es-moving-speed-reversed", "eval-sim", "--policy", f"{T}/policy.pt", "--out", f"{T}/o", "--moving-speed",
      "0.02", "0.01", must=("EvalSimConfig.moving_speed",)),
    C("es-backend-unknown", "eval-sim", "--policy", f"{T}/policy.pt", "--out", f"{T}/o", "--backend", "gazebo",
      must=("--backend",), ours=False),
    C("es-device-cuda", "eval-sim", "--policy", f"{T}/policy.pt", "--out", f"{T}/o", "--device", "cuda",
      must=("RuntimeConfig.device", "CUDA")),
    # --- pipeline
    C("pipeline-runs-dir-is-file", "pipeline", "--runs-dir", f"{T}/file.txt", "--name", "x",
      must=("file.txt", "not a folder")),
    C("pipeline-name-taken", "pipeline", "--runs-dir", f"{T}/runs", "--name", "taken",
      must=("taken", "not empty", "--resume")),
    C("pipeline-resume-needs-name", "pipeline", "--resume", must=("--resume needs --name",)),
    C("pipeline-name-with-slash", "pipeline", "--name", "a/b", must=("PipelineConfig.name",)),
    C("pipeline-name-dotdot", "pipeline", "--name", "..", must=("PipelineConfig.name",)),
    C("pipeline-preset-unknown", "pipeline", "--preset", "huge", must=("--preset",), ours=False),
    C("pipeline-vision-model-unknown", "pipeline", "--vision-model", "tiny", must=("--vision-model",), ours=False),
    C("pipeline-vision-model-and-checkpoint", "pipeline", "--vision-model", "unet", "--vision",
      "vision/assets/segnet.pt", must=("--vision-model", "--vision skips")),
    C("pipeline-iterations-zero", "pipeline", "--iterations", "0", must=("PipelineConfig.iterations",)),
    C("pipeline-seed-negative", "pipeline", "--seed", "-2", must=("PipelineConfig.seed",)),
    C("pipeline-gifs-negative", "pipeline", "--gifs", "-1", must=("PipelineConfig.gifs",)),
    C("pipeline-device-cuda", "pipeline", "--device", "cuda", must=("RuntimeConfig.device", "CUDA")),
    C("pipeline-bad-sim", "pipeline", "--sim.randomization.latency-prob", "2", must=("latency_prob",)),
    # --- bench
    C("bench-overwrite-replaces-as-whole", "bench", "--out", f"{T}/bench_done", "--overwrite", *BENCH, rc=0,
      changes=("bench_done",), check=_check_bench),
    C("bench-earlier-results-refused", "bench", "--out", f"{T}/bench_done", *BENCH,
      must=("bench_done", "not empty", "--overwrite")),
    C("bench-foreign-folder-refused", "bench", "--out", f"{T}/full", *BENCH, must=("full", "not empty", "--overwrite")),
    C("bench-out-is-file", "bench", "--out", f"{T}/file.txt", *BENCH, must=("file.txt", "not a folder")),
    C("bench-batch-size-zero", "bench", "--batch-sizes", "0", must=("BenchConfig.batch_sizes",)),
    C("bench-bullet-workers-negative", "bench", "--bullet-configs", "2", "-1", must=("BenchConfig.bullet_configs",)),
    C("bench-seconds-zero", "bench", "--seconds", "0", must=("BenchConfig.seconds",)),
    C("bench-threads-negative", "bench", "--threads", "-1", must=("BenchConfig.threads",)),
    C("bench-vision-missing", "bench", "--vision", f"{T}/nope.pt", must=("nope.pt", "BenchConfig.vision")),
    C("bench-policy-is-folder", "bench", "--policy", f"{T}/policy_run", must=("policy_run", "is a folder", "best.pt")),
    C("bench-old-vision-flag", "bench", "--vision-checkpoint", f"{T}/nope.pt", must=("--vision-checkpoint", "--vision")),
    C("bench-old-control-flag", "bench", "--control-checkpoint=x.pt", must=("--control-checkpoint", "--policy")),
    C("bench-device-cuda", "bench", "--device", "cuda", must=("BenchConfig.device", "CUDA")),
]


def _fill(argv: tuple[str, ...], w: Path) -> list[str]:
    return [a.replace(T, str(w)) for a in argv]


def _changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {k for k in set(before) | set(after) if before.get(k) != after.get(k)}


def _allowed(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p + os.sep) for p in prefixes)


def _cases() -> list:
    return [pytest.param(c, id=c.id) for c in CASES]


def test_cases_are_many_and_distinct():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    verbs = {c.argv[0] for c in CASES if c.argv}
    assert verbs >= {"show", "collect", "inspect", "train-vision", "eval-real", "dagger", "eval-sim", "pipeline", "bench"}


def run_case(case: Case, world: Path, capsys, caplog) -> tuple[str, str, set[str]]:
    """Run ``case`` in ``world`` and check its exit code, that no traceback shows and that the message names what
    it must; returns (all output and log, stderr, the paths that changed)."""
    caplog.set_level("INFO")
    before = snapshot(world)
    rc = run_cli(_fill(case.argv, world))
    out, err = capsys.readouterr()
    text = out + err + caplog.text
    assert "Traceback" not in text
    assert rc == case.rc, text[-3000:]
    for s in case.must:
        assert s.replace(T, str(world)) in text, (s, text[-3000:])
    return text, err, _changed(before, snapshot(world))


@pytest.mark.parametrize("case", _cases())
def test_bad_input(case: Case, world: Path, capsys, caplog):
    text, err, changed = run_case(case, world, capsys, caplog)
    if case.rc != 0:
        assert not changed, f"a refused input changed {sorted(changed)}"  # nothing written, nothing lost
        if case.ours:
            assert err.startswith(f"graspsim {case.argv[0]}: error: "), err
    else:
        assert all(_allowed(p, case.changes) for p in changed), sorted(changed)
    if case.check is not None:
        case.check(world, text)


# ------------------------------------------------------------------------------------------ as real processes
SUBPROCESS_CASES = [
    ("parse-time-missing-policy", ["eval-sim", "--policy", "{w}/nope.pt", "--out", "{w}/o"], "nope.pt"),
    ("parse-time-device-cuda", ["collect", "--out", "{w}/n.h5", "--device", "cuda"], "CUDA is not available"),
    ("out-is-a-file", ["eval-real", "--images", "{w}/images", "--vision", "{w}/vision.pt", "--out", "{w}/file.txt"],
     "not a folder"),
    ("damaged-dataset", ["inspect", "{w}/broken.h5", "--no-media"], "--repair"),
]


@pytest.mark.parametrize("argv,must", [pytest.param(a, m, id=i) for i, a, m in SUBPROCESS_CASES])
def test_bad_input_in_a_real_process(argv: list[str], must: str, world: Path):
    before = snapshot(world)
    proc = subprocess.run([sys.executable, "-m", "graspsim.cli", *[a.replace("{w}", str(world)) for a in argv]],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"graspsim {argv[0]}: error: ") and must in proc.stderr
    assert not _changed(before, snapshot(world))


# ------------------------------------------------------------------------------------------ faults in sequence
def test_damaged_dataset_repair_then_resume(world: Path, capsys):
    """A damaged part blocks --resume with a pointer to the repair; after it the run continues to the target."""
    from graspsim.dataset import describe, read_episodes

    assert run_cli(["collect", "--out", f"{world}/broken.h5", "--resume", "--episodes", "4", *COLLECT]) == 2
    assert "--repair" in capsys.readouterr().err
    assert run_cli(["inspect", f"{world}/broken.h5", "--no-media", "--repair"]) == 0
    assert run_cli(["collect", "--out", f"{world}/broken.h5", "--resume", "--episodes", "4", *COLLECT]) == 0
    first = [e.attrs["episode_index"] for e in read_episodes(world / "demos.h5")]
    scenes = [e.attrs["episode_index"] for e in read_episodes(world / "broken.h5")]
    assert describe(world / "broken.h5")["episodes"] == 4
    assert scenes[:2] == [first[0], first[2]] and len(set(scenes)) == 4  # kept episodes first; no scene repeated


def test_failed_collect_leaves_no_file_and_rerun_works(world: Path, monkeypatch, capsys):
    """A collect that fails after the file was started (here: the simulator raises) leaves nothing behind, so
    the same command runs again without --resume or --overwrite."""
    import graspsim.expert.collect as col

    def boom(*a, **k):
        raise ValueError("simulated failure")

    monkeypatch.setattr(col, "_run", boom)
    assert run_cli(["collect", "--out", f"{world}/n.h5", "--episodes", "2", *COLLECT]) == 2
    assert "simulated failure" in capsys.readouterr().err
    assert not [p for p in world.iterdir() if p.name.startswith(("n.h5", ".n.h5"))]
    monkeypatch.undo()
    assert run_cli(["collect", "--out", f"{world}/n.h5", "--episodes", "2", *COLLECT]) == 0


def test_collect_overwrite_keeps_the_old_file_until_the_new_one_is_complete(world: Path):
    from graspsim.expert.collect import CollectConfig, collect
    from graspsim import SimConfig
    from graspsim.dataset import describe

    old = hashlib.sha256((world / "demos.h5").read_bytes()).hexdigest()
    seen = []

    def during(info: dict) -> None:  # after every commit of the new run
        seen.append(hashlib.sha256((world / "demos.h5").read_bytes()).hexdigest())

    sim = SimConfig(image_size=32, max_steps=8, shadows=False)
    cfg = CollectConfig(out=world / "demos.h5", episodes=2, num_envs=1, seed=3, overwrite=True, sim=sim,
                        runtime=RuntimeConfig(progress=False))
    collect(cfg, progress_fn=during)
    assert seen and all(h == old for h in seen)  # the old file stayed whole while the new one was written
    assert describe(world / "demos.h5")["config"]["seed"] == 3

    # an overwrite that fails keeps the old file as it was
    before = hashlib.sha256((world / "demos.h5").read_bytes()).hexdigest()

    def fail(info: dict) -> None:
        raise RuntimeError("disk trouble")

    with pytest.raises(RuntimeError):
        collect(dataclasses.replace(cfg, seed=4), progress_fn=fail)
    assert hashlib.sha256((world / "demos.h5").read_bytes()).hexdigest() == before
    assert not [p for p in world.iterdir() if ".overwrite" in p.name]


def test_interrupted_eval_real_overwrite_keeps_the_earlier_outputs(world: Path, monkeypatch, capsys):
    """Ctrl-C halfway through writing the new outputs: exit 130, the earlier outputs are all still there."""
    import graspsim.vision.evaluate as ev

    calls = []
    real = ev.write_png

    def interrupted(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real(*a, **k)

    monkeypatch.setattr(ev, "write_png", interrupted)
    before = snapshot(world)
    rc = run_cli(["eval-real", "--images", f"{world}/images", "--vision", f"{world}/vision.pt", "--out",
                  f"{world}/er_done", "--overwrite"])
    assert rc == 130 and "interrupted" in capsys.readouterr().err
    assert not _changed(before, snapshot(world))  # no new file, no staging folder, nothing of er_done lost


def test_frame_averaged_metrics_are_not_dominated_by_one_big_frame():
    from graspsim.vision.metrics import frame_averaged

    # one 4000x3000 frame segmented perfectly, nine small frames missed entirely
    tp = np.array([12_000_000] + [0] * 9)
    fp = np.zeros(10, int)
    fn = np.array([0] + [50] * 9)
    pooled_iou = tp.sum() / (tp.sum() + fp.sum() + fn.sum())
    per = frame_averaged(tp, fp, fn, tp + fn)
    assert pooled_iou > 0.99 and per["iou"] == pytest.approx(0.1) and per["recall"] == pytest.approx(0.1)
    assert per["num_frames"] == 10 and per["num_frames_precision"] == 1 and per["precision"] == 1.0


@pytest.mark.parametrize("argv", [["--help"], ["show", "--help"]])
def test_a_reader_that_leaves_early_is_not_an_error(argv):
    """``graspsim show --help | head -1``: the reader closes the pipe before the help is written; the command ends
    quietly with 0, not with ``error: Broken pipe`` and exit 2 (issue 38)."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "graspsim.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # gone before the child has imported anything, so every write meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "Broken pipe" not in err and "Traceback" not in err, err
