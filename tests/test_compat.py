"""The compatibility tables (graspsim.compat): old module paths still import (with a warning naming the new one), old
flags and field names are refused with a line naming the new one, run folders of earlier releases resume as they
were written, every entry names the release it may be dropped in, and none outlives it."""

import importlib
import re
import sys
import warnings

import pytest

import graspsim
from graspsim import compat
from graspsim.compat import MOVED_MODULES


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_moved_module_imports_with_a_warning_naming_the_new_path(old):
    new = MOVED_MODULES[old].new
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod = importlib.import_module(old)
    assert mod is importlib.import_module(new)
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert any(new in m and old in m for m in messages), messages


def test_old_robot_paths_give_the_same_classes():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from graspsim.dagger.cameras import Camera as OldCamera
        from graspsim.dagger.robots import Robot as OldRobot
    from graspsim.robot import Camera, Robot

    assert OldRobot is Robot and OldCamera is Camera


def test_no_compatibility_entry_outlives_its_release():
    now = _version(graspsim.__version__)
    rows = list(compat.entries())
    assert len(rows) >= 40  # every table is walked (modules, flags, fields, run-folder settings)
    stale = {where: drop for where, drop in rows if now >= _version(drop)}
    assert not stale, f"graspsim {graspsim.__version__}: delete these entries (and what uses them): {stale}"


def test_the_outlived_check_fires_on_a_stale_entry(monkeypatch):
    monkeypatch.setitem(compat.RENAMED_FLAGS, "--stale", compat.RenamedFlag("--fresh", "test", "0.1.0"))
    now = _version(graspsim.__version__)
    assert [w for w, d in compat.entries() if now >= _version(d)] == ["RENAMED_FLAGS['--stale']"]


def test_every_compatibility_table_lives_in_graspsim_compat():
    """No module keeps a table of its own (the names the five modules used before 0.2.0)."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    pattern = re.compile(r"^(CHANGED_DEFAULTS|ADDED_SETTINGS|ADDED_KEYS|RENAMED_FLAGS|RENAMED_SETTINGS|"
                         r"RENAMED_VISION_MODELS|LEGACY_\w+)\s*(:[^=\n]*)?=\s*[{(\[]", re.M)
    owners = [str(p.relative_to(root)) for folder in ("graspsim", "vision", "expert", "dagger", "robot", "scripts")
              for p in (root / folder).rglob("*.py") if pattern.search(p.read_text())]
    assert owners == ["graspsim/compat.py"], owners


def test_the_tables_now_values_are_todays_defaults():
    """A "now" that is no longer the default means the default changed again: add an entry for that change."""
    import dataclasses

    from graspsim import SimConfig
    from graspsim.dagger.model import ControlNetConfig
    from graspsim.dagger.pipeline import PipelineConfig
    from graspsim.vision.train_config import DEFAULT_MODEL, UNET_MODEL

    changed = compat.CHANGED_DEFAULTS
    assert changed["train-vision"]["model"].before == dataclasses.asdict(UNET_MODEL)
    assert changed["train-vision"]["model"].now == dataclasses.asdict(DEFAULT_MODEL)
    assert changed["dagger"]["sim.fingertip_pixels"].now == SimConfig().fingertip_pixels
    assert changed["pipeline"]["sim.fingertip_pixels"].now == SimConfig().fingertip_pixels
    assert changed["pipeline"]["vision_model"].now == PipelineConfig.__dataclass_fields__["vision_model"].default
    assert compat.ADDED_SETTINGS["dagger"]["model.max_yaw_rate"].value == ControlNetConfig.max_yaw_rate
    from graspsim.dagger.train import DaggerConfig  # --precision: auto is what runs before it did

    assert compat.ADDED_SETTINGS["dagger"]["precision"].value == DaggerConfig.__dataclass_fields__["precision"].default
    assert compat.ADDED_SETTINGS["pipeline"]["precision"].value == PipelineConfig.__dataclass_fields__["precision"].default


@pytest.mark.parametrize("verb,args,hint", [
    ("eval-sim", ["--vision-checkpoint", "x.pt"], "--vision-checkpoint is now --vision"),
    ("deploy", ["--out", "o", "--control-checkpoint=p.pt"], "--control-checkpoint is now --policy"),
    ("deploy", ["--runtime", "onnx"], "--runtime is now --inference"),
    ("dagger", ["--runtime", "onnx"], None),  # --runtime was deploy's flag only
    ("deploy", ["--inference", "onnx"], None),
])
def test_old_flags_are_refused_with_the_new_one(verb, args, hint):
    msg = compat.renamed_flag(verb, args)
    if hint is None:
        assert msg is None
    else:
        assert msg.startswith(hint) and "\n" not in msg


@pytest.mark.parametrize("kw,field", [({"runtime": "onnx"}, "inference='onnx'"), ({"run": object()}, "runtime=")])
def test_deploy_config_old_field_names_name_the_new_ones(kw, field):
    from graspsim.robot.deploy import DeployConfig

    with pytest.raises(ValueError, match=re.escape(field)):
        DeployConfig(vision="v.pt", policy="p.pt", camera="sim", robot="sim", out="o", **kw)


def test_old_pipeline_folder_names_read_as_todays():
    stored = {"vision_checkpoint": "segnet.pt", "vision_model": "default", "seed": 0}
    assert compat.renamed_settings("pipeline", stored) == {"vision": "segnet.pt", "vision_model": "unet", "seed": 0}
    assert compat.renamed_value("pipeline", "vision_model", "default") == "unet"
    assert compat.renamed_value("pipeline", "vision_model", "cropped") == "cropped"
