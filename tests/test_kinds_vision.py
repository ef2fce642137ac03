"""Vision for every target kind (issue 39 item 4): composites of cubes and cylinders, the sphere-only composites
unchanged to the bit, transfer frames of every kind drawn by the other renderer (the sphere-only frames unchanged),
per-kind metrics rows in train-vision's transfer report and in eval-real, and the error for an unknown kind."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from cpu_pins import pin_for_this_cpu

from graspsim import SimConfig, TargetConfig, sample_scenes
from graspsim.state import KIND_BOX, KIND_CYLINDER, KIND_SPHERE, target_half_height
from graspsim.vision.augment import AugmentConfig, scale_targets
from graspsim.vision.backgrounds import DEFAULT_BACKGROUNDS, BackgroundBank
from graspsim.vision.compose import ComposeConfig, Composer, place_camera
from graspsim.vision.foreign_render import META_FIELDS, RenderTransferConfig, generate
from graspsim.vision.image_set import KIND_COLUMN, NO_KIND, read_kinds
from graspsim.vision.metrics import kind_groups, meets_kind_targets, subset_metrics, subset_metrics_from_counts

torch.set_num_threads(1)
MIX = ("sphere", "cube", "cylinder")
TEST_PHOTOS = DEFAULT_BACKGROUNDS / "test"


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def bank():
    return BackgroundBank.from_folder(DEFAULT_BACKGROUNDS / "train", size=64)


# ------------------------------------------------------------------------------------------------ composites
def test_sphere_only_composites_are_those_drawn_before_kinds():
    """Digests of composites recorded before vision knew kinds (training composer with augmentation and colour
    matching, and the validation composer; 2 x 96 frames at seed 5): the sphere default is unchanged to the bit."""
    bank = BackgroundBank.from_folder(DEFAULT_BACKGROUNDS / "train", size=64)
    pinned = pin_for_this_cpu({
        "AuthenticAMD": {"train": "f1d55d6ff7915a69821adffd73e9cea6d10aa6db2beca609de936b5b4d43ac65",
                         "val": "7ea6f82c6f991ea029f0535b29741cb7fe1fe0a407241e75ee4b22dc8970e6ff"},
        "GenuineIntel": {"train": "3ca5084b59d2614518abc44c91856b86bb29b92aafe31a5c9f1609b31e440837",
                         "val": "138847884dda0c237a9171b646be51d1b1e16d92fcea32e75993a4a471d7a6a0"}})
    for name, comp in (("train", Composer(bank, SimConfig(), color_match_prob=0.15, augment=AugmentConfig())),
                       ("val", Composer(bank, SimConfig()))):
        g, h = _gen(5), hashlib.sha256()
        for _ in range(2):
            c = comp(96, g)
            assert bool((c.target_kind == KIND_SPHERE).all())
            for t in (c.rgb, c.mask, c.layer_alpha, c.kind, c.background):
                h.update(t.contiguous().numpy().tobytes())
        assert h.hexdigest() == pinned[name], name


def test_camera_placement_rests_free_targets_and_holds_them_between_the_pads():
    """Free targets keep resting on the table (centre at the half height); held ones sit 1.3 half heights above the
    fingertips with the gap at their width, a held cube square to the pads; target-free ones are behind the camera."""
    cfg = SimConfig(target=TargetConfig(kinds=MIX))
    state = sample_scenes(cfg, 400, _gen(0))
    placed, kind = place_camera(state, cfg, ComposeConfig(held_prob=0.3, empty_prob=0.2), _gen(1))
    hz = target_half_height(state)
    free, held, empty = kind == 0, kind == 1, kind == 2
    assert int(held.sum()) > 60 and int(free.sum()) > 100
    assert torch.allclose(placed.sphere_pos[free, 2], hz[free])
    assert torch.allclose(placed.sphere_pos[held, 2] - placed.tcp_pos[held, 2], 1.3 * hz[held])
    assert torch.allclose(placed.finger_width[held], 2 * state.sphere_radius[held])
    cube = held & (state.target_kind == KIND_BOX)
    assert int(cube.sum()) > 10 and bool((placed.target_yaw[cube] == placed.wrist_yaw[cube]).all())
    free_cube = free & (state.target_kind == KIND_BOX)
    assert torch.equal(placed.target_yaw[free_cube], state.target_yaw[free_cube])
    depth = ((placed.sphere_pos - placed.tcp_pos - placed.cam_offset)[:, None] @ placed.cam_rot).squeeze(1)[:, 2]
    assert bool((depth[empty] < 0).all())  # behind the camera


@pytest.mark.parametrize("kind,code", [("cube", KIND_BOX), ("cylinder", KIND_CYLINDER)])
def test_composites_of_a_kind_have_exact_masks_of_plausible_size(bank, kind, code):
    """Every target-visible frame holds its kind; the mask is the rendered target (inside the object layer), empty
    on target-free frames, and its size is that of a target 1.2-4 cm across seen from 11-36 cm: larger than the
    sphere's of the same scenes, a held target larger still."""
    n = 192
    sphere = Composer(bank, SimConfig())(n, _gen(2))
    c = Composer(bank, SimConfig(target=TargetConfig(kinds=(kind,))))(n, _gen(2))
    assert bool((c.target_kind == code).all())
    area = c.mask.flatten(1).sum(1)
    assert not c.mask[c.kind == 2].any()
    assert not (c.mask & ~c.layer_alpha)[c.kind != 3].any()
    free = (c.kind == 0) & (area > 0)
    assert int(free.sum()) > 60 and bool((area[c.kind == 1] > 0).all())
    eq = 2 * (area.float() / math.pi).sqrt()
    med = float(eq[free].median())
    s_area = sphere.mask.flatten(1).sum(1)
    s_med = float((2 * (s_area.float() / math.pi).sqrt())[(sphere.kind == 0) & (s_area > 0)].median())
    assert 1.3 * s_med < med < 12.0, (med, s_med)
    assert float(eq[c.kind == 1].median()) > med


def test_target_scale_keeps_every_kind_on_the_table_and_in_proportion():
    cfg = SimConfig(target=TargetConfig(kinds=MIX))
    state = sample_scenes(cfg, 200, _gen(3))
    aug = AugmentConfig(clean_fraction=0.0, target_scale=(0.5, 2.0))
    out = scale_targets(state, aug, _gen(4))
    s = out.sphere_radius / state.sphere_radius
    assert float(s.min()) >= 0.5 and float(s.max()) <= 2.0 and float(s.std()) > 0.1
    assert torch.allclose(out.target_half_height / state.target_half_height, s)
    assert torch.allclose(out.sphere_pos[:, 2], target_half_height(out))  # resting on the table
    assert torch.equal(out.target_kind, state.target_kind) and torch.equal(out.target_yaw, state.target_yaw)


# ------------------------------------------------------------------------------------------ transfer frames
@pytest.fixture(scope="module")
def sphere_frames():
    return generate(TEST_PHOTOS, 12, seed=5)


def test_transfer_cubes_are_square_outlines_in_the_simulators_sizes(sphere_frames):
    rgb, masks, metas = generate(TEST_PHOTOS, 12, seed=5, kinds=("cube",))
    whole = 0
    for k, (mask, meta) in enumerate(zip(masks, metas)):
        if not meta.has_target:
            assert meta.kind == NO_KIND and not mask.any()
            # target-free frames are the sphere-only set's, pixel for pixel
            assert np.array_equal(rgb[k], sphere_frames[0][k])
            continue
        assert meta.kind == "cube" and mask.sum() == meta.visible_px > 0
        if meta.truncated or meta.occluded:
            continue
        whole += 1
        ys, xs = np.nonzero(mask)
        h, w = np.ptp(ys) + 1, np.ptp(xs) + 1
        # a turned cube seen from above: a compact, convex, four- to six-sided outline
        assert 0.5 <= h / w <= 2.0, (meta.name, h, w)
        assert 0.45 <= mask.sum() / (h * w) <= 1.0, (meta.name, mask.sum(), h * w)
        hull = cv2.convexHull(np.stack([xs, ys], 1).astype(np.int32))
        assert mask.sum() >= 0.8 * cv2.contourArea(hull), meta.name
        # the mask has the area of the projected cube (diameter_px: the outline's equivalent diameter)
        eq = 2 * math.sqrt(mask.sum() / math.pi)
        assert abs(eq - meta.diameter_px) <= 0.2 * meta.diameter_px + 1.0, (meta.name, eq, meta.diameter_px)
        # 1.5-3 cm seen from where the 1.25-1.5 cm sphere spans 2.5-8 px
        assert 2.5 <= meta.diameter_px <= 26.0, meta.name
        # the target is the reddish thing there
        px = rgb[k][mask].astype(float)
        assert px[:, 0].mean() > px[:, 2].mean(), meta.name
    assert whole >= 4


def test_transfer_mix_records_kinds_and_keeps_sphere_frames(tmp_path, sphere_frames):
    """A mix draws each kind, and its sphere and target-free frames are the sphere-only set's; the written set's
    meta.csv gets a kind column that eval-real reads back; the default set has no such column."""
    rgb, masks, metas = generate(TEST_PHOTOS, 12, seed=5, kinds=MIX)
    kinds = [m.kind for m in metas]
    assert {"sphere", "cube", "cylinder"} <= set(kinds) and kinds[3::4] == [NO_KIND] * 3
    for k, m in enumerate(metas):
        if m.kind in ("sphere", NO_KIND):
            assert np.array_equal(rgb[k], sphere_frames[0][k]) and np.array_equal(masks[k], sphere_frames[1][k])
        else:
            assert masks[k].any()
    from graspsim.cli.cli import main

    assert main(["render-transfer", "--photos", str(TEST_PHOTOS), "--n", "4", "--seed", "5", "--kinds",
                 "sphere,cube,cylinder", "--out", str(tmp_path / "mix")]) == 0
    header = (tmp_path / "mix" / "meta.csv").read_text().splitlines()[0].split(",")
    assert header == [*META_FIELDS, KIND_COLUMN]
    stems = [f"frame_{k:05d}" for k in range(4)]
    assert read_kinds(tmp_path / "mix" / "images", stems) == dict(zip(stems, kinds[:4]))
    assert main(["render-transfer", "--photos", str(TEST_PHOTOS), "--n", "1", "--out", str(tmp_path / "plain")]) == 0
    assert read_kinds(tmp_path / "plain" / "images", ["frame_00000"]) is None


def test_unknown_kind_is_one_line_naming_it_and_the_known_kinds(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"^RenderTransferConfig\.kinds: unknown kind 'pyramid'; known kinds: "
                                         r"sphere, cube, cylinder$"):
        RenderTransferConfig(out=tmp_path / "x", kinds=("sphere", "pyramid"))
    assert RenderTransferConfig(out=tmp_path / "x", kinds=("cube,cylinder",)).kinds == ("cube", "cylinder")
    from graspsim.cli.cli import main

    assert main(["render-transfer", "--kinds", "cube,pyramid", "--out", str(tmp_path / "y")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'pyramid'" in err[0] and "sphere, cube, cylinder" in err[0], err
    assert not (tmp_path / "y").exists()


# ------------------------------------------------------------------------------------------ per-kind metrics
def test_kind_groups_and_rows_from_counts_match_the_pooled_metrics():
    kinds = ["cube", "sphere", "none", "cube", "cylinder", "none"]
    has = np.array([1, 1, 0, 1, 1, 0], bool)
    groups = kind_groups(kinds, has)
    assert list(groups) == ["sphere", "cube", "cylinder"]
    assert groups["cube"].tolist() == [True, False, True, True, False, True]
    tp, fp, fn = np.array([8, 5, 0, 2, 4, 0]), np.array([2, 0, 3, 0, 1, 0]), np.array([0, 5, 0, 2, 0, 0])
    gt, pred = tp + fn, tp + fp
    rows = subset_metrics_from_counts(groups, tp, fp, fn, gt, pred, min_pixels=1)
    assert rows["cube"]["iou"] == pytest.approx(10 / 14) and rows["cube"]["precision"] == pytest.approx(10 / 12)
    assert rows["cube"]["recall"] == pytest.approx(10 / 12) and rows["cube"]["num_target_images"] == 2
    assert rows["sphere"]["false_positive_image_rate"] == 0.5 == rows["cube"]["false_positive_image_rate"]
    assert rows["cylinder"]["num_empty_images"] == 2
    # the same rows from probabilities (train-vision's transfer report)
    H = 4
    prob = torch.zeros(6, H, H)
    gt_t = torch.zeros(6, H, H, dtype=torch.bool)
    for i in range(6):
        flat_p, flat_g = prob[i].view(-1), gt_t[i].view(-1)
        flat_p[: tp[i]] = 1.0
        flat_g[: tp[i] + fn[i]] = True
        flat_p[H * H - fp[i]:] = 1.0
        flat_g[: tp[i]] = True
    rows_t = subset_metrics(prob, gt_t, {k: torch.from_numpy(v) for k, v in groups.items()}, 0.5, 1)
    for k in rows:
        for key in ("iou", "precision", "recall", "false_positive_image_rate"):
            assert rows_t[k][key] == pytest.approx(rows[k][key]), (k, key)
    assert meets_kind_targets({"iou": 0.9, "precision": 0.95, "recall": 0.9, "false_positive_image_rate": 0.01})
    assert not meets_kind_targets({"iou": 0.9, "precision": 0.95, "recall": 0.87, "false_positive_image_rate": 0.0})
    assert meets_kind_targets({"iou": 0.9, "precision": 0.95, "recall": 0.9, "false_positive_image_rate": float("nan")})


def test_transfer_report_and_eval_real_give_per_kind_rows(tmp_path):
    """A set whose meta.csv names kinds: train-vision's transfer report and eval-real both add one row per kind (a
    net that predicts the masks exactly scores 1 everywhere); a set without kinds gets none."""
    import dataclasses

    from graspsim.vision.checkpoint import save_checkpoint
    from graspsim.vision.evaluate import EvalRealConfig, evaluate_real
    from graspsim.vision.image_set import ImageSetWriter
    from graspsim.vision.model import SegNet, SegNetConfig
    from graspsim.vision.transfer import load_transfer_set
    from graspsim.vision.transfer_report import transfer_by_kind

    rng = np.random.default_rng(0)
    kinds = ["sphere", "cube", "cylinder", NO_KIND, "cube", "sphere"]
    with ImageSetWriter(tmp_path / "set" / "test", masks=True) as w:
        for k in kinds:
            mask = np.zeros((64, 64), bool)
            if k != NO_KIND:
                y, x = rng.integers(5, 55, 2)
                mask[y:y + 4, x:x + 3 + (k == "cube")] = True
            w.add(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8), mask, {"kind": k, "has_target": k != NO_KIND})
    tset = load_transfer_set("test", root=tmp_path / "set")
    rows = transfer_by_kind(tset.mask.float(), tset, 0.5, 1)
    assert list(rows) == ["sphere", "cube", "cylinder"]
    assert rows["cube"]["num_target_images"] == 2 and rows["cube"]["num_empty_images"] == 1
    assert all(r["iou"] == 1.0 and r["false_positive_image_rate"] == 0.0 and r["meets_targets"] for r in rows.values())
    tset.meta = [{} for _ in tset.meta]
    assert transfer_by_kind(tset.mask.float(), tset, 0.5, 1) == {}

    cfg = SegNetConfig(base_channels=4, max_channels=8, depth=2)
    ck = tmp_path / "c.pt"
    save_checkpoint(ck, {"model": SegNet(cfg).state_dict(), "model_config": dataclasses.asdict(cfg), "config": {},
                         "step": 0, "threshold": 0.5, "image_size": 64, "probe_rgb": None})
    folder = tmp_path / "set" / "test"
    res = evaluate_real(EvalRealConfig(images=folder / "images", masks=folder / "masks", vision=ck, out=tmp_path / "er",
                                       precision="fp32"))
    m = json.loads((tmp_path / "er" / "metrics.json").read_text())
    assert list(m["by_kind"]) == ["sphere", "cube", "cylinder"] == list(res["by_kind"])
    assert m["by_kind"]["cube"]["num_target_images"] == 2 and m["by_kind"]["sphere"]["num_empty_images"] == 1
    for k, row in m["by_kind"].items():  # each row pools its own frames' counts
        frames = [r for r in _csv(tmp_path / "er" / "per_image.csv") if r["kind"] == k]
        tp = sum(int(r["tp"]) for r in frames)
        assert row["recall"] == pytest.approx(tp / sum(int(r["gt_pixels"]) for r in frames))
    assert "By target kind" in (tmp_path / "er" / "report.html").read_text()
    for row in (m, *m["by_kind"].values()):  # every pooled number has its interval, which holds it
        for k in ("iou", "precision", "recall", "false_positive_image_rate"):
            lo, hi = row["ci95"][k]
            assert lo <= row[k] + 1e-9 and row[k] <= hi + 1e-9 or not math.isfinite(row[k])
    again = evaluate_real(EvalRealConfig(images=folder / "images", masks=folder / "masks", vision=ck,
                                         out=tmp_path / "er2", precision="fp32", bootstrap=0))
    assert "ci95" not in again and "ci95" not in again["by_kind"]["cube"]


def _csv(path: Path) -> list[dict]:
    import csv

    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_train_vision_on_a_mix_reports_composite_and_transfer_rows_per_kind(tmp_path):
    """A (tiny) train-vision run with --sim.target.kinds sphere,cube,cylinder and transfer sets of that mix: the
    composite test and the transfer test each get one row per kind."""
    from graspsim.runtime import RuntimeConfig
    from graspsim.vision.foreign_render import write_set
    from graspsim.vision.model import SegNetConfig
    from graspsim.vision.train import TrainVisionConfig, train_vision

    for split, seed in (("val", 11), ("test", 23)):
        write_set(tmp_path / "tr" / split, DEFAULT_BACKGROUNDS / split, 12, seed, kinds=MIX)
    tiny = SegNetConfig(base_channels=4, max_channels=8, depth=2, chroma=True)
    m = train_vision(TrainVisionConfig(out=tmp_path / "run", sim=SimConfig(target=TargetConfig(kinds=MIX)),
                                       transfer=tmp_path / "tr", batch_size=8, steps=2, val_every=2, ckpt_every=2,
                                       n_val=48, n_test=48, model=tiny, mirror_tta=False,
                                       runtime=RuntimeConfig(threads=1, progress=False)))
    assert list(m["test"]["by_kind"]) == list(MIX)
    assert sum(r["num_target_images"] for r in m["test"]["by_kind"].values()) == m["test"]["num_target_images"]
    rows = m["transfer_test_by_kind"]
    assert set(rows) <= set(MIX) and len(rows) >= 2
    assert sum(r["num_target_images"] for r in rows.values()) == m["transfer_test"]["num_target_images"]
    assert all(r["num_empty_images"] == m["transfer_test"]["num_empty_images"] for r in rows.values())
