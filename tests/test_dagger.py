"""Control net, checkpoints, mixture rollouts, DAgger aggregation/resume and eval-sim (fast, small scenes)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path
from graspsim.runtime import RuntimeConfig

import numpy as np
import pytest
import torch

from graspsim.dagger.aggregate import Aggregate, iteration_file
from graspsim.dagger.evaluate import EvalSimConfig, evaluate_sim, wilson
from graspsim.dagger.model import ControlNet, ControlNetConfig, mask_stats, to_action
from graspsim.dagger.policy import KIND, MaskPolicy, load_checkpoint, save_checkpoint
from graspsim.dagger.rollout import rollout
from graspsim.seeds import episode_seeds
from graspsim.dagger.train import DaggerConfig, beta_at, run_dagger
from graspsim import GraspEnv, SimConfig
from graspsim.dataset import describe

SIM = SimConfig(image_size=32, shadows=False, max_steps=40)  # small and fast; same code paths as 64x64
NET = ControlNetConfig(image_size=32)


def dagger_cfg(out: Path, **kw) -> DaggerConfig:
    args = dict(out=out, iterations=2, episodes_per_iter=4, eval_episodes=2, num_envs=4, train_steps=3,
                batch_size=16, runtime=RuntimeConfig(progress=False), sim=SIM, model=NET, seed=1)
    args.update(kw)
    return DaggerConfig(**args)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------------------------------ model
def test_policy_output_shape_and_units():
    torch.manual_seed(0)
    pol = MaskPolicy(ControlNet(NET))
    mask = torch.zeros(5, 32, 32, dtype=torch.bool)
    mask[1, 10:13, 20:22] = True
    grip = torch.tensor([[1.0, 0.0, 0.0]] * 5)
    a = pol.act(mask, grip)
    assert a.shape == (5, 4) and a.dtype == torch.float32
    assert torch.isfinite(a).all()
    assert (a[:, :3].abs() <= NET.max_speed + 1e-7).all()
    big = to_action(torch.tensor([[100.0, -100.0, 0.0, 3.0]]), ControlNetConfig(max_speed=0.1))
    assert torch.allclose(big, torch.tensor([[0.1, -0.1, 0.0, 3.0]]))


def test_forward_does_not_mutate_input_and_rejects_bad_shapes():
    net = ControlNet(NET)
    mask = torch.zeros(2, 1, 32, 32)
    mask[0, 0, 3, 4] = 1
    grip = torch.zeros(2, 3)
    before = mask.clone()
    net(mask, grip)
    assert torch.equal(mask, before)
    with pytest.raises(ValueError, match="mask"):
        net(torch.zeros(2, 16, 16), grip)
    with pytest.raises(ValueError, match="gripper"):
        net(torch.zeros(2, 32, 32), torch.zeros(3, 3))


def test_mask_stats_locate_a_blob_and_flag_empty_masks():
    m = torch.zeros(2, 32, 32)
    m[0, 0:2, 30:32] = 1  # top-right corner, 4 pixels
    s = mask_stats(m)
    assert s[0, 0] == 1 and s[1, 0] == 0
    assert s[0, 1] > 0.9 and s[0, 2] < -0.9  # x right, y up (row 0)
    assert torch.allclose(s[0, 3], torch.tensor(4.0 * (4 / 1024) ** 0.5))
    assert torch.count_nonzero(s[1]) == 0


def test_one_pixel_target_reaches_the_cnn():
    """Max-pooling must not drop a single-pixel target: the CNN features change when it moves."""
    torch.manual_seed(0)
    net = ControlNet(NET)
    feats = []
    for r, c in ((5, 5), (5, 6), (20, 27)):
        m = torch.zeros(1, 32, 32)
        m[0, r, c] = 1
        pooled = torch.nn.functional.max_pool2d(m[:, None], 2)
        assert pooled.sum() == 1
        x = torch.cat([pooled, net.coords], 1)
        feats.append(net.conv(x))
    assert not torch.equal(feats[0], feats[2])


def test_config_validation_names_the_field(tmp_path):
    with pytest.raises(ValueError, match="channels"):
        ControlNetConfig(channels=(16, 0, 8))
    with pytest.raises(ValueError, match="iterations"):
        dagger_cfg(tmp_path / "r", iterations=0)
    with pytest.raises(ValueError, match="vision"):
        dagger_cfg(tmp_path / "r", masks="predicted")
    assert dagger_cfg(tmp_path / "r", model=ControlNetConfig(image_size=64)).model.image_size == 32  # from sim
    with pytest.raises(ValueError, match="beta_start"):
        dagger_cfg(tmp_path / "r", beta_start=1.5)


# ------------------------------------------------------------------------------------------ checkpoints
def test_checkpoint_roundtrip_is_bit_identical(tmp_path):
    torch.manual_seed(0)
    net = ControlNet(NET)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    save_checkpoint(tmp_path / "c.pt", net, opt, iteration=3)
    ck = load_checkpoint(tmp_path / "c.pt")
    assert ck["kind"] == KIND and ck["iteration"] == 3 and "optimizer" in ck
    pol = MaskPolicy.from_checkpoint(tmp_path / "c.pt")
    for (k, a), (k2, b) in zip(net.state_dict().items(), pol.model.state_dict().items()):
        assert k == k2 and torch.equal(a, b)
    mask = torch.rand(3, 32, 32) > 0.97
    grip = torch.rand(3, 3)
    assert torch.equal(MaskPolicy(net).act(mask, grip), pol.act(mask, grip))


def test_wrong_kind_missing_and_corrupt_checkpoints(tmp_path):
    torch.save({"kind": "graspsim-vision", "model": {}}, tmp_path / "v.pt")
    with pytest.raises(ValueError, match="graspsim-vision.*graspsim-control"):
        MaskPolicy.from_checkpoint(tmp_path / "v.pt")
    with pytest.raises(FileNotFoundError):
        MaskPolicy.from_checkpoint(tmp_path / "nope.pt")
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="bad.pt"):
        MaskPolicy.from_checkpoint(tmp_path / "bad.pt")
    # a net from before the contact channel: first head layer one input narrower
    net = ControlNet(NET)
    save_checkpoint(tmp_path / "old.pt", net, None, iteration=0)
    ck = torch.load(tmp_path / "old.pt", weights_only=False)
    ck["model"]["head.0.weight"] = ck["model"]["head.0.weight"][:, :-1]
    torch.save(ck, tmp_path / "old.pt")
    with pytest.raises(ValueError, match="retrain"):
        MaskPolicy.from_checkpoint(tmp_path / "old.pt")


# ------------------------------------------------------------------------------------------ rollouts
def test_seed_streams_are_disjoint():
    tr = set(episode_seeds(0, "train", 0, 2000))
    ho = set(episode_seeds(0, "heldout", 0, 500))
    te = set(episode_seeds(0, "test", 0, 500))
    assert len(tr) == 2000 and not (tr & ho) and not (tr & te) and not (ho & te)
    assert episode_seeds(0, "train", 5, 3) == episode_seeds(0, "train", 0, 8)[5:]
    with pytest.raises(ValueError, match="stream"):
        episode_seeds(0, "val", 0, 1)


def _const_policy(mask, grip):
    out = torch.zeros(mask.shape[0], 4)
    out[:, 2] = 0.05  # straight up, gripper open
    out[:, 3] = -1.0
    return out


def test_beta_one_reproduces_the_expert_and_beta_zero_executes_the_learner():
    seeds = episode_seeds(2, "train", 0, 6)
    expert = rollout(GraspEnv(SIM, 3, seed=7), seeds, record=True)
    mixed1 = rollout(GraspEnv(SIM, 3, seed=7), seeds, policy=_const_policy, beta=1.0, record=True)
    assert expert.success.mean() >= 0.8  # the FSM expert grasps these scenes
    np.testing.assert_array_equal(expert.success, mixed1.success)
    assert mixed1.expert_driven.all()
    for a, b in zip(expert.episodes, mixed1.episodes):
        np.testing.assert_array_equal(a.actions, b.extras["executed_actions"])

    learner = rollout(GraspEnv(SIM, 3, seed=7), seeds, policy=_const_policy, beta=0.0, record=True)
    assert not learner.expert_driven.any() and learner.success.sum() == 0
    for ep in learner.episodes:
        np.testing.assert_allclose(ep.extras["executed_actions"], np.tile([0, 0, 0.05, -1.0], (ep.num_samples, 1)))
        # the expert still labels every visited state: it wants to descend, not rise
        assert (ep.actions[:, 2] <= 0.05).mean() > 0.5
        assert not np.allclose(ep.actions, ep.extras["executed_actions"])


def test_mixture_uses_the_expert_exactly_where_the_bernoulli_picks_it():
    seeds = episode_seeds(4, "train", 0, 12)
    res = rollout(GraspEnv(SIM, 4, seed=1), seeds, policy=_const_policy, beta=0.5, record=True)
    assert 0 < res.expert_driven.sum() < 12
    for ep, driven in zip(res.episodes, res.expert_driven):
        assert ep.attrs["expert_driven"] == bool(driven)
        assert (ep.extras["expert_driven"] == driven).all()
        executed = ep.extras["executed_actions"]
        if driven:
            np.testing.assert_array_equal(executed, ep.actions)
        else:
            np.testing.assert_allclose(executed, np.tile([0, 0, 0.05, -1.0], (ep.num_samples, 1)))
    # one episode per seed, in seed order, each scene rebuilt from its seed
    assert [ep.attrs["seed"] for ep in res.episodes] == seeds
    assert res.steps.sum() == sum(ep.num_samples for ep in res.episodes)


def test_a_mask_function_sees_only_the_scenes_still_in_an_episode():
    """A vision net is run on the active slots alone (idle slots at the end of a run get an empty mask nobody
    reads), and each mask lands in its own slot: the recorded episodes equal those of the whole-batch gt masks."""
    from graspsim.keys import MASK

    seen = []

    def spy(obs):
        seen.append(obs[MASK].shape[0])
        return obs[MASK].clone()

    seeds = episode_seeds(3, "train", 0, 6)
    whole = rollout(GraspEnv(SIM, 4, seed=7), seeds, record=True)
    part = rollout(GraspEnv(SIM, 4, seed=7), seeds, record=True, mask_fn=spy)
    assert seen[0] == 4 and min(seen) < 4 and len(set(seen)) > 1  # the batch shrinks as episodes end
    np.testing.assert_array_equal(whole.success, part.success)
    np.testing.assert_array_equal(whole.steps, part.steps)
    for a, b in zip(whole.episodes, part.episodes):
        np.testing.assert_array_equal(a.obs["mask"], b.obs["mask"])
        assert a.obs["mask"].any()


def test_rollout_rejects_bad_arguments():
    env = GraspEnv(SIM, 2)
    with pytest.raises(ValueError, match="beta"):
        rollout(env, [1, 2], policy=_const_policy, beta=1.5)
    with pytest.raises(ValueError, match="learner"):
        rollout(env, [1, 2], beta=0.5)
    with pytest.raises(ValueError, match="seeds"):
        rollout(env, [])


def test_beta_schedules():
    c = dict(out="x", iterations=5, beta_start=0.8)
    lin = [beta_at(DaggerConfig(schedule="linear", **c), i) for i in range(5)]
    exp = [beta_at(DaggerConfig(schedule="exponential", beta_decay=0.5, **c), i) for i in range(5)]
    const = [beta_at(DaggerConfig(schedule="constant", **c), i) for i in range(5)]
    assert lin == pytest.approx([1.0, 0.8, 0.8 * 2 / 3, 0.8 / 3, 0.0])  # beta_start at 1, 0 at the last
    assert exp == pytest.approx([1.0, 0.8, 0.4, 0.2, 0.1])
    assert const == pytest.approx([1.0, 0.8, 0.8, 0.8, 0.8])


# ------------------------------------------------------------------------------------------ DAgger
def test_dagger_aggregates_and_resumes_after_interruption(tmp_path):
    out = tmp_path / "run"

    def stop_after_first(row):
        if row["iteration"] == 0:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_dagger(dagger_cfg(out, iterations=3), progress_fn=stop_after_first)
    rows = json.loads((out / "metrics.json").read_text())
    assert [r["iteration"] for r in rows] == [0]
    first = sha(iteration_file(out, 0))
    with pytest.raises(FileExistsError):
        run_dagger(dagger_cfg(out, iterations=3))
    with pytest.raises(ValueError, match="lr"):
        run_dagger(dagger_cfg(out, iterations=3, resume=True, lr=0.5))

    res = run_dagger(dagger_cfg(out, iterations=3, resume=True))
    rows = res["rows"]
    assert [r["iteration"] for r in rows] == [0, 1, 2]
    assert sha(iteration_file(out, 0)) == first  # finished iterations are kept, not redone
    samples = [r["samples"] for r in rows]
    assert samples[0] < samples[1] < samples[2]  # aggregation grows every iteration
    files = [iteration_file(out, i) for i in range(3)]
    assert sum(describe(f)["steps"] for f in files) == samples[-1]
    assert [r["beta"] for r in rows] == [1.0, 0.5, 0.25]
    assert len(Aggregate.from_files(files, 32)) == samples[-1]
    for i in range(3):
        ck = load_checkpoint(out / "checkpoints" / f"iter_{i:03d}.pt")
        assert ck["iteration"] == i and ck["optimizer"] is not None
    best = max(range(3), key=lambda i: (rows[i]["eval_success"], i))
    assert res["best_iteration"] == best and load_checkpoint(out / "best.pt")["iteration"] == best
    assert (out / "learning_curve.png").stat().st_size > 0
    assert (out / "metrics.csv").read_text().count("\n") == 4
    assert any((out / "tb").iterdir())


def test_resumed_run_matches_an_uninterrupted_one(tmp_path):
    a = run_dagger(dagger_cfg(tmp_path / "a", iterations=2))
    run_dagger(dagger_cfg(tmp_path / "b0", iterations=1))
    shutil.move(tmp_path / "b0", tmp_path / "b")  # a moved run folder resumes (its stored out differs)
    b = run_dagger(dagger_cfg(tmp_path / "b", iterations=2, resume=True))
    pa = load_checkpoint(tmp_path / "a" / "policy.pt")["model"]
    pb = load_checkpoint(tmp_path / "b" / "policy.pt")["model"]
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    assert a["rows"][-1]["samples"] == b["rows"][-1]["samples"]


# ------------------------------------------------------------------------------------------ eval-sim
def test_eval_sim_writes_metrics_gifs_and_report(tmp_path):
    net = ControlNet(NET)
    save_checkpoint(tmp_path / "p.pt", net, None, iteration=0)
    m = evaluate_sim(EvalSimConfig(policy=tmp_path / "p.pt", out=tmp_path / "ev", episodes=5, num_envs=3, gifs=2,
                                   runtime=RuntimeConfig(progress=False), sim=SIM))
    saved = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    for key in ("success_rate", "num_episodes", "failures", "success_ci95", "failure_rates"):
        assert key in saved
    assert saved["num_episodes"] == 5
    assert set(saved["failures"]) >= {"missed_grasp", "pushed_away", "timeout", "dropped"}
    assert sum(saved["failures"].values()) == 5
    assert saved["masks"] == "gt" and saved["target_speed"] == [0.0, 0.0]
    assert (tmp_path / "ev" / "rollout_0.gif").stat().st_size > 0 and (tmp_path / "ev" / "rollout_1.gif").exists()
    assert "Success" in (tmp_path / "ev" / "report.md").read_text()
    assert m["success_rate"] == saved["success_rate"]


def test_eval_sim_split_heldout_runs_daggers_validation_scenes(tmp_path, monkeypatch):
    import graspsim.dagger.evaluate as ev
    from graspsim.seeds import episode_seeds
    net = ControlNet(NET)
    save_checkpoint(tmp_path / "p.pt", net, None, iteration=0)
    run_seeds = []
    real = ev.sharded_rollout
    monkeypatch.setattr(ev, "sharded_rollout", lambda make, seeds, **kw: (run_seeds.append(list(seeds)), real(make, seeds, **kw))[1])
    kw = dict(policy=tmp_path / "p.pt", episodes=3, num_envs=3, gifs=0, runtime=RuntimeConfig(progress=False), sim=SIM)
    test = evaluate_sim(EvalSimConfig(out=tmp_path / "t", **kw))
    held = evaluate_sim(EvalSimConfig(out=tmp_path / "h", split="heldout", **kw))
    assert run_seeds == [episode_seeds(0, "test", 0, 3), episode_seeds(0, "heldout", 0, 3)]
    assert (test["seed_split"], held["seed_split"]) == ("test", "heldout")
    assert "from the heldout seed stream" in (tmp_path / "h" / "report.md").read_text()
    with pytest.raises(ValueError, match="split"):
        EvalSimConfig(out=tmp_path / "x", split="val", **kw)


def test_eval_sim_moving_target_and_input_errors(tmp_path):
    net = ControlNet(NET)
    save_checkpoint(tmp_path / "p.pt", net, None, iteration=0)
    cfg = EvalSimConfig(policy=tmp_path / "p.pt", out=tmp_path / "ev", episodes=2, num_envs=2, gifs=0,
                        moving_target=True, runtime=RuntimeConfig(progress=False), sim=SIM)
    assert cfg.eval_sim_config().randomization.target_speed == (0.005, 0.02)
    assert SIM.randomization.target_speed == (0.0, 0.0)  # training scenes never move
    assert evaluate_sim(cfg)["target_speed"] == [0.005, 0.02]
    with pytest.raises(FileNotFoundError):
        EvalSimConfig(policy=tmp_path / "missing.pt", out=tmp_path / "x")
    with pytest.raises(ValueError, match="vision"):
        EvalSimConfig(policy=tmp_path / "p.pt", out=tmp_path / "x", masks="predicted")
    torch.save({"kind": "something-else"}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="graspsim-control"):
        evaluate_sim(dataclasses.replace(cfg, policy=tmp_path / "other.pt", overwrite=True))


def test_wilson_interval():
    lo, hi = wilson(95, 100)
    assert lo < 0.95 < hi and 0.88 < lo < 0.9
    assert wilson(0, 10)[0] == 0.0


def test_episode_weighted_sampling_balances_long_and_short_episodes():
    agg = Aggregate(32)
    mask = np.zeros((101, 32, 32), np.uint8)
    actions = np.zeros((101, 4), np.float32)
    actions[:1, 0] = 1.0  # a 1-step episode, then a 100-step one
    agg.add_arrays(mask, np.zeros((101, 3), np.float32), actions, 0, [1, 100])
    g = torch.Generator().manual_seed(0)
    _, _, a = agg.sample(4000, g, by="episode")
    assert 0.45 < float((a[:, 0] == 1).float().mean()) < 0.55
    _, _, a = agg.sample(4000, g, by="step")
    assert float((a[:, 0] == 1).float().mean()) < 0.03
    with pytest.raises(ValueError, match="lengths"):
        agg.add_arrays(mask, np.zeros((101, 3), np.float32), actions, 1, [5, 5])
