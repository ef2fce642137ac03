"""``graspsim pipeline`` end to end at toy budgets: every stage runs, report.html holds the numbers."""

from __future__ import annotations

import dataclasses
import json

import pytest

from graspsim.dagger.pipeline import PRESETS, PipelineConfig, run_pipeline
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
