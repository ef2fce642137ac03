"""``graspsim pipeline`` end to end at toy budgets: every stage runs, report.html holds the numbers."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from graspsim.dagger.pipeline import KIND_BUDGETS, PRESETS, PipelineConfig, run_pipeline
from graspsim.runtime import RuntimeConfig
from graspsim import SimConfig

SIM = SimConfig(image_size=32, shadows=False, max_steps=40)
TINY = dict(collect_episodes=4, vision_steps=2, iterations=2, episodes_per_iter=4, train_steps=2,
            dagger_eval_episodes=4, eval_episodes=4, num_envs=4)


def test_tiny_pipeline_writes_report_and_resumes(tmp_path):
    cfg = PipelineConfig(name="tiny", runs_dir=tmp_path, sim=SIM, gifs=1, runtime=RuntimeConfig(progress=False), **TINY)
    s = run_pipeline(cfg)
    out = tmp_path / "tiny"
    html = (out / "report.html").read_text()
    for key in ("eval_dagger_predicted", "eval_dagger_gt", "eval_dagger_moving", "eval_bc"):
        assert s[key]["num_episodes"] == 4
        assert (out / key / "metrics.json").is_file()
        assert f"{key}/rollout_0.gif" in html
    assert s["eval_dagger_moving"]["target_speed"] == [0.005, 0.02]
    for key in ("dagger", "bc"):
        assert (out / key / "policy.pt").is_file() and (out / key / "best.pt").is_file() and len(s[key]["rows"]) == 2
    assert all(r["beta"] == 1.0 for r in s["bc"]["rows"])  # the baseline never lets the learner drive
    assert s["dagger"]["rows"][1]["beta"] < 1.0
    assert (out / "learning_curves.png").stat().st_size > 0
    assert "Closed-loop success" in html and "learning_curves.png" in html
    conf = json.loads((out / "config.json").read_text())
    assert conf["budgets"]["iterations"] == 2 and conf["preset"] == "small"
    assert conf["precision"] == "auto" and s["precision"]["requested"] == "auto"
    assert set(s["seconds"]) >= {"collect", "vision", "dagger", "bc", "eval_dagger_gt"}

    with pytest.raises(FileExistsError):
        run_pipeline(cfg)
    again = run_pipeline(PipelineConfig(name="tiny", runs_dir=tmp_path, sim=SIM, gifs=1, runtime=RuntimeConfig(progress=False),
                                        resume=True, **TINY))
    assert again["seconds"] == s["seconds"]  # every stage was already complete: nothing re-ran

    # the default net is the cropped cascade, its window always mirrored
    from graspsim.vision.checkpoint import load_checkpoint
    from graspsim.vision.train_config import CROPPED_MODEL

    ckpt = load_checkpoint(out / "vision" / "checkpoint.pt")
    assert ckpt["model_config"] == dataclasses.asdict(CROPPED_MODEL)
    assert ckpt["mirror_tta"] is True and ckpt["config"]["patch"] == CROPPED_MODEL.crop
    assert s["vision"]["model"] == "cropped" and conf["vision_model"] == "cropped"
    assert "cropped cascade" in html

    kw = dict(name="tiny", runs_dir=tmp_path, sim=SIM, gifs=1, runtime=RuntimeConfig(progress=False), resume=True, **TINY)
    with pytest.raises(ValueError, match="vision_model"):  # a folder of today's default refuses the other net
        run_pipeline(PipelineConfig(vision_model="unet", **kw))
    # folders written when the U-Net was the default (with "default", or before --vision-model existed) resume as
    # the U-Net they trained when the request holds today's default
    for stored in ("default", None):
        old = {k: v for k, v in conf.items() if k != "vision_model"}
        if stored is not None:
            old["vision_model"] = stored
        (out / "config.json").write_text(json.dumps(old))
        assert run_pipeline(PipelineConfig(**kw))["seconds"] == s["seconds"]
        assert run_pipeline(PipelineConfig(vision_model="unet", **kw))["seconds"] == s["seconds"]
    # folders written when the flag was --vision-checkpoint hold the key "vision_checkpoint": it compares as "vision"
    (out / "config.json").write_text(json.dumps({("vision_checkpoint" if k == "vision" else k): v for k, v in conf.items()}))
    assert run_pipeline(PipelineConfig(**kw))["seconds"] == s["seconds"]
    # folders written before --precision resume as auto, what they ran
    (out / "config.json").write_text(json.dumps({k: v for k, v in conf.items() if k != "precision"}))
    assert run_pipeline(PipelineConfig(**kw))["seconds"] == s["seconds"]
    with pytest.raises(ValueError, match="precision"):
        run_pipeline(PipelineConfig(precision="fp32", **kw))


def test_pipeline_trains_and_uses_the_unet(tmp_path):
    from graspsim.vision.checkpoint import load_checkpoint
    from graspsim.vision.train_config import UNET_MODEL

    cfg = PipelineConfig(name="unet", runs_dir=tmp_path, sim=SIM, gifs=1, runtime=RuntimeConfig(progress=False),
                         vision_model="unet", bc_baseline=False, moving_target=False, **TINY)
    s = run_pipeline(cfg)
    out = tmp_path / "unet"
    ckpt = load_checkpoint(out / "vision" / "checkpoint.pt")
    assert ckpt["model_config"] == dataclasses.asdict(UNET_MODEL)
    assert ckpt["mirror_tta"] is False  # the small preset's one pass
    assert s["vision"]["model"] == "unet" and s["vision"]["mirror_tta"] is False
    assert s["eval_dagger_predicted"]["num_episodes"] == 4 and s["eval_dagger_predicted"]["masks"] == "predicted"
    assert "whole-frame U-Net" in (out / "report.html").read_text()
    assert json.loads((out / "config.json").read_text())["vision_model"] == "unet"


def test_pipeline_config_errors():
    with pytest.raises(ValueError, match="preset"):
        PipelineConfig(preset="huge")
    with pytest.raises(ValueError, match="name"):
        PipelineConfig(resume=True)
    with pytest.raises(ValueError, match="iterations"):
        PipelineConfig(iterations=0)
    with pytest.raises(ValueError, match="vision_model"):
        PipelineConfig(vision_model="tiny")
    with pytest.raises(ValueError, match="--vision-model .* --vision skips"):
        PipelineConfig(vision_model="unet", vision="vision/assets/segnet.pt")
    assert PipelineConfig(preset="medium").budgets() == PRESETS["medium"]
    assert PipelineConfig(iterations=9).budgets()["iterations"] == 9


SPHERE_SMALL = dict(collect_episodes=64, vision_steps=2600, vision_batch=48, iterations=5, episodes_per_iter=96,
                    train_steps=400, dagger_eval_episodes=64, eval_episodes=200, num_envs=96, vision_mirror=0)
"""The budgets of README command 1 (``graspsim pipeline``: the sphere, small preset), whose numbers never change."""


def test_sphere_budgets_stay_and_wrist_kinds_raise_theirs():
    """The sphere at every preset keeps the preset's budgets (README command 1 digit for digit); a run whose target
    holds a kind of ``KIND_BUDGETS`` gets the larger of each number, and an override flag still wins."""
    assert PipelineConfig().budgets() == SPHERE_SMALL == PRESETS["small"]
    assert PipelineConfig().to_dict()["budgets"] == SPHERE_SMALL
    assert PipelineConfig().precision == "auto"
    for preset in PRESETS:
        assert PipelineConfig(preset=preset, target="sphere").budgets() == PRESETS[preset]
    assert "sphere" not in KIND_BUDGETS and set(KIND_BUDGETS) <= {"cube", "cylinder"}
    for kind, per_preset in KIND_BUDGETS.items():
        for preset, raised in per_preset.items():
            b = PipelineConfig(preset=preset, target=kind).budgets()
            assert b == {**PRESETS[preset], **{k: max(PRESETS[preset][k], v) for k, v in raised.items()}}
            assert b != PRESETS[preset]
    assert PipelineConfig(target="cube").budgets() == {**SPHERE_SMALL, "iterations": 8, "dagger_eval_episodes": 128}
    assert PipelineConfig(target="cylinder").budgets() == SPHERE_SMALL  # 99.5-100 % with the preset's (seed 1)
    mix = PipelineConfig(target="sphere,cube,cylinder").budgets()
    for k, v in mix.items():
        assert v == max([SPHERE_SMALL[k]] + [KIND_BUDGETS[kind]["small"].get(k, 0) for kind in KIND_BUDGETS])
    assert PipelineConfig(target="cube", iterations=3).budgets()["iterations"] == 3  # the flag wins
    assert PipelineConfig(target="cube").to_dict()["budgets"] == PipelineConfig(target="cube").budgets()


def _spy_autocast(monkeypatch) -> list:
    """Record the (dtype, enabled) of every ``torch.autocast`` entered from now on."""
    import torch

    calls, real = [], torch.autocast

    def spy(*args, **kw):
        calls.append((kw.get("dtype"), kw.get("enabled", True)))
        return real(*args, **kw)

    monkeypatch.setattr(torch, "autocast", spy)
    return calls


def test_pipeline_precision_fp32_trains_and_segments_in_float32(tmp_path, monkeypatch):
    """``--precision fp32`` on a CPU that has native bf16: the vision net trains, and every frame is segmented,
    without bf16 autocast, and the summary and report say so."""
    import torch

    from graspsim.vision import infer, train

    monkeypatch.setattr(train, "cpu_has_fast_bf16", lambda: True)  # as on the reference CPU, wherever this runs
    monkeypatch.setattr(infer, "cpu_has_fast_bf16", lambda: True)
    calls = _spy_autocast(monkeypatch)
    cfg = PipelineConfig(name="fp32", runs_dir=tmp_path, sim=SIM, gifs=0, runtime=RuntimeConfig(progress=False),
                         bc_baseline=False, moving_target=False, precision="fp32", **TINY)  # the precision, not the stages
    s = run_pipeline(cfg)
    assert calls and not any(enabled for _, enabled in calls), calls  # autocast never on
    assert s["precision"] == {"requested": "fp32", "vision_training": "fp32", "segmentation": "fp32"}
    assert s["vision"]["training_precision"] == "fp32" and s["dagger"]["segmentation_precision"] == "fp32"
    assert s["eval_dagger_predicted"]["segmentation_precision"] == "fp32"
    assert s["eval_dagger_gt"]["segmentation_precision"] is None  # ground-truth masks: nothing segmented
    out = tmp_path / "fp32"
    assert json.loads((out / "config.json").read_text())["precision"] == "fp32"
    assert "--precision fp32</code>: vision net trained in <b>fp32</b>" in (out / "report.html").read_text()
    # auto on the same CPU trains under bf16 autocast (the segmenter then takes bf16 where its probe frames agree);
    # without the transfer test, whose 2,048 frames in bf16 a CPU without it would emulate for half a minute
    calls.clear()
    s = run_pipeline(dataclasses.replace(cfg, name="auto", precision="auto", transfer=None))
    assert (torch.bfloat16, True) in calls and s["precision"]["vision_training"] == "bf16"
    assert s["precision"]["segmentation"] in ("bf16", "fp32")


def test_precision_flags_of_dagger_and_eval_sim(tmp_path, monkeypatch):
    """The segmenter runs in the precision asked for (``fp32`` even where native bf16 is there), and says which."""
    from graspsim.dagger.evaluate import EvalSimConfig
    from graspsim.dagger.masks import make_mask_fn
    from graspsim.dagger.rollout import gt_masks, mask_precision
    from graspsim.dagger.train import DaggerConfig
    from graspsim.vision import infer

    monkeypatch.setattr(infer, "cpu_has_fast_bf16", lambda: True)
    ckpt = Path(__file__).resolve().parents[1] / "vision" / "assets" / "segnet.pt"
    assert mask_precision(make_mask_fn("predicted", ckpt, "cpu", "fp32")) == "fp32"
    assert mask_precision(make_mask_fn("predicted", ckpt, "cpu", "bf16")) == "bf16"
    assert mask_precision(make_mask_fn("gt", None, "cpu", "fp32")) is None and mask_precision(gt_masks) is None
    with pytest.raises(ValueError, match="DaggerConfig.precision must be one of .*'fp8'"):
        DaggerConfig(out=tmp_path / "d", precision="fp8")
    with pytest.raises(ValueError, match="EvalSimConfig.precision must be one of .*'fp8'"):
        (tmp_path / "policy.pt").write_bytes(b"")
        EvalSimConfig(policy=tmp_path / "policy.pt", out=tmp_path / "e", precision="fp8")
    with pytest.raises(ValueError, match="PipelineConfig.precision must be one of .*'bf16'"):
        PipelineConfig(precision="bf16")  # no forced bf16: emulated bf16 training would not fit a preset


def test_resume_of_a_folder_that_holds_no_run_is_refused(tmp_path):
    """``pipeline --resume --name <typo>`` names the missing run instead of starting a fresh pipeline (issue 38)."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"--resume: .*typo holds no pipeline run.*real"):
        run_pipeline(PipelineConfig(name="typo", runs_dir=tmp_path, resume=True, sim=SIM,
                                    runtime=RuntimeConfig(progress=False), **TINY))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["real"]  # nothing was written


def test_pipeline_target_kinds_report_per_kind_rows_and_gifs(tmp_path):
    cfg = PipelineConfig(name="kinds", runs_dir=tmp_path, sim=SIM, gifs=1, runtime=RuntimeConfig(progress=False),
                         target="cube,cylinder", bc_baseline=False, moving_target=False,
                         **{**TINY, "eval_episodes": 8, "num_envs": 8})
    assert cfg.sim.target.kinds == ("cube", "cylinder") and cfg.sim.wrist
    s = run_pipeline(cfg)
    out = tmp_path / "kinds"
    html = (out / "report.html").read_text()
    per_kind = s["eval_dagger_gt"]["per_kind"]
    assert set(per_kind) == {"cube", "cylinder"} and sum(r["num_episodes"] for r in per_kind.values()) == 8
    assert "target kinds <b>cube, cylinder</b>" in html
    assert html.count("&nbsp;&nbsp;cube</td>") == 2 and html.count("&nbsp;&nbsp;cylinder</td>") == 2
    for key in ("eval_dagger_predicted", "eval_dagger_gt"):
        kinds = [g["kind"] for g in s[key]["gifs"]]
        assert sorted(kinds) == ["cube", "cylinder"], kinds  # one GIF of each kind
        assert all(f"{key}/{g['file']}" in html for g in s[key]["gifs"])
    conf = json.loads((out / "config.json").read_text())
    assert conf["target"] == "cube,cylinder" and conf["sim"]["target"]["kinds"] == ["cube", "cylinder"]
    assert set(s["vision"]["transfer_test_by_kind"]) == {"sphere", "cube", "cylinder"}  # the kinds sets, per kind
    assert "transfer test by target kind" in html


def test_pipeline_target_errors():
    with pytest.raises(ValueError, match="unknown kind 'pyramid'; known kinds: sphere, cube, cylinder"):
        PipelineConfig(target="pyramid")
    d = SimConfig().to_dict()
    d["target"]["kinds"] = ["cylinder"]
    with pytest.raises(ValueError, match="--target cube and --sim.target.kinds cylinder disagree"):
        PipelineConfig(target="cube", sim=SimConfig.from_dict(d))
    assert PipelineConfig(target="cylinder", sim=SimConfig.from_dict(d)).sim.target.kinds == ("cylinder",)
    assert PipelineConfig(target=" sphere, cube").target == "sphere,cube"
