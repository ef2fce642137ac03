"""``graspsim collect`` / ``graspsim inspect``: determinism, layout, resume, refusals, SIGKILL safety."""

from __future__ import annotations

import hashlib
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from graspsim.expert.collect import CollectConfig, collect
from graspsim.expert.inspect import InspectConfig, inspect
from graspsim.runtime import RuntimeConfig
from graspsim import FAILURE_NAMES, GraspEnv, SimConfig
from graspsim.dataset import describe, parts_dir

REPO = Path(__file__).resolve().parents[1]
SIM = SimConfig(image_size=16, shadows=False)  # small and fast; the pipeline is the same at 64x64


def small(out, **kw) -> CollectConfig:
    args = dict(out=out, episodes=4, num_envs=4, seed=3, runtime=RuntimeConfig(progress=False), sim=SIM)
    args.update(kw)
    return CollectConfig(**args)


def arrays(path) -> dict[str, np.ndarray]:
    out = {}
    with h5py.File(path, "r") as f:
        f["data"].visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
        for n in f["data"]:
            out[n + ".attrs"] = dict(f["data"][n].attrs)
    return out


def digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_same_seed_same_arrays_and_robomimic_layout(tmp_path):
    s1 = collect(small(tmp_path / "a.h5"))
    collect(small(tmp_path / "b.h5"))
    collect(small(tmp_path / "c.h5", seed=4, episodes=1, num_envs=1))
    a, b, c = arrays(tmp_path / "a.h5"), arrays(tmp_path / "b.h5"), arrays(tmp_path / "c.h5")
    assert a.keys() == b.keys()
    for k in a:
        if k.endswith(".attrs"):
            assert a[k] == b[k], k
        else:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert not np.array_equal(a["demo_0/obs/rgb"][:1], c["demo_0/obs/rgb"][:1])
    assert s1["episodes"] == 4 and s1["new_episodes"] == 4 and s1["steps"] == s1["new_steps"]
    assert sum(s1["failures"].values()) == 4 and set(s1["failures"]) <= set(FAILURE_NAMES)

    with h5py.File(tmp_path / "a.h5", "r") as f:  # the way robomimic reads it
        names = sorted(f["data"].keys(), key=lambda n: int(n[5:]))
        assert names == [f"demo_{k}" for k in range(4)]
        env_args = json.loads(f["data"].attrs["env_args"])
        assert env_args["env_name"] == "graspsim/WristGrasp-v0" and env_args["env_kwargs"]["cfg"]["image_size"] == 16
        assert json.loads(f.attrs["config"]) == json.loads(json.dumps(small(tmp_path / "a.h5").to_dict()))
        total = 0
        for n in names:
            g = f["data"][n]
            T = int(g.attrs["num_samples"])
            total += T
            assert g["obs/rgb"].shape == (T, 16, 16, 3) and g["obs/rgb"].dtype == np.uint8
            assert g["obs/mask"].shape == (T, 16, 16) and set(np.unique(g["obs/mask"][()])) <= {0, 1}
            assert g["obs/gripper"].shape == (T, 3) and g["actions"].shape == (T, 4) and g["actions"].dtype == np.float32
            assert g["dones"][-1] == 1 and g["dones"][:-1].sum() == 0
            assert g["rewards"][-1] == float(g.attrs["success"]) and bool(g.attrs["success"]) == (g.attrs["failure"] == "success")
            # the stored seed rebuilds the scene the episode started from
            env = GraspEnv(SIM, num_envs=1, seed=int(g.attrs["seed"]))
            np.testing.assert_allclose(env.state.sphere_pos[0].numpy(), g["privileged/sphere_pos"][0], atol=1e-6)
            np.testing.assert_allclose(env.state.tcp_pos[0].numpy(), g["privileged/tcp_pos"][0], atol=1e-6)
        assert int(f["data"].attrs["total"]) == total


def test_split_draws_are_the_seeded_stream_of_the_run_seed():
    """graspsim.seeds.split_draws gives the values collect always used for its train/valid split."""
    from graspsim.seeds import split_draws

    np.testing.assert_array_equal(split_draws(5, 10), np.random.default_rng([5, 7919]).random(10))
    np.testing.assert_array_equal(split_draws(5, 4), split_draws(5, 10)[:4])


def test_noise_keeps_labels_clean(tmp_path):
    collect(small(tmp_path / "n.h5", noise=0.01, episodes=2, num_envs=2))
    with h5py.File(tmp_path / "n.h5", "r") as f:
        g = f["data/demo_0"]
        label, executed = g["actions"][()], g["executed_actions"][()]
        assert not np.allclose(label[:, :3], executed[:, :3])
        np.testing.assert_array_equal(label[:, 3], executed[:, 3])
        assert np.abs(executed[:, :3]).max() <= SIM.max_speed + 1e-6


def test_resume_and_refusals(tmp_path):
    path = tmp_path / "r.h5"
    collect(small(path, episodes=3))
    first = arrays(path)
    d0 = digest(path)
    with pytest.raises(FileExistsError):
        collect(small(path, episodes=5))
    with pytest.raises(ValueError, match="noise"):
        collect(small(path, episodes=5, resume=True, noise=0.01))
    with pytest.raises(ValueError, match="num_envs"):
        collect(small(path, episodes=5, resume=True, num_envs=2))
    assert digest(path) == d0
    s = collect(small(path, episodes=5, resume=True, valid_fraction=0.4))
    assert s["episodes"] == 5 and s["new_episodes"] == 2
    keys = describe(path)["filter_keys"]
    assert keys["train"] + keys["valid"] == 5 and keys["valid"] >= 1
    after = arrays(path)
    for k, v in first.items():  # finished episodes are kept as they were
        if not k.endswith(".attrs"):
            np.testing.assert_array_equal(after[k], v, err_msg=k)
    attrs = [after[f"demo_{k}.attrs"] for k in range(5)]
    # the resumed run collects the missing indices of the train stream: the file holds episodes 0..4
    assert sorted(a["episode_index"] for a in attrs) == list(range(5))
    assert collect(small(path, episodes=4, resume=True))["new_episodes"] == 0

    with pytest.raises(ValueError, match="episodes"):
        small(path, episodes=0)
    with pytest.raises(ValueError, match="out"):
        small(tmp_path / "x.txt")
    with pytest.raises(FileNotFoundError):
        collect(small(tmp_path / "nope" / "x.h5"))
    corrupt = tmp_path / "corrupt.h5"
    corrupt.write_bytes(Path(path).read_bytes()[:5000])
    dc = digest(corrupt)
    with pytest.raises(ValueError, match="corrupt.h5"):
        collect(small(corrupt, resume=True))
    assert digest(corrupt) == dc


def test_inspect_writes_sheet_and_gif(tmp_path):
    path = tmp_path / "i.h5"
    collect(small(path, episodes=2))
    s = inspect(InspectConfig(path=path, out=tmp_path / "viz", demo=1, frames=6))
    assert s["episodes"] == 2 and s["arrays"]["obs/rgb"]["dtype"] == "uint8"
    from PIL import Image

    sheet = Image.open(s["png"])
    assert sheet.size[0] > 6 * 16 and Image.open(s["gif"]).n_frames == int(h5py.File(path)["data/demo_1"].attrs["num_samples"])
    with pytest.raises(ValueError, match="demo"):
        inspect(InspectConfig(path=path, demo=5))
    with pytest.raises(FileNotFoundError):
        inspect(InspectConfig(path=tmp_path / "missing.h5"))


def _committed(path) -> int:
    if not path.exists():
        return 0
    with h5py.File(path, "r") as f:
        return len(f["data"])


@pytest.mark.slow  # ~30-90 s: five interpreter start-ups (the fast per-event kill test is in test_dataset.py)
def test_sigkill_at_random_moments_then_resume(tmp_path):
    """Kill ``graspsim collect`` with SIGKILL at random moments (once during start-up, then at a random
    delay after it has committed something new); the file always opens with plain h5py, never loses a
    committed episode, and ``--resume`` reaches the target without repeating scenes."""
    path, target = tmp_path / "k.h5", 60
    cmd = [sys.executable, "-m", "graspsim.cli", "collect", "--out", str(path), "--episodes", str(target),
           "--num-envs", "6", "--seed", "5", "--no-progress", "--sim.image-size", "16", "--sim.no-shadows"]
    rng = random.Random(1234)
    counts = []
    for i in range(4):
        proc = subprocess.Popen(cmd + (["--resume"] if i else []), cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        if i == 0:
            time.sleep(rng.uniform(0.2, 1.5))
        else:
            deadline = time.monotonic() + 180
            while _committed(path) <= counts[-1] and proc.poll() is None:
                assert time.monotonic() < deadline, "collect made no progress"
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 1.0))
        finished = proc.poll() is not None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if path.exists():
            with h5py.File(path, "r") as f:  # plain h5py, no recovery step
                names = sorted(f["data"].keys(), key=lambda n: int(n[5:]))
                assert names == [f"demo_{k}" for k in range(len(names))]
                for n in names:
                    assert f["data"][n]["obs/rgb"].shape[0] == int(f["data"][n].attrs["num_samples"])
        counts.append(_committed(path))
        if finished:
            break
    assert counts == sorted(counts), counts  # a kill never loses committed episodes
    assert counts[-1] > counts[1] > 0, counts
    done = subprocess.run(cmd + ["--resume"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    info = describe(path)
    assert info["episodes"] == target and info["consolidated"] and not parts_dir(path).exists()
    scenes = [a["episode_index"] for a in _attrs(path)]
    assert sorted(scenes) == list(range(target))  # killed and resumed: the same scenes as one run
    assert not [p for p in tmp_path.iterdir() if p.name != "k.h5"]  # no temporary files left behind


def _attrs(path):
    with h5py.File(path, "r") as f:
        return [dict(f["data"][n].attrs) for n in sorted(f["data"].keys(), key=lambda n: int(n[5:]))]


@pytest.mark.slow
def test_expert_success_over_300_seeded_scenes(tmp_path):
    s = collect(CollectConfig(out=tmp_path / "e.h5", episodes=300, num_envs=64, seed=11, runtime=RuntimeConfig(progress=False),
                              sim=SimConfig(image_size=16, shadows=False)))
    assert s["success_rate"] >= 0.99, s["failures"]


def test_interrupt_keeps_committed_episodes_and_resume_completes(tmp_path):
    path = tmp_path / "c.h5"

    def stop(stats):
        raise KeyboardInterrupt  # what Ctrl-C does, right after the first commit

    with pytest.raises(KeyboardInterrupt):
        collect(small(path, episodes=8), progress_fn=stop)
    info = describe(path)
    assert 1 <= info["episodes"] < 8 and info["consolidated"]
    assert collect(small(path, episodes=8, resume=True))["episodes"] == 8


def test_robomimic_sequence_dataset_reads_the_file(tmp_path):
    """robomimic's own loader (skipped when robomimic is not installed; it is not a dependency)."""
    pytest.importorskip("robomimic.utils.dataset")
    import robomimic.utils.obs_utils as ObsUtils
    from robomimic.utils.dataset import SequenceDataset

    path = tmp_path / "rm.h5"
    collect(small(path, episodes=3))
    ObsUtils.initialize_obs_modality_mapping_from_dict({"low_dim": ["gripper"], "rgb": ["rgb"]})
    data = SequenceDataset(
        hdf5_path=str(path), obs_keys=("rgb", "gripper"), dataset_keys=("actions", "rewards", "dones"),
        load_next_obs=False, frame_stack=1, seq_length=5, pad_frame_stack=True, pad_seq_length=True,
        get_pad_mask=False, goal_mode=None, hdf5_cache_mode="low_dim", hdf5_use_swmr=True,
        hdf5_normalize_obs=False, filter_by_attribute=None,
    )
    assert len(data) == describe(path)["steps"]
    item = data[0]
    assert item["obs"]["rgb"].shape == (5, 16, 16, 3) and item["actions"].shape == (5, 4)
