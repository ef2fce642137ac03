"""export-dataset (graspsim.dataset.lerobot): a LeRobotDataset v3.0 folder read back with pyarrow and PyAV only.

The round trips compare every exported value with the HDF5 source: PNG frames bit-exact, video frames within
:data:`VIDEO_MAE` / :data:`VIDEO_FRAME_MAE`, everything else exact, and the statistics recomputed here from the
read-back values with numpy. Bad inputs go through the real ``graspsim`` entry point: exit 2, one line naming the
problem, nothing written. Small on purpose: two expert files of two 8-step episodes at 32x32.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import av  # the lerobot extra, part of the test extra
import cv2
import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from graspsim.dataset import Episode, EpisodeWriter, read_episodes
from graspsim.dataset import lerobot as lr
from graspsim.cli import main

VIDEO_MAE = 8.0
"""Largest mean absolute difference (0-255 levels) over all pixels of all frames between a decoded video and its
source at the codecs' default crf (measured on these 32x32 frames: 5.2 for av1 at crf 30, 5.4 for h264 at crf 23)."""
VIDEO_FRAME_MAE = 14.0
"""Largest mean absolute difference of any one frame (measured: 8.2 for av1, 8.1 for h264)."""


def _collect(path: Path, seed: int, **sim) -> Path:
    from graspsim.expert.collect import CollectConfig, collect
    from graspsim.runtime import RuntimeConfig
    from graspsim import SimConfig

    cfg = SimConfig(**{"image_size": 32, "max_steps": 8, "shadows": False, **sim})
    collect(CollectConfig(out=path, episodes=2, num_envs=2, seed=seed, sim=cfg, runtime=RuntimeConfig(progress=False)))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lerobot")
    out = {"a": _collect(root / "a.h5", 0), "b": _collect(root / "b.h5", 1),
           "steps12": _collect(root / "steps12.h5", 2, max_steps=12), "size16": _collect(root / "size16.h5", 3, image_size=16)}
    with h5py.File(out["a"], "r") as f:
        config = json.loads(f.attrs["config"])
    # an interrupted file: its episodes still live in part files beside it
    with EpisodeWriter(root / "interrupted.h5", config, consolidate=False) as w:
        for ep in read_episodes(out["a"]):
            w.append([ep])
    out["interrupted"] = root / "interrupted.h5"
    # a DAgger-style file: masks and gripper senses only, the config nested under "dagger"
    dag = root / "iter_000.h5"
    with EpisodeWriter(dag, {"dagger": {"sim": config["sim"]}, "iteration": 0, "beta": 1.0}) as w:
        w.append([Episode(obs={"mask": ep.obs["mask"], "gripper": ep.obs["gripper"]}, actions=ep.actions,
                          attrs=ep.attrs) for ep in read_episodes(out["a"])])
    out["dagger"] = dag
    # a file whose second episode has a NaN action (the writer refuses one, so it is put in afterwards)
    shutil.copy(out["a"], root / "nan.h5")
    with h5py.File(root / "nan.h5", "r+") as f:
        f["data/demo_1/actions"][1, 0] = np.nan
    out["nan"] = root / "nan.h5"
    # a robomimic-layout file that graspsim did not write, and a file that is not HDF5 at all
    with h5py.File(root / "foreign.h5", "w") as f:
        g = f.create_group("data/demo_0")
        g.attrs["num_samples"] = 3
        g.create_dataset("obs/rgb", data=np.zeros((3, 32, 32, 3), np.uint8))
        g.create_dataset("actions", data=np.zeros((3, 4), np.float32))
    out["foreign"] = root / "foreign.h5"
    (root / "garbage.h5").write_bytes(b"not hdf5")
    out["garbage"] = root / "garbage.h5"
    return out


# ------------------------------------------------------------------------------------------ reading back
def _table(folder: Path, pattern: str):
    paths = sorted(folder.glob(pattern))
    assert paths, f"no {pattern} in {folder}"
    return pa.concat_tables([pq.read_table(p) for p in paths])


def _source(paths: list[Path]) -> list[tuple[Path, str, Episode]]:
    return [(p, f"demo_{k}", ep) for p in paths for k, ep in enumerate(read_episodes(p))]


def _decode_video(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """All frames N,H,W,3 uint8 and their presentation times N (s) of an mp4."""
    frames, times = [], []
    with av.open(str(path)) as c:
        for fr in c.decode(c.streams.video[0]):
            frames.append(fr.to_ndarray(format="rgb24"))
            times.append(float(fr.pts * fr.time_base))
    return np.stack(frames), np.array(times)


def _inverted_cdf_stats(x: np.ndarray) -> dict[str, np.ndarray]:
    x = x.astype(np.float64)
    out = {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0)}
    for q, name in zip((0.01, 0.10, 0.50, 0.90, 0.99), ("q01", "q10", "q50", "q90", "q99")):
        out[name] = np.quantile(x, q, axis=0, method="inverted_cdf")
    return out


def _check_stats(stats: dict, key: str, values: np.ndarray, image: bool = False) -> None:
    """Recompute ``key``'s statistics from ``values`` (N,*shape; images N,H,W,3 uint8) and compare with stats.json."""
    if image:
        mine = _inverted_cdf_stats(values.reshape(-1, 3) / 255.0)
        mine = {k: v.reshape(3, 1, 1) for k, v in mine.items()}
    else:
        mine = _inverted_cdf_stats(values)
    got = stats[key]
    assert got["count"] == [len(values)], key
    for name, v in mine.items():
        np.testing.assert_allclose(np.array(got[name], np.float64), v, rtol=1e-9, atol=1e-12, err_msg=f"{key} {name}")


def _check_export(out: Path, paths: list[Path], images: str, privileged: bool) -> dict:
    """Everything but the image pixels, exactly; returns what the image checks need."""
    src = _source(paths)
    info = json.loads((out / "meta/info.json").read_text())
    stats = json.loads((out / "meta/stats.json").read_text())
    total = sum(ep.num_samples for _, _, ep in src)
    assert info["codebase_version"] == "v3.0" and info["fps"] == 10
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (len(src), total, 1)
    assert info["splits"] == {"train": f"0:{len(src)}"}
    feats = info["features"]
    assert feats[lr.IMAGE_KEY]["dtype"] == ("video" if images == "video" else "image")
    assert feats[lr.IMAGE_KEY]["shape"] == [32, 32, 3]
    assert feats[lr.STATE_KEY]["names"] == ["finger_gap", "last_close_cmd", "table_contact"]
    assert feats[lr.ACTION_KEY]["names"] == ["vx", "vy", "vz", "grip"]
    assert feats[lr.MASK_KEY] == {"dtype": "bool", "shape": [32, 32], "names": ["height", "width"]}
    assert any(k.startswith("privileged.") for k in feats) == privileged
    assert not any(k.startswith("observation.") for k in feats if "privileged" in k)

    data = _table(out, "data/*/*.parquet").to_pydict()
    eps = _table(out, "meta/episodes/*/*.parquet").to_pydict()
    assert len(data["index"]) == total and data["index"] == list(range(total))
    assert eps["episode_index"] == list(range(len(src)))
    at = 0
    for e, (path, demo, ep) in enumerate(src):
        T = ep.num_samples
        rows = slice(at, at + T)
        assert eps["length"][e] == T and (eps["dataset_from_index"][e], eps["dataset_to_index"][e]) == (at, at + T)
        assert eps["seed"][e] == ep.attrs["seed"] and eps["success"][e] == bool(ep.attrs["success"])
        assert eps["failure"][e] == ep.attrs["failure"] and eps["tasks"][e] == [lr.DEFAULT_TASK]
        assert (eps["source_file"][e], eps["source_demo"][e]) == (str(path), demo)
        assert data["episode_index"][rows] == [e] * T and data["frame_index"][rows] == list(range(T))
        assert np.array_equal(np.array(data["timestamp"][rows], np.float32), (np.arange(T) / 10).astype(np.float32))
        assert np.array_equal(np.array(data[lr.STATE_KEY][rows], np.float32), ep.obs["gripper"])
        assert np.array_equal(np.array(data[lr.ACTION_KEY][rows], np.float32), ep.actions)
        assert np.array_equal(np.array(data[lr.MASK_KEY][rows], bool), ep.obs["mask"] != 0)
        assert data[lr.DONE_KEY][rows] == [False] * (T - 1) + [True]
        assert data[lr.SUCCESS_KEY][rows] == [False] * (T - 1) + [bool(ep.attrs["success"])]
        assert np.array_equal(np.array(data[lr.REWARD_KEY][rows], np.float32), ep.extras["rewards"])
        if privileged:
            for k, v in ep.privileged.items():
                got = np.array(data[lr.PRIVILEGED_PREFIX + k][rows])
                assert np.array_equal(got, v.astype(got.dtype)) and (got.dtype == bool) == (k == "held"), k
        at += T
    for key in (lr.STATE_KEY, lr.ACTION_KEY, lr.MASK_KEY, lr.DONE_KEY, lr.SUCCESS_KEY, "timestamp", "index"):
        values = np.array(data[key])
        _check_stats(stats, key, values.reshape(len(values), *feats[key]["shape"]))
    tasks = pq.read_table(out / "meta/tasks.parquet")
    assert tasks.to_pydict() == {"task": [lr.DEFAULT_TASK], "task_index": [0]}
    assert json.loads(tasks.schema.metadata[b"pandas"])["index_columns"] == ["task"]
    side = json.loads((out / lr.SIDECAR).read_text())
    for p, entry in zip(paths, side["files"]):
        with h5py.File(p, "r") as f:
            assert entry["config"] == json.loads(f.attrs["config"]) and entry["path"] == str(p)
    return {"src": src, "data": data, "eps": eps, "info": info, "stats": stats}


def test_png_export_round_trips_bit_exact(files, tmp_path):
    out = tmp_path / "png"
    summary = lr.export_lerobot([files["a"], files["b"]], out, images="png", privileged=True)
    got = _check_export(out, [files["a"], files["b"]], "png", privileged=True)
    assert summary["episodes"] == 4 and not (out / "videos").exists() and got["info"]["video_path"] is None
    frames = np.stack([cv2.imdecode(np.frombuffer(c["bytes"], np.uint8), cv2.IMREAD_UNCHANGED)[..., ::-1]
                       for c in got["data"][lr.IMAGE_KEY]])
    source = np.concatenate([ep.obs["rgb"] for _, _, ep in got["src"]])
    assert frames.dtype == np.uint8 and np.array_equal(frames, source)  # bit-exact
    _check_stats(got["stats"], lr.IMAGE_KEY, frames, image=True)


@pytest.mark.parametrize("codec", ["av1", "h264"])
def test_video_export_round_trips_within_tolerance(files, tmp_path, codec):
    out = tmp_path / codec
    lr.export_lerobot([files["a"], files["b"]], out, images="video", codec=codec)
    got = _check_export(out, [files["a"], files["b"]], "video", privileged=False)
    assert lr.IMAGE_KEY not in got["data"]
    info = got["info"]["features"][lr.IMAGE_KEY]["info"]
    assert info["video.codec"] == {"av1": "av1", "h264": "h264"}[codec] and info["video.fps"] == 10
    frames, times = _decode_video(out / f"videos/{lr.IMAGE_KEY}/chunk-000/file-000.mp4")
    source = np.concatenate([ep.obs["rgb"] for _, _, ep in got["src"]])
    assert frames.shape == source.shape
    err = np.abs(frames.astype(np.int16) - source.astype(np.int16))
    assert err.mean() <= VIDEO_MAE and err.reshape(len(err), -1).mean(1).max() <= VIDEO_FRAME_MAE, err.mean()
    # each frame sits where LeRobot looks for it: from_timestamp of its episode + its own timestamp
    eps, data = got["eps"], got["data"]
    want = np.concatenate([eps[f"videos/{lr.IMAGE_KEY}/from_timestamp"][e] + np.arange(n) / 10
                           for e, n in enumerate(eps["length"])])
    assert np.abs(times - want).max() < 1e-6
    assert eps[f"videos/{lr.IMAGE_KEY}/to_timestamp"][-1] == pytest.approx(len(data["index"]) / 10)
    _check_stats(got["stats"], lr.IMAGE_KEY, source, image=True)  # stats describe the source frames


def test_files_roll_over_at_the_size_limits(files, tmp_path, monkeypatch):
    """With tiny limits the episodes spread over several data and video files (and chunk folders); every frame is
    still found where the episode table says. Data files roll at each episode; video files once the encoder has
    handed out bytes (it holds a few frames back), so an mp4 may hold more than one episode."""
    monkeypatch.setattr(lr, "DATA_FILE_MB", 1e-6)
    monkeypatch.setattr(lr, "VIDEO_FILE_MB", 1e-6)
    monkeypatch.setattr(lr, "CHUNKS_SIZE", 3)  # a chunk folder holds three files
    out = tmp_path / "roll"
    lr.export_lerobot([files["a"], files["b"]], out, images="video")
    eps = _table(out, "meta/episodes/*/*.parquet").to_pydict()
    where = list(zip(eps["data/chunk_index"], eps["data/file_index"]))
    assert where == [(0, 0), (0, 1), (0, 2), (1, 0)]
    vkey = f"videos/{lr.IMAGE_KEY}"
    vwhere = list(zip(eps[f"{vkey}/chunk_index"], eps[f"{vkey}/file_index"]))
    assert vwhere == sorted(vwhere) and len(set(vwhere)) > 1
    src = _source([files["a"], files["b"]])
    decoded = {}
    for e, ((c, f), (vc, vf)) in enumerate(zip(where, vwhere)):
        ep = src[e][2]
        rows = pq.read_table(out / lr.DATA_PATH.format(chunk_index=c, file_index=f)).to_pydict()
        assert rows["episode_index"] == [e] * ep.num_samples
        if (vc, vf) not in decoded:
            decoded[vc, vf] = _decode_video(out / lr.VIDEO_PATH.format(video_key=lr.IMAGE_KEY, chunk_index=vc,
                                                                       file_index=vf))
        frames, times = decoded[vc, vf]
        t0 = eps[f"{vkey}/from_timestamp"][e]
        first = e == 0 or vwhere[e - 1] != (vc, vf)
        assert (t0 == 0.0) == first
        k = int(round(t0 * 10))
        assert np.abs(times[k:k + ep.num_samples] - (t0 + np.arange(ep.num_samples) / 10)).max() < 1e-6
        assert np.abs(frames[k:k + ep.num_samples].astype(np.int16) - ep.obs["rgb"]).mean() <= VIDEO_MAE


def test_dagger_files_export_without_images(files, tmp_path):
    out = tmp_path / "dag"
    lr.export_lerobot([files["dagger"]], out)
    info = json.loads((out / "meta/info.json").read_text())
    assert lr.IMAGE_KEY not in info["features"] and info["video_path"] is None and info["fps"] == 10
    data = _table(out, "data/*/*.parquet").to_pydict()
    masks = np.concatenate([ep.obs["mask"] for ep in read_episodes(files["dagger"])]) != 0
    assert np.array_equal(np.array(data[lr.MASK_KEY], bool), masks)


def test_overwrite_replaces_an_export_as_a_whole(files, tmp_path):
    out = tmp_path / "o"
    lr.export_lerobot([files["a"], files["b"]], out, images="png")
    (out / "notes.txt").write_text("mine")
    lr.export_lerobot([files["a"]], out, images="video", overwrite=True)
    info = json.loads((out / "meta/info.json").read_text())
    assert info["total_episodes"] == 2 and (out / "videos").is_dir() and (out / "notes.txt").read_text() == "mine"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


# ------------------------------------------------------------------------------------------ bad input (the CLI)
def _run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code or 0)


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("case,must", [
    ("interrupted", ("interrupted.h5", "unfinished", "--repair")),
    ("foreign", ("foreign.h5", "not a graspsim episode file")),
    ("garbage", ("garbage.h5", "not a readable HDF5")),
    ("steps12", ("steps12.h5", "other simulator settings", "sim.max_steps")),
    ("size16", ("size16.h5", "different observations", "obs/rgb", "[32, 32, 3]", "[16, 16, 3]")),
    ("dagger", ("iter_000.h5", "different observations", "obs/rgb")),
    ("missing", ("nope.h5", "no such episode file")),
    ("twice", ("a.h5", "given twice")),
    ("existing-out", ("not empty", "--overwrite")),
    ("nan", ("nan.h5", "demo_1", "action", "NaN")),
])
def test_bad_input_is_refused_and_writes_nothing(files, tmp_path, capsys, case, must):
    out = tmp_path / "out"
    second = {"missing": tmp_path / "nope.h5", "twice": files["a"]}.get(case, files.get(case))
    if case == "existing-out":
        out.mkdir()
        (out / "keep.txt").write_text("mine")
        second = files["b"]
    before = _tree(tmp_path)
    rc = _run(["export-dataset", str(files["a"]), str(second), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    assert err.startswith("graspsim export-dataset: error: ") and len(err.strip().splitlines()) == 1, err
    for s in must:
        assert s in err, (s, err)
    assert _tree(tmp_path) == before  # nothing written, not even an empty --out


def test_empty_file_list_is_refused(tmp_path, capsys):
    rc = _run(["export-dataset", "--out", str(tmp_path / "o")])
    out, err = capsys.readouterr()
    assert rc == 2 and "Traceback" not in out + err and not (tmp_path / "o").exists()


def test_missing_extra_is_one_line_at_parse_time(files, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "av", None)  # "import av" now raises ImportError
    rc = _run(["export-dataset", str(files["a"]), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and err.strip().splitlines() == [err.strip()] and "Traceback" not in err
    assert "'lerobot' extra" in err and "pip install 'graspsim[lerobot]'" in err
    assert not (tmp_path / "o").exists()


def test_a_failure_midway_leaves_nothing_half_written(files, tmp_path, capsys, monkeypatch):
    calls = []

    def failing_png(im):
        calls.append(1)
        if len(calls) > 20:  # in the third episode
            raise OSError(28, "No space left on device")
        return b"png"

    monkeypatch.setattr(lr, "_png", failing_png)
    rc = _run(["export-dataset", str(files["a"]), str(files["b"]), "--out", str(tmp_path / "o"), "--images", "png",
               "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "No space left on device" in err and len(calls) > 20
    assert os.listdir(tmp_path) == []  # no --out, no staging folder beside it


def test_wrist_episodes_export_with_the_wrist_names(files, tmp_path):
    from graspsim import SimConfig

    d = SimConfig(image_size=32, max_steps=8, shadows=False).to_dict()
    d["target"]["kinds"] = ["cube"]
    cube = _collect(tmp_path / "cube.h5", 5, target=SimConfig.from_dict(d).target)
    out = tmp_path / "cube"
    lr.export_lerobot([cube], out, images="png")
    feats = json.loads((out / "meta/info.json").read_text())["features"]
    assert feats[lr.ACTION_KEY]["names"] == ["vx", "vy", "vz", "wz", "grip"] and feats[lr.ACTION_KEY]["shape"] == [5]
    assert feats[lr.STATE_KEY]["names"][3:] == ["wrist_sin", "wrist_cos", "fingertip_x", "fingertip_y",
                                                "fingertip_up_x", "fingertip_up_y"]
    data = _table(out, "data/*/*.parquet").to_pydict()
    actions = np.concatenate([ep.actions for ep in read_episodes(cube)])
    assert np.array_equal(np.array(data[lr.ACTION_KEY], np.float32), actions)
    with pytest.raises(ValueError, match="store different observations"):  # sphere and wrist files do not mix
        lr.export_lerobot([files["a"], cube], tmp_path / "mixed")
