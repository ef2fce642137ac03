"""The run folder (issue 17 item 4): one resume rule for every verb, one checkpoint format."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from graspsim.dagger.model import ControlNet, ControlNetConfig
from graspsim.dagger.policy import MaskPolicy, load_checkpoint, save_checkpoint
from graspsim import runs

ASSETS = Path(__file__).parent / "assets"


def test_check_resume_names_every_changed_key_except_the_allowed_ones():
    old = {"seed": 0, "iterations": 3, "sim": {"randomization": {"sphere_diameter": [0.01, 0.02]}}}
    new = {"seed": 0, "iterations": 5, "sim": {"randomization": {"sphere_diameter": (0.01, 0.03)}}}
    runs.check_resume(old, {**new, "sim": old["sim"]}, ["iterations"], "run")  # tuples compare as stored lists
    with pytest.raises(ValueError, match=r"sim\.randomization\.sphere_diameter: \[0\.01, 0\.02\] -> \[0\.01, 0\.03\]"):
        runs.check_resume(old, new, ["iterations"], "run")
    with pytest.raises(ValueError, match="iterations"):
        runs.check_resume(old, {**old, "iterations": 4}, [], "run")


def test_settings_added_later_compare_as_their_old_behaviour():
    """A stored config without a key that a later version added resumes when the new run holds the value that
    reproduces the old behaviour, and is refused, naming the key, when it holds another."""
    old = {"seed": 0, "model": {"base_channels": 8}}
    new = {"seed": 0, "model": {"base_channels": 8, "crop": 0}}
    added = {"model.crop": 0}
    with pytest.raises(ValueError, match="model.crop"):
        runs.check_resume(old, new, [], "run")  # without the list, a new key is a difference
    runs.check_resume(old, new, [], "run", added)
    with pytest.raises(ValueError, match=r"model.crop: 0 -> 24"):
        runs.check_resume(old, {**new, "model": {"base_channels": 8, "crop": 24}}, [], "run", added)
    with pytest.raises(ValueError, match=r"model.crop: 24 -> 0"):  # a stored value wins over the list
        runs.check_resume({**old, "model": {"base_channels": 8, "crop": 24}}, new, [], "run", added)


def test_resume_config_reads_the_folder(tmp_path):
    assert runs.resume_config(tmp_path, {"a": 1}, []) is False  # nothing stored: nothing to compare
    runs.write_config(tmp_path, {"a": 1, "b": {"c": 2}})
    assert runs.resume_config(tmp_path, {"a": 1, "b": {"c": 2}}, [])
    with pytest.raises(ValueError, match="b.c"):
        runs.resume_config(tmp_path, {"a": 1, "b": {"c": 3}}, [])
    (tmp_path / "config.json").write_text("{broken")
    with pytest.raises(ValueError, match="not a readable run config"):
        runs.read_config(tmp_path)


def test_deployable_control_checkpoint_has_no_optimizer_and_training_one_has(tmp_path):
    model = ControlNet(ControlNetConfig())
    opt = torch.optim.AdamW(model.parameters())
    save_checkpoint(tmp_path / "policy.pt", model, None, 2)
    save_checkpoint(tmp_path / "iter_002.pt", model, opt, 2)
    dep, train = load_checkpoint(tmp_path / "policy.pt"), load_checkpoint(tmp_path / "iter_002.pt")
    assert "optimizer" not in dep and "optimizer" in train
    assert dep["kind"] == "graspsim-control" and dep["format_version"] == 2 == train["format_version"]
    assert set(runs.deployable(train)) == set(dep)


def test_old_control_checkpoint_without_format_version_loads():
    raw = torch.load(ASSETS / "policy_format0.pt", weights_only=False)
    assert "format_version" not in raw
    ckpt = load_checkpoint(ASSETS / "policy_format0.pt")
    assert ckpt["format_version"] == 2 and "model_config" in ckpt  # upgraded on loading
    MaskPolicy.from_checkpoint(ASSETS / "policy_format0.pt")


def test_control_checkpoint_from_before_the_config_rename_loads(tmp_path):
    """Control checkpoints once stored the net's config as ``config`` and the run's as ``run_config``; today ``config``
    is a run's config in every checkpoint and ``model_config`` a net's. The older files read with today's keys."""
    model = ControlNet(ControlNetConfig())
    save_checkpoint(tmp_path / "p.pt", model, None, 1, config={"seed": 3})
    data = torch.load(tmp_path / "p.pt", weights_only=False)
    assert data["model_config"] == model.cfg.to_dict() and data["config"] == {"seed": 3}
    old = {k: v for k, v in data.items() if k not in ("model_config", "config")}
    torch.save({**old, "format_version": 1, "config": data["model_config"], "run_config": data["config"]},
               tmp_path / "old.pt")  # as version 1 wrote it
    ckpt = load_checkpoint(tmp_path / "old.pt")
    assert ckpt["model_config"] == model.cfg.to_dict() and ckpt["config"] == {"seed": 3} and "run_config" not in ckpt
    loaded = MaskPolicy.from_checkpoint(tmp_path / "old.pt").model.state_dict()
    assert all(torch.equal(v, loaded[k]) for k, v in model.state_dict().items())


def test_newer_or_foreign_checkpoints_are_refused_with_the_reason(tmp_path):
    model = ControlNet(ControlNetConfig())
    save_checkpoint(tmp_path / "p.pt", model, None, 0)
    data = torch.load(tmp_path / "p.pt", weights_only=False)
    data["format_version"] = 99
    torch.save(data, tmp_path / "new.pt")
    with pytest.raises(ValueError, match="newer"):
        load_checkpoint(tmp_path / "new.pt")
    data["kind"] = "graspsim-vision"
    torch.save(data, tmp_path / "vision.pt")
    with pytest.raises(ValueError, match="graspsim-vision"):
        load_checkpoint(tmp_path / "vision.pt")


def test_pipeline_resume_refuses_a_changed_preset(tmp_path):
    from graspsim.dagger.pipeline import PipelineConfig, run_pipeline

    first = PipelineConfig(name="r", runs_dir=tmp_path, preset="small")
    (tmp_path / "r").mkdir()
    runs.write_config(tmp_path / "r", first.to_dict())
    with pytest.raises(ValueError, match="preset"):
        run_pipeline(PipelineConfig(name="r", runs_dir=tmp_path, preset="medium", resume=True))
    assert runs.read_config(tmp_path / "r")["preset"] == "small"  # the stored config is left as it was


# ------------------------------------------------------------------------------------------ the runtime group
def _flat(config: dict) -> dict:
    """A config as run folders stored it before RuntimeConfig: the runtime settings at the top level."""
    return {**{k: v for k, v in config.items() if k != "runtime"}, **config["runtime"]}


def test_an_older_flat_config_compares_as_grouped():
    new = {"seed": 0, "runtime": {"device": "cpu", "threads": 2, "dist_timeout": 60.0, "progress": False}}
    old = _flat({**new, "runtime": {**new["runtime"], "threads": 0, "progress": True}})
    runs.check_resume(old, new, ["runtime.threads", "runtime.progress"], "run")  # only resumable settings differ
    with pytest.raises(ValueError, match=r"runtime\.device: 'cuda' -> 'cpu'"):
        runs.check_resume({**old, "device": "cuda"}, new, ["runtime.threads"], "run")
    with pytest.raises(ValueError, match=r"1 setting\(s\): seed "):
        runs.check_resume({**old, "seed": 1}, new, ["runtime.threads", "runtime.progress"], "run")
    assert runs.grouped_runtime(new, new) is new and runs.grouped_runtime({"a": 1}, new) == {"a": 1}


def test_dagger_resumes_a_run_folder_written_before_the_runtime_group(tmp_path, capsys):
    """A DAgger run folder whose config.json keeps device/threads/dist_timeout/progress at the top level (as
    folders written before RuntimeConfig do) resumes; a changed setting that matters is still named."""
    import json

    from graspsim.cli import main

    tiny = ["--episodes-per-iter", "2", "--eval-episodes", "2", "--num-envs", "2", "--train-steps", "1",
            "--batch-size", "4", "--no-progress", "--sim.image-size", "32", "--sim.max-steps", "8", "--sim.no-shadows"]
    out = tmp_path / "dg"
    assert main(["dagger", "--out", str(out), "--iterations", "1", *tiny]) == 0
    stored = json.loads((out / "config.json").read_text())
    assert stored["runtime"]["progress"] is False and "threads" not in stored
    (out / "config.json").write_text(json.dumps(_flat(stored)))
    assert main(["dagger", "--out", str(out), "--resume", "--iterations", "2", "--threads", "1", *tiny]) == 0
    assert len(json.loads((out / "metrics.json").read_text())) == 2
    (out / "config.json").write_text(json.dumps(_flat(stored)))
    assert main(["dagger", "--out", str(out), "--resume", "--iterations", "3", "--lr", "0.1", *tiny]) == 2
    err = capsys.readouterr().err
    assert "lr: 0.002 -> 0.1" in err and "runtime" not in err.split("(")[0]
    assert len(json.loads((out / "metrics.json").read_text())) == 2  # the refused resume wrote nothing


def test_a_run_folder_has_one_writer(tmp_path):
    import subprocess
    import sys
    import time

    from graspsim import runs

    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from graspsim import runs; "
                               f"runs.claim_run_folder({str(out)!r}, False); print('held', flush=True); time.sleep(30)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FileExistsError, match="is being written by another run right now"):
            runs.claim_run_folder(out, False)
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    # the lock dies with its process; a run that started at the same time and wrote first is still seen
    (out / runs.CONFIG_NAME).write_text("{}")
    with pytest.raises(FileExistsError, match="written by another run that started at the same time"):
        runs.claim_run_folder(out, False)
    runs.claim_run_folder(out, True)  # --resume of that folder is fine
    runs.release_run_folder(out)
    time.sleep(0)


def test_release_run_folder_lets_the_lock_go(tmp_path):
    import fcntl

    from graspsim import runs

    out = tmp_path / "run"
    runs.claim_run_folder(out, False)

    def free() -> bool:  # another open file description can take the lock only when nobody holds it
        with open(out / runs.LOCK_NAME, "a+") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
            return True

    assert not free()
    runs.release_run_folder(out)
    assert free()
    runs.release_run_folder(out)  # twice, or for a folder never claimed: nothing happens
    runs.release_run_folder(tmp_path / "never")
    runs.claim_run_folder(out, True)  # and this process may claim it again
    assert not free()
    runs.release_run_folder(out)
