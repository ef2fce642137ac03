"""Episode files (graspsim.dataset): layout as robomimic reads it, round trips, refusals, crash safety."""

from __future__ import annotations

import hashlib
import json
import os
import signal

import h5py
import numpy as np
import pytest
import torch

from graspsim import dataset as ds
from graspsim import fileio
from graspsim.dataset import Episode, EpisodeRecorder, EpisodeWriter, describe, load_steps, read_episodes
from graspsim.dataset import writer as ds_writer  # where the writer looks up what the crash tests patch

CONFIG = {"seed": 1, "episodes": 10, "sim": {"image_size": 8, "max_steps": 20}}


def make_episode(T: int, k: int, size: int = 8) -> Episode:
    rng = np.random.default_rng(k)
    return Episode(
        obs={
            "rgb": rng.integers(0, 256, (T, size, size, 3), dtype=np.uint8),
            "mask": rng.random((T, size, size)) < 0.1,  # bool: stored as uint8
            "gripper": rng.random((T, 2), dtype=np.float32),
        },
        actions=rng.standard_normal((T, 4)).astype(np.float32),
        privileged={"tcp_pos": rng.random((T, 3), dtype=np.float32), "held": rng.random(T) < 0.5},
        extras={"rewards": np.arange(T, dtype=np.float32)},
        attrs={"success": bool(k % 2), "failure": "success" if k % 2 else "timeout", "seed": 1000 + k},
    )


def file_digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def robomimic_read(path):
    """Read the file the way robomimic's dataset code does, with plain h5py."""
    with h5py.File(path, "r") as f:
        demos = sorted(f["data"].keys(), key=lambda n: int(n[5:]))
        env_args = json.loads(f["data"].attrs["env_args"])
        out = []
        for n in demos:
            g = f[f"data/{n}"]
            out.append({
                "name": n, "num_samples": int(g.attrs["num_samples"]),
                "obs": {k: g[f"obs/{k}"][()] for k in g["obs"]}, "actions": g["actions"][()],
            })
        return out, env_args, json.loads(f.attrs["config"]), int(f["data"].attrs["total"])


def test_round_trip_and_robomimic_layout(tmp_path):
    path = tmp_path / "d.h5"
    eps = [make_episode(T, k) for k, T in enumerate([3, 7, 1, 12])]
    with EpisodeWriter(path, CONFIG) as w:
        assert w.append(eps[:2]) == ["demo_0", "demo_1"]
        assert w.append(eps[2:]) == ["demo_2", "demo_3"]
        assert w.num_episodes == 4 and w.num_steps == 23
    assert not ds.parts_dir(path).exists()  # consolidated into one file on close
    demos, env_args, config, total = robomimic_read(path)
    assert [d["name"] for d in demos] == ["demo_0", "demo_1", "demo_2", "demo_3"]
    assert config == CONFIG and total == 23
    assert set(env_args) == {"env_name", "type", "env_kwargs"}
    for d, ep in zip(demos, eps):
        assert d["num_samples"] == ep.num_samples == len(d["actions"])
        np.testing.assert_array_equal(d["actions"], ep.actions)
        assert d["obs"]["mask"].dtype == np.uint8 and set(np.unique(d["obs"]["mask"])) <= {0, 1}
        np.testing.assert_array_equal(d["obs"]["mask"], ep.obs["mask"].astype(np.uint8))
        np.testing.assert_array_equal(d["obs"]["rgb"], ep.obs["rgb"])
    back = list(read_episodes(path))
    for a, b in zip(back, eps):
        assert a.attrs == b.attrs
        np.testing.assert_array_equal(a.privileged["tcp_pos"], b.privileged["tcp_pos"])
        np.testing.assert_array_equal(a.privileged["held"], b.privileged["held"].astype(np.uint8))
        np.testing.assert_array_equal(a.extras["rewards"], b.extras["rewards"])
    with h5py.File(path, "r") as f:
        assert f.attrs["format"] == ds.FORMAT and f["data/demo_3/obs/rgb"].compression == "gzip"
    info = describe(path)
    assert info["episodes"] == 4 and info["steps"] == 23 and info["success_rate"] == 0.5
    assert info["failures"] == {"success": 2, "timeout": 2} and info["median_steps_success"] == 9.5


def test_load_steps_concatenates_in_demo_order(tmp_path):
    path = tmp_path / "d.h5"
    eps = [make_episode(T, k) for k, T in enumerate([4, 2, 5])]
    with EpisodeWriter(path, CONFIG) as w:
        w.append(eps)
    s = load_steps(path, obs_keys=("mask", "gripper"), extra_keys=("rewards",))
    np.testing.assert_array_equal(s["actions"], np.concatenate([e.actions for e in eps]))
    np.testing.assert_array_equal(s["mask"], np.concatenate([e.obs["mask"] for e in eps]).astype(np.uint8))
    np.testing.assert_array_equal(s["episode"], [0] * 4 + [1] * 2 + [2] * 5)
    np.testing.assert_array_equal(s["step"], [0, 1, 2, 3, 0, 1, 0, 1, 2, 3, 4])
    np.testing.assert_array_equal(s["rewards"], np.concatenate([e.extras["rewards"] for e in eps]))
    with pytest.raises(KeyError, match="nope"):
        load_steps(path, obs_keys=("nope",))
    sub = list(read_episodes(path, keys=["gripper"], demos=[2]))
    assert len(sub) == 1 and set(sub[0].obs) == {"gripper"} and sub[0].num_samples == 5


def test_unconsolidated_file_is_readable_from_any_cwd(tmp_path, monkeypatch):
    path = tmp_path / "d.h5"
    w = EpisodeWriter(path, CONFIG)
    w.append([make_episode(3, 0)])
    w.append([make_episode(4, 1)])
    assert ds.parts_dir(path).is_dir()
    monkeypatch.chdir("/")
    demos, _, _, total = robomimic_read(path)  # plain h5py, external links resolved beside the file
    assert [d["num_samples"] for d in demos] == [3, 4] and total == 7
    assert describe(path)["consolidated"] is False
    w.close()
    assert describe(path)["consolidated"] is True and not ds.parts_dir(path).exists()


def test_refusals_leave_existing_file_untouched(tmp_path):
    path = tmp_path / "d.h5"
    with EpisodeWriter(path, CONFIG) as w:
        w.append([make_episode(3, 0)])
    digest = file_digest(path)
    with pytest.raises(FileExistsError, match="resume"):
        EpisodeWriter(path, CONFIG)
    with pytest.raises(ValueError, match="sim.image_size"):
        EpisodeWriter(path, {**CONFIG, "sim": {"image_size": 16, "max_steps": 20}}, resume=True)
    with pytest.raises(ValueError, match="resume or overwrite"):
        EpisodeWriter(path, CONFIG, resume=True, overwrite=True)
    with pytest.raises(FileNotFoundError, match="folder"):
        EpisodeWriter(tmp_path / "missing" / "x.h5", CONFIG)
    with pytest.raises(ValueError, match="directory"):
        EpisodeWriter(tmp_path, CONFIG)
    with pytest.raises(ValueError, match="JSON"):
        EpisodeWriter(tmp_path / "y.h5", {"a": object()})
    with EpisodeWriter(path, CONFIG, resume=True) as w:  # wrong shapes are refused before writing
        with pytest.raises(ValueError, match="obs/rgb"):
            w.append([make_episode(3, 1, size=16)])
        with pytest.raises(ValueError, match="rows"):
            bad = make_episode(3, 1)
            bad.obs["gripper"] = bad.obs["gripper"][:2]
            w.append([bad])
        with pytest.raises(ValueError, match="NaN"):
            bad = make_episode(3, 1)
            bad.actions[1, 0] = np.nan
            w.append([bad])
    assert file_digest(path) == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.h5"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_folder(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(PermissionError, match="not writable"):
            EpisodeWriter(ro / "x.h5", CONFIG)
    finally:
        ro.chmod(0o700)


def test_resume_corrupt_or_foreign_file_is_refused_untouched(tmp_path):
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"not an hdf5 file at all" * 10)
    digest = file_digest(junk)
    with pytest.raises(ValueError, match="not a readable HDF5"):
        EpisodeWriter(junk, CONFIG, resume=True)
    assert file_digest(junk) == digest
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f.create_dataset("x", data=np.arange(3))
    with pytest.raises(ValueError, match="not a graspsim episode file"):
        EpisodeWriter(foreign, CONFIG, resume=True)
    # a truncated file (a copy cut in half) is refused too
    good = tmp_path / "good.h5"
    with EpisodeWriter(good, CONFIG) as w:
        w.append([make_episode(20, k) for k in range(3)])
    cut = tmp_path / "cut.h5"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(ValueError, match="cut.h5"):
        EpisodeWriter(cut, CONFIG, resume=True)


def test_resume_appends_and_overwrite_replaces(tmp_path):
    path = tmp_path / "d.h5"
    eps = [make_episode(T, k) for k, T in enumerate([3, 4, 5, 6])]
    with EpisodeWriter(path, CONFIG) as w:
        w.append(eps[:2])
    changed = {**CONFIG, "episodes": 99}
    with EpisodeWriter(path, changed, resume=True, ignore_keys=("episodes",)) as w:
        assert w.num_episodes == 2
        w.append(eps[2:3])
        w.append(eps[3:])
    back = list(read_episodes(path))
    assert [e.num_samples for e in back] == [3, 4, 5, 6]
    for a, b in zip(back, eps):
        np.testing.assert_array_equal(a.obs["rgb"], b.obs["rgb"])
    assert json.loads(h5py.File(path, "r").attrs["config"])["episodes"] == 99
    with EpisodeWriter(path, CONFIG, overwrite=True) as w:
        w.append(eps[3:])
    assert [e.num_samples for e in read_episodes(path)] == [6]
    with EpisodeWriter(tmp_path / "empty.h5", CONFIG):
        pass
    assert describe(tmp_path / "empty.h5")["episodes"] == 0


def test_dagger_extras_and_attrs(tmp_path):
    path = tmp_path / "agg.h5"
    ep = make_episode(5, 0)
    ep.extras.update(executed_actions=ep.actions + 1, learner_actions=ep.actions * 2)
    ep.attrs.update(iteration=3, beta=0.25)
    with EpisodeWriter(path, CONFIG) as w:
        w.append([ep])
    with h5py.File(path, "r") as f:
        g = f["data/demo_0"]
        assert g["learner_actions"].shape == (5, 4) and g.attrs["iteration"] == 3 and g.attrs["beta"] == 0.25
    back = next(read_episodes(path))
    np.testing.assert_array_equal(back.extras["executed_actions"], ep.actions + 1)
    assert back.attrs["iteration"] == 3 and back.attrs["beta"] == 0.25
    with pytest.raises(ValueError, match="reserved"):
        Episode(obs=ep.obs, actions=ep.actions, extras={"obs": ep.actions}).validate()


def test_second_writer_is_locked_out(tmp_path):
    path = tmp_path / "d.h5"
    with EpisodeWriter(path, CONFIG) as w:
        w.append([make_episode(2, 0)])
        with pytest.raises(ValueError, match="another process"):
            EpisodeWriter(path, CONFIG, resume=True)


# ------------------------------------------------------------------ crash safety
CRASH_POINTS = ("os.replace", "_fsync_file", "_fsync_dir", "_write_demo")


def _run_and_die(path, kill_at: int) -> None:
    """Child process: write 3 appends and close, SIGKILLing itself at the ``kill_at``-th I/O event."""
    count = [0]

    def tick():
        count[0] += 1
        if count[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def wrap(fn):
        def inner(*a, **k):
            out = fn(*a, **k)
            tick()
            return out
        return inner

    def wrap_before(fn):
        def inner(*a, **k):
            tick()
            return fn(*a, **k)
        return inner

    fileio.os = type("os_proxy", (), {"__getattr__": staticmethod(lambda n: getattr(os, n))})()
    fileio.os.replace = wrap_before(wrap(os.replace))  # die just before and just after each rename
    fileio.fsync_file = wrap(fileio.fsync_file)
    fileio.fsync_dir = ds_writer.fsync_dir = wrap(fileio.fsync_dir)
    ds_writer._write_demo = wrap(ds_writer._write_demo)  # die in the middle of writing a part
    resume = path.exists()
    with EpisodeWriter(path, CONFIG, resume=resume) as w:
        for j in range(3):
            w.append([make_episode(4 + j, 10 * j + i) for i in range(2)])
    os._exit(0)


def test_kill_at_every_io_event_keeps_committed_episodes(tmp_path):
    """SIGKILL the writer at each file-system event in turn: the file always opens with plain h5py,
    holds a prefix of the appended episodes (whole appends only), and resuming completes it."""
    expected = [make_episode(4 + j, 10 * j + i) for j in range(3) for i in range(2)]
    kill_at, outcomes = 1, []
    while True:
        path = tmp_path / f"k{kill_at}.h5"
        pid = os.fork()
        if pid == 0:  # child
            try:
                _run_and_die(path, kill_at)
            finally:
                os._exit(3)
        _, status = os.waitpid(pid, 0)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        if not killed:
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        if path.exists():
            demos, _, config, total = robomimic_read(path)
            n = len(demos)
            assert n % 2 == 0 and config == CONFIG and total == sum(e.num_samples for e in expected[:n])
            for d, e in zip(demos, expected):
                np.testing.assert_array_equal(d["obs"]["rgb"], e.obs["rgb"])
            outcomes.append(n)
            with EpisodeWriter(path, CONFIG, resume=True) as w:  # recovery: clean up, continue
                w.append(expected[n:])
            assert [e.num_samples for e in read_episodes(path)] == [e.num_samples for e in expected]
            assert not ds.parts_dir(path).exists()
            assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(f"k{kill_at}.")) == [path.name]
            assert not any(p.name.startswith(f".k{kill_at}.h5") for p in tmp_path.iterdir())
        else:
            outcomes.append(None)
        if not killed:
            break
        kill_at += 1
    assert kill_at > 20  # every event of 3 appends and the consolidation was tried
    assert set(outcomes) >= {None, 0, 2, 4, 6}


# ------------------------------------------------------------------ recorder
def test_recorder_emits_exact_per_scene_episodes():
    B, H = 3, 4
    rec = EpisodeRecorder(B, capacity=2)
    history = {i: [] for i in range(B)}
    g = torch.Generator().manual_seed(0)
    active_plan = [[1, 1, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1], [1, 1, 1]]
    for a in active_plan:
        rgb = torch.randint(0, 256, (B, 3, H, H), generator=g, dtype=torch.uint8)
        mask = torch.rand((B, H, H), generator=g) < 0.3
        act = torch.randn((B, 4), generator=g)
        held = torch.rand(B, generator=g) < 0.5
        active = torch.tensor(a, dtype=torch.bool)
        rec.record({"rgb": rgb, "mask": mask}, act, {"held": held}, {"x": act[:, :1] * 2}, active=active)
        for i in range(B):
            if a[i]:
                history[i].append((rgb[i].permute(1, 2, 0).numpy(), mask[i].numpy(), act[i].numpy(), held[i].numpy()))
    assert rec.lengths.tolist() == [4, 4, 5] and rec.capacity >= 5
    eps = rec.finish(torch.tensor([2, 0]), attrs=[{"k": 2}, {"k": 0}])
    assert [e.attrs["k"] for e in eps] == [2, 0]
    for e, i in zip(eps, [2, 0]):
        h = history[i]
        np.testing.assert_array_equal(e.obs["rgb"], np.stack([x[0] for x in h]))
        assert e.obs["rgb"].shape == (len(h), H, H, 3) and e.obs["mask"].dtype == np.uint8
        np.testing.assert_array_equal(e.obs["mask"], np.stack([x[1] for x in h]).astype(np.uint8))
        np.testing.assert_array_equal(e.actions, np.stack([x[2] for x in h]))
        np.testing.assert_array_equal(e.privileged["held"], np.stack([x[3] for x in h]).astype(np.uint8))
        np.testing.assert_array_equal(e.extras["x"][:, 0], 2 * np.stack([x[2] for x in h])[:, 0])
        e.validate()
    assert rec.lengths.tolist() == [0, 4, 0]
    rec.discard([1])
    with pytest.raises(ValueError, match="no recorded steps"):
        rec.finish([1])
    with pytest.raises(ValueError, match="keys changed"):
        rec.record({"rgb": rgb}, act)


def test_ctrl_c_during_append_is_deferred_until_commit(tmp_path, monkeypatch):
    path = tmp_path / "d.h5"
    real = ds_writer._write_demo

    def interrupted(*a, **k):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in the middle of writing a part
        return real(*a, **k)

    with EpisodeWriter(path, CONFIG) as w:
        monkeypatch.setattr(ds_writer, "_write_demo", interrupted)
        with pytest.raises(KeyboardInterrupt):
            w.append([make_episode(3, 0), make_episode(4, 1)])
        assert w.num_episodes == 2  # raised only after the commit was recorded
    assert [e.num_samples for e in read_episodes(path)] == [3, 4]


def test_filter_keys_as_robomimic_reads_them(tmp_path):
    path = tmp_path / "d.h5"
    with EpisodeWriter(path, CONFIG) as w:
        w.append([make_episode(2, k) for k in range(5)])
        w.set_filter_keys({"train": [0, 1, 3, 4], "valid": [2]})
        with pytest.raises(ValueError, match="outside"):
            w.set_filter_keys({"valid": [7]})
    with h5py.File(path, "r") as f:  # robomimic: [e.decode("utf-8") for e in f["mask/<key>"][:]]
        assert [e.decode("utf-8") for e in f["mask/valid"][:]] == ["demo_2"]
        assert [e.decode("utf-8") for e in f["mask/train"][:]] == ["demo_0", "demo_1", "demo_3", "demo_4"]
    with EpisodeWriter(path, CONFIG, resume=True, consolidate=False) as w:  # kept on resume, updatable
        w.append([make_episode(2, 9)])
        assert describe(path)["filter_keys"] == {"train": 4, "valid": 1}
        w.set_filter_keys({"valid": [2, 5]})
    assert describe(path)["filter_keys"] == {"train": 4, "valid": 2}


def test_missing_part_file_gives_a_clear_error(tmp_path):
    path = tmp_path / "d.h5"
    w = EpisodeWriter(path, CONFIG)
    w.append([make_episode(2, 0)])
    w.append([make_episode(2, 1)])
    part = sorted(ds.parts_dir(path).iterdir())[-1]
    part.rename(tmp_path / "moved.h5")
    with pytest.raises(ValueError, match="demo_1 cannot be read"):
        describe(path)
    with pytest.raises(ValueError, match="missing part"):
        EpisodeWriter(path, CONFIG, resume=True)
    (tmp_path / "moved.h5").rename(part)
    w.close()
    assert describe(path)["episodes"] == 2
