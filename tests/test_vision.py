"""Vision module: background bank, composition invariants, checkpoints, Segmenter, eval-real, training."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from graspsim.runtime import RuntimeConfig
from graspsim import SimConfig, render, sample_scenes
from graspsim.vision.backgrounds import DEFAULT_BACKGROUNDS, BackgroundBank, resolve_split
from graspsim.vision.checkpoint import KIND, load_checkpoint, save_checkpoint
from graspsim.vision.compose import ComposeConfig, Composer, place_camera
from graspsim.vision.evaluate import EvalRealConfig, evaluate_real
from graspsim.vision.infer import Segmenter
from graspsim.vision.image_set import read_image
from graspsim.vision.metrics import SegMetrics
from graspsim.vision.model import FEATURE_CHUNK, SegNet, SegNetConfig, cpu_has_fast_bf16, input_features
from graspsim.vision.train import TrainVisionConfig

torch.set_num_threads(2)
TINY = SegNetConfig(base_channels=4, max_channels=8, depth=2)


def _write(path: Path, img: np.ndarray) -> Path:
    ok, buf = cv2.imencode(path.suffix, img)
    assert ok
    path.write_bytes(buf.tobytes())
    return path


def _photos(folder: Path, rng: np.random.Generator) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder / "gray.png", rng.integers(0, 255, (37, 53), dtype=np.uint8))
    _write(folder / "rgba.png", rng.integers(0, 255, (20, 90, 4), dtype=np.uint8))
    _write(folder / "deep.png", rng.integers(0, 65535, (70, 41, 3), dtype=np.uint16))
    _write(folder / "photo.JPG", rng.integers(0, 255, (100, 120, 3), dtype=np.uint8))
    return folder


# ----------------------------------------------------------------------------------------------- io / bank
def test_read_image_formats(tmp_path):
    rng = np.random.default_rng(0)
    _photos(tmp_path, rng)
    for name, shape in [("gray.png", (37, 53, 3)), ("rgba.png", (20, 90, 3)), ("deep.png", (70, 41, 3)),
                        ("photo.JPG", (100, 120, 3))]:
        img = read_image(tmp_path / name)
        assert img.shape == shape and img.dtype == np.uint8
    g = read_image(tmp_path / "gray.png")
    assert (g[..., 0] == g[..., 1]).all() and (g[..., 1] == g[..., 2]).all()
    # RGBA: alpha dropped, channels converted BGR -> RGB
    raw = cv2.imread(str(tmp_path / "rgba.png"), cv2.IMREAD_UNCHANGED)
    assert np.array_equal(read_image(tmp_path / "rgba.png"), raw[..., 2::-1])


def test_bank_sizes_and_determinism(tmp_path):
    bank = BackgroundBank.from_folder(_photos(tmp_path, np.random.default_rng(1)), size=32)
    assert len(bank) == 4
    a, b, c = bank.sample(9, seed=5), bank.sample(9, seed=5), bank.sample(9, seed=6)
    assert a.shape == (9, 32, 32, 3) and a.dtype == np.uint8
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    t = bank.sample_tensor(3, torch.Generator().manual_seed(0))
    assert t.shape == (3, 3, 32, 32) and t.dtype == torch.float32 and 0 <= float(t.min()) and float(t.max()) <= 1


def test_bank_empty_folder_and_missing_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no images here")
    with pytest.raises(ValueError, match="no PNG/JPEG"):
        BackgroundBank.from_folder(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="does_not_exist"):
        BackgroundBank.from_folder(tmp_path / "does_not_exist")


def test_bank_corrupt_file_named_and_skip_bad(tmp_path):
    folder = _photos(tmp_path / "bg", np.random.default_rng(2))
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    with pytest.raises(ValueError, match="broken.jpg"):
        BackgroundBank.from_folder(folder)
    bank = BackgroundBank.from_folder(folder, skip_bad=True)
    assert len(bank) == 4 and len(bank.skipped) == 1 and bank.skipped[0].endswith("broken.jpg")


def test_bank_from_several_folders_keeps_their_order_and_names_an_empty_one(tmp_path):
    a = _photos(tmp_path / "a", np.random.default_rng(1))
    b = tmp_path / "b"
    b.mkdir()
    _write(b / "extra.png", np.random.default_rng(3).integers(0, 255, (40, 40, 3), dtype=np.uint8))
    bank = BackgroundBank.from_folder([a, b], size=32)
    assert bank.names == BackgroundBank.from_folder(a, size=32).names + ["extra.png"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty"):
        BackgroundBank.from_folder([a, tmp_path / "empty"])
    with pytest.raises(ValueError, match="at least one folder"):
        BackgroundBank.from_folder([])


def test_extra_training_photos_join_the_bank_and_may_not_be_validation_photos(tmp_path):
    from graspsim.vision.train import build_composers
    from graspsim.vision.train_config import TrainVisionConfig

    extra = _photos(tmp_path / "extra", np.random.default_rng(4))
    cfg = TrainVisionConfig(out=tmp_path / "run", extra_backgrounds=(extra,))
    train, val = build_composers(cfg)
    plain, plain_val = build_composers(TrainVisionConfig(out=tmp_path / "run"))
    assert train.bank.names == plain.bank.names + sorted(p.name for p in extra.iterdir())
    assert val.bank.names == plain_val.bank.names  # the validation photos are unchanged
    leak = tmp_path / "leak"
    leak.mkdir()
    shutil.copy(next((DEFAULT_BACKGROUNDS / "val").glob("*.jpg")), leak / "renamed.jpg")
    with pytest.raises(ValueError, match="share identical files"):
        build_composers(TrainVisionConfig(out=tmp_path / "run", extra_backgrounds=(leak,)))


def test_shipped_backgrounds_split_is_disjoint():
    train, val = resolve_split(DEFAULT_BACKGROUNDS, None)
    tn = {p.name for p in train.iterdir() if p.suffix == ".jpg"}
    vn = {p.name for p in val.iterdir() if p.suffix == ".jpg"}
    assert len(tn) + len(vn) >= 15 and vn and not (tn & vn)
    sources = (DEFAULT_BACKGROUNDS / "SOURCES.md").read_text()
    for n in tn | vn:
        assert n in sources, f"{n} has no origin/licence line in SOURCES.md"


# ----------------------------------------------------------------------------------------------- composition
def test_target_layer_alpha_equals_mask():
    cfg = SimConfig()
    g = torch.Generator().manual_seed(0)
    state, kind = place_camera(sample_scenes(cfg, 64, g), cfg, ComposeConfig(), g)
    layer = render(state, cfg, table=False, fingers=False, distractors=False, post=False)
    assert torch.equal(layer.alpha, layer.mask)
    assert bool(layer.mask.any())
    assert not bool(layer.mask[kind == 2].any())  # removed targets leave no pixel


def _bank64():
    return BackgroundBank.from_folder(DEFAULT_BACKGROUNDS / "train", size=64)


def test_composites_invariants_and_determinism():
    comp = Composer(_bank64(), SimConfig(), ComposeConfig(sim_prob=0.2))
    a = comp(48, torch.Generator().manual_seed(3))
    b = comp(48, torch.Generator().manual_seed(3))
    assert a.rgb.shape == (48, 3, 64, 64) and a.rgb.dtype == torch.uint8 and a.mask.dtype == torch.bool
    assert torch.equal(a.rgb, b.rgb) and torch.equal(a.mask, b.mask)
    assert bool((a.mask <= a.layer_alpha).all())  # target pixels are rendered-object pixels
    empty = a.kind == 2
    assert bool(empty.any()) and not bool(a.mask[empty].any())
    assert bool(a.mask[a.kind == 1].flatten(1).any(1).all())  # held target is always visible


def test_composites_record_their_background_photo_and_metrics_split_by_it():
    from graspsim.vision.train import make_set, per_background

    red, blue = np.zeros((40, 40, 3), np.uint8), np.zeros((40, 40, 3), np.uint8)
    red[..., 0], blue[..., 2] = 200, 200
    bank = BackgroundBank([red, blue], ["red.png", "blue.png"], size=32)
    comp = Composer(bank, SimConfig(image_size=32), ComposeConfig(sim_prob=0.25))
    rgb, mask, bg = make_set(comp, 64, seed=5, with_background=True)
    rgb2, mask2 = make_set(comp, 64, seed=5)  # the index costs no random draws: same frames
    assert torch.equal(rgb, rgb2) and torch.equal(mask, mask2)
    assert set(bg.tolist()) == {-1, 0, 1}
    # background pixels (no rendered object) show the recorded photo's colour
    layers = comp(64, torch.Generator().manual_seed(6))
    free = ~layers.layer_alpha
    for i in range(64):
        if layers.background[i] < 0:
            assert layers.kind[i] == 3  # sim frames have their own table
            continue
        px = layers.rgb[i].float().permute(1, 2, 0)[free[i]]
        r, b = px[:, 0].mean(), px[:, 2].mean()
        assert (r > b) if layers.background[i] == 0 else (b > r)
    probs = mask.float()
    split = per_background(probs, mask, bg, bank.names, 0.5, 1)
    assert set(split) == {"red.png", "blue.png", "(sim scene)"}
    assert sum(m["num_target_images"] + m["num_empty_images"] for m in split.values()) == 64
    assert all(m["iou"] == 1.0 for m in split.values() if m["num_target_images"])


def test_reused_layers_composite_consistently():
    comp = Composer(_bank64(), SimConfig(), ComposeConfig(sim_prob=0.3))
    a = comp(24, torch.Generator().manual_seed(4))
    layers = comp.render_layers(24, torch.Generator().manual_seed(4))
    b = comp.composite(layers, torch.Generator().manual_seed(4))
    assert torch.equal(a.mask, b.mask) and torch.equal(a.kind, b.kind)
    c = comp.composite(layers, torch.Generator().manual_seed(9), hflip=True)
    assert bool((c.mask <= c.layer_alpha).all())
    assert any(not torch.equal(c.mask[i], layers.mask[i]) for i in range(24))  # some frames were mirrored
    per_frame = [torch.equal(c.mask[i], layers.mask[i]) or torch.equal(c.mask[i], layers.mask[i].flip(-1)) for i in range(24)]
    assert all(per_frame) and torch.equal(c.mask.sum((1, 2)), layers.mask.sum((1, 2)))
    assert not torch.equal(c.rgb, b.rgb)  # fresh backgrounds


def test_camouflage_crops_take_the_target_hue():
    from graspsim.vision.backgrounds import _shift_hue_to

    rng = np.random.default_rng(0)
    img = np.zeros((16, 16, 3), np.uint8)
    img[..., 1] = rng.integers(120, 200, (16, 16))  # green
    img[..., 2] = 40
    out = _shift_hue_to(img, 0.01)
    hsv = cv2.cvtColor(out, cv2.COLOR_RGB2HSV_FULL)
    h = hsv[..., 0].astype(float) * 2 * np.pi / 256
    mean = np.arctan2(np.sin(h).mean(), np.cos(h).mean()) / (2 * np.pi)
    assert abs(mean - 0.01) < 0.02
    bank = BackgroundBank.from_folder(DEFAULT_BACKGROUNDS / "train", size=32, camouflage_prob=1.0)
    assert bank.sample(4, 1).shape == (4, 32, 32, 3)
    with pytest.raises(ValueError, match="camouflage_prob"):
        BackgroundBank.from_folder(DEFAULT_BACKGROUNDS / "train", size=32, camouflage_prob=2.0)


def test_all_empty_frames_have_empty_masks():
    comp = Composer(_bank64(), SimConfig(), ComposeConfig(empty_prob=1.0, held_prob=0.0, sim_prob=0.0))
    c = comp(32, torch.Generator().manual_seed(1))
    assert not bool(c.mask.any())


def test_color_matched_camouflage_moves_the_crop_mean_to_the_target_colour():
    from graspsim.vision.compose import match_target_color

    g = torch.Generator().manual_seed(0)
    n = 6
    bg = 0.45 + 0.1 * torch.rand(n, 3, 16, 16, generator=g)  # low contrast: nothing is clamped below
    color = torch.zeros(n, 3, 16, 16)
    mask = torch.zeros(n, 16, 16, dtype=torch.bool)
    tcols = torch.tensor([[0.5, 0.2, 0.15], [0.45, 0.3, 0.2], [0.4, 0.25, 0.15]])
    for i in range(3):  # frames 0-2 hold a target of one colour; 3-4 are target-free; 5 is a sim frame
        mask[i, 4:8, 4:8] = True
        color[i, :, 4:8, 4:8] = tcols[i][:, None, None]
    mask[5, 0, 0] = True
    color[5, :, 0, 0] = tcols[0]
    kind = torch.tensor([0, 0, 1, 2, 2, 3])
    out = match_target_color(bg, color, mask, kind, 1.0, torch.Generator().manual_seed(1))
    mean = out.mean((2, 3))
    for i in range(3):  # the frame's own target colour, within the +-15 % per-channel jitter; texture kept
        assert bool(((mean[i] / tcols[i] - 1).abs() <= 0.15 + 1e-5).all())
        assert torch.allclose(out[i] - mean[i][:, None, None], bg[i] - bg[i].mean((1, 2), keepdim=True), atol=1e-5)
    for i in (3, 4):  # target-free frames take some target frame's colour
        assert any(bool(((mean[i] / t - 1).abs() <= 0.15 + 1e-5).all()) for t in tcols)
    assert torch.equal(out[5], bg[5])  # sim frames keep their own table
    assert torch.equal(match_target_color(bg, color, mask, kind, 0.0, torch.Generator().manual_seed(1)), bg)
    assert torch.equal(match_target_color(bg, color, torch.zeros_like(mask), kind, 1.0, g), bg)  # no target at all
    with pytest.raises(ValueError, match="Composer.color_match_prob"):
        Composer(_bank64(), color_match_prob=1.5)
    with pytest.raises(ValueError, match="color_match_prob"):
        TrainVisionConfig(out=Path("x"), color_match_prob=-0.1)


def test_compose_config_validation():
    with pytest.raises(ValueError, match="empty_prob"):
        ComposeConfig(empty_prob=1.5)
    with pytest.raises(ValueError, match="height"):
        ComposeConfig(height=(0.2, 0.1))
    for bad in (0, 5, 1.5, "2"):
        with pytest.raises(ValueError, match="supersample"):
            ComposeConfig(supersample=bad)
    with pytest.raises(ValueError, match="supersample 4 would render 256 px images at 1024 px"):
        Composer(BackgroundBank.from_folder(DEFAULT_BACKGROUNDS / "train", size=256), SimConfig(image_size=256),
                 ComposeConfig(supersample=4))


def test_supersampled_layers_blend_edges_by_covered_area():
    """``supersample=2``: the same scenes (same draws), the layer averaged from 2x2 samples. Each pixel's coverage is
    a multiple of 1/4, the mask is the target covering half a pixel or more, and edge pixels exist with partial
    coverage; the objects' area agrees with the one-sample render."""
    cfg = SimConfig(embodiment="so101")
    one = Composer(_bank64(), cfg, ComposeConfig(sim_prob=0.0))
    two = Composer(_bank64(), cfg, ComposeConfig(sim_prob=0.0, supersample=2))
    a = one.render_layers(32, torch.Generator().manual_seed(7))
    b = two.render_layers(32, torch.Generator().manual_seed(7))
    assert a.coverage is None and b.coverage is not None and b.coverage.shape == (32, 64, 64)
    assert torch.equal(a.kind, b.kind) and torch.equal(a.target_kind, b.target_kind)
    cov = b.coverage
    assert torch.equal(cov * 4, (cov * 4).round()) and bool(((cov >= 0) & (cov <= 1)).all())
    partial = (cov > 0) & (cov < 1)
    assert int(partial.sum()) > 100  # anti-aliased edges
    assert torch.equal(b.alpha, cov > 0) and bool((b.mask <= b.alpha).all())
    # the covered area matches the one-sample render's pixel count to a few per cent; the masks nearly agree
    assert abs(float(cov.sum()) / float(a.alpha.sum()) - 1) < 0.03
    assert float((a.mask & b.mask).sum() / (a.mask | b.mask).sum()) > 0.9
    # composited without augmentation, the mask is the layer's
    comp = two.composite(b, torch.Generator().manual_seed(8))
    assert torch.equal(comp.mask, b.mask) and bool((comp.mask <= comp.layer_alpha).all())


def test_supersampled_mask_is_the_half_covered_rule():
    """The mask of a supersampled layer equals the 2x render's target mask averaged over 2x2 blocks, thresholded
    at one half; its colour is the covered samples' mean."""
    from graspsim.vision.compose import _render_down

    cfg = SimConfig(embodiment="so101")
    state = sample_scenes(cfg, 8, torch.Generator().manual_seed(2))
    color, mask, alpha, cover = _render_down(state, cfg, 2, table=False, shadows=None)
    big = render(state.replace(focal=state.focal * 2), dataclasses.replace(cfg, image_size=128), table=False, post=False)
    blocks = big.mask.view(8, 64, 2, 64, 2).float().mean((2, 4))
    assert torch.equal(mask, blocks >= 0.5)
    assert torch.equal(cover, big.alpha.view(8, 64, 2, 64, 2).float().mean((2, 4)))
    summed = big.color.view(8, 3, 64, 2, 64, 2).sum((3, 5))
    n = big.alpha.view(8, 1, 64, 2, 64, 2).sum((3, 5)).float()
    assert torch.allclose(color[n.expand_as(color) > 0], (summed / n.clamp_min(1))[n.expand_as(color) > 0], atol=1e-5)


# ----------------------------------------------------------------------------------------------- checkpoints
def _ckpt(path: Path, model: SegNet, threshold: float = 0.5, probe=None) -> Path:
    save_checkpoint(path, {"model": model.state_dict(), "model_config": dataclasses.asdict(model.cfg),
                           "config": {}, "step": 0, "threshold": threshold, "image_size": 64, "probe_rgb": probe})
    return path


def test_halfres_net_shapes_stride_cost_and_old_configs():
    """The issue-27 design: full-resolution logits from a half-resolution net, inputs that are multiples of its
    stride, under a fifth of the whole-frame U-Net's cost, and stored configs without ``arch`` (every earlier
    checkpoint) rebuild the U-Net."""
    from torch.utils.flop_counter import FlopCounterMode

    from graspsim.vision.train_config import HALFRES_MODEL, UNET_MODEL

    torch.manual_seed(0)
    net = SegNet(HALFRES_MODEL).eval()
    assert HALFRES_MODEL.arch == "halfres" and net.multiple == 8 == HALFRES_MODEL.multiple
    x = torch.rand(3, 3, 64, 64)
    assert net(x).shape == (3, 64, 64) and net(x[..., :24, :40]).shape == (3, 24, 40)
    with pytest.raises(ValueError, match="multiples of 8"):
        net(x[..., :20, :])
    flops = {}
    for name, m in (("halfres", net), ("unet", SegNet(UNET_MODEL))):
        with FlopCounterMode(display=False) as fc:
            m.eval()(x[:1])
        flops[name] = fc.get_total_flops() / 1e6
    assert flops["halfres"] <= 40.0 and flops["unet"] > 5 * flops["halfres"], flops
    old = dataclasses.asdict(TINY)
    del old["arch"]  # a config stored before the key existed
    assert SegNetConfig(**old).arch == "unet" and SegNetConfig(**old).multiple == 4
    with pytest.raises(ValueError, match="arch"):
        SegNetConfig(arch="resnet")
    # the output keeps full resolution: a one-pixel change moves the logit of that pixel
    x1 = x[:1].clone()
    x1[0, :, 33, 41] = 1.0 - x1[0, :, 33, 41]
    with torch.no_grad():
        d = (net(x1) - net(x[:1])).abs()[0]
    assert float(d[33, 41]) > 0


def test_full_resolution_stage_and_distillation(tmp_path):
    """``full_channels`` adds full-resolution stages to the half-resolution net (needs arch halfres); a short run
    with ``--teacher`` trains with the distillation term, and a teacher that is not a vision checkpoint, or whose
    stride does not divide the patch, is refused naming it before anything is written."""
    from graspsim.vision.model import fold_batchnorm
    from graspsim.vision.train import train_vision

    cfg = SegNetConfig(arch="halfres", base_channels=4, max_channels=8, depth=1, chroma=True, full_channels=4)
    net = SegNet(cfg).eval()
    assert net(torch.rand(2, 3, 16, 16)).shape == (2, 16, 16)
    torch.testing.assert_close(fold_batchnorm(net)(torch.rand(2, 3, 8, 8)).shape, torch.Size([2, 8, 8]))
    with pytest.raises(ValueError, match="full_channels needs arch='halfres'"):
        SegNetConfig(full_channels=4)
    teacher = _ckpt(tmp_path / "teacher.pt", SegNet(dataclasses.replace(TINY, depth=3)))  # a U-Net of stride 8
    kw = dict(batch_size=4, val_every=3, ckpt_every=3, n_val=16, n_test=8, model=cfg, patch=8, transfer=None,
              operating_point="composite", runtime=RuntimeConfig(threads=2, progress=False))
    r = train_vision(TrainVisionConfig(out=tmp_path / "run", steps=3, teacher=teacher, teacher_weight=0.5, **kw))
    assert r["steps"] == 3 and json.loads((tmp_path / "run" / "config.json").read_text())["teacher"] == str(teacher)
    with pytest.raises(ValueError, match="teacher.pt: its net's stride 8 does not divide --patch 12"):
        train_vision(TrainVisionConfig(out=tmp_path / "run2", steps=3, teacher=teacher, **{**kw, "patch": 12}))
    assert not (tmp_path / "run2").exists()
    torch.save({"kind": "graspsim-control", "format_version": 1}, tmp_path / "ctl.pt")
    with pytest.raises(ValueError, match="ctl.pt"):
        train_vision(TrainVisionConfig(out=tmp_path / "run3", steps=3, teacher=tmp_path / "ctl.pt", **kw))
    with pytest.raises(FileNotFoundError, match="TrainVisionConfig.teacher"):
        TrainVisionConfig(out=tmp_path / "run4", teacher=tmp_path / "missing.pt")


CROPPED = SegNetConfig(base_channels=4, max_channels=8, depth=2, chroma=True, crop=16, locator_channels=4)


def test_cropped_cascade_is_the_unet_on_the_located_window(tmp_path):
    """A cropped net (issue 27): the locator's best cell centres the window (moved inside the frame at the edges);
    the window's logits are the U-Net's on that window, every other pixel is OUTSIDE_LOGIT; mirror averaging mirrors
    the window only. Checked against a per-frame slicing reference; the Segmenter (BatchNorm folded) gives the same.
    In training, the U-Net also runs on the windows the locator picks."""
    from graspsim.vision.model import OUTSIDE_LOGIT, fold_batchnorm, window_indices

    cells = torch.full((3, 16, 16), -5.0)
    cells[0, 7, 9] = 2.0  # centre (30, 38): window rows 22..37, cols 30..45
    cells[1, 0, 15] = 2.0  # top-right corner: the window is moved inside the frame
    cells[2, 15, 0] = 2.0
    idx = window_indices(cells, 16, (64, 64))
    assert idx.shape == (3, 256)
    for b, (r0, c0) in enumerate(((22, 30), (0, 48), (48, 0))):
        assert int(idx[b, 0]) == r0 * 64 + c0 and int(idx[b, -1]) == (r0 + 15) * 64 + c0 + 15

    torch.manual_seed(0)
    net = SegNet(CROPPED)
    x = torch.rand(4, 3, 64, 64)
    patches = torch.rand(5, 3, 16, 16)
    for _ in range(3):  # running statistics away from their initial values
        logits, cells, index = net(patches, frames=x)
    assert logits.shape == (9, 16, 16) and cells.shape == (4, 16, 16) and index.shape == (4, 256)
    net.eval()
    with torch.no_grad():
        got, got_m = net(x), net.mirror_averaged(x)
        feats = net._inputs(x)
        cells = net.locator(feats)
        for b in range(4):
            i = int(cells[b].flatten().argmax())
            r0 = min(max(i // 16 * 4 + 2 - 8, 0), 48)
            c0 = min(max(i % 16 * 4 + 2 - 8, 0), 48)
            win = feats[b:b + 1, :, r0:r0 + 16, c0:c0 + 16]
            for out, u in ((got, net._unet(win)), (got_m, 0.5 * (net._unet(win) + net._unet(win.flip(-1)).flip(-1)))):
                torch.testing.assert_close(out[b, r0:r0 + 16, c0:c0 + 16], u[0], atol=1e-5, rtol=1e-4)
                outside = torch.ones(64, 64, dtype=torch.bool)
                outside[r0:r0 + 16, c0:c0 + 16] = False
                assert bool((out[b][outside] == OUTSIDE_LOGIT).all())
            # the training call's window of frame b is the same window
            torch.testing.assert_close(net(patches, frames=x)[0][5 + b], net._unet(win)[0], atol=1e-5, rtol=1e-4)
        # inputs of the crop's size (training patches) run the U-Net alone
        torch.testing.assert_close(net(x[:, :, :16, :16]), net._unet(net._inputs(x[:, :, :16, :16])))
        torch.testing.assert_close(fold_batchnorm(net)(x), got, atol=1e-4, rtol=1e-4)
    seg = Segmenter(net, image_size=64, precision="fp32", mirror_tta=True)
    rgb = (x * 255).to(torch.uint8)
    torch.testing.assert_close(seg.logits(rgb), net.mirror_averaged(rgb.float() / 255), atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="crop needs arch='unet'"):
        SegNetConfig(arch="halfres", crop=16)
    with pytest.raises(ValueError, match="multiple of the net's stride 4"):
        SegNetConfig(depth=2, crop=18)
    with pytest.raises(ValueError, match="needs frames at least 16 px"):
        net(torch.rand(1, 3, 8, 40))
    with pytest.raises(ValueError, match="set --patch 16"):
        TrainVisionConfig(out=tmp_path / "x", model=CROPPED, patch=24)


def test_recentred_window_takes_the_centroid_of_the_confident_cells_near_the_best_one():
    """SegNetConfig.recentre: the window is centred on the probability-weighted centroid of the cells above
    RECENTRE_LOGIT within ``recentre`` cells of the best one; far cells and weak cells do not pull it; 0 keeps the best
    cell, bit for bit as before."""
    from graspsim.vision.model import window_indices

    cells = torch.full((3, 16, 16), -5.0)
    cells[0, 4:9, 4:9] = 3.0  # a 5x5-cell blob (centre cell 6, 6 -> pixel 26) ...
    cells[0, 4, 4] = 4.0  # ... whose best cell is its corner (cell 4, 4 -> pixel 18)
    cells[1] = cells[0]
    cells[1, 14, 14] = 3.5  # a confident cell far away (10 cells off) does not pull the window
    cells[2, 7, 9] = 2.0  # alone: the best cell
    cells[2, 7, 10] = 0.5  # a weak neighbour below RECENTRE_LOGIT does not count
    old = window_indices(cells, 16, (64, 64))
    assert int(old[0, 0]) == (18 - 8) * 64 + (18 - 8)  # the best cell: the blob's far half is cut
    new = window_indices(cells, 16, (64, 64), recentre=4)
    for b, (r0, c0) in enumerate(((18, 18), (18, 18), (22, 30))):
        assert int(new[b, 0]) == r0 * 64 + c0, b
    for b, (r0, c0) in enumerate(((10, 10), (10, 10), (22, 30))):  # recentre 0: the best cell, as before
        assert int(old[b, 0]) == r0 * 64 + c0, b
    with pytest.raises(ValueError, match="recentre"):
        SegNetConfig(crop=16, recentre=-1)
    with pytest.raises(ValueError, match="recentre moves the cascade's window: it needs crop > 0"):
        SegNetConfig(recentre=4)


def test_cropped_context_reaches_the_window_and_the_patches_of_its_frame():
    """``SegNetConfig.context``: the locator's pooled whole-frame features shift the window U-Net's bottleneck. At
    inference both mirror views of a frame's window get that frame's context; in training, patch i gets the context
    of the frame it was cut from (frame i // patches per frame) and window j that of frame j."""
    torch.manual_seed(0)
    net = SegNet(dataclasses.replace(CROPPED, context=True)).eval()
    with torch.no_grad():
        net.context.bias.normal_()  # a context that matters
        x, patches = torch.rand(3, 3, 64, 64), torch.rand(6, 3, 16, 16)
        f = net._inputs(x)
        cells, ctx = net._locate(f)
        assert ctx.shape == (3, net.channels[-1]) and not torch.allclose(ctx[0], ctx[1])
        got = net.mirror_averaged(x)
        logits = net(patches, frames=x)[0]
        pf = net._inputs(patches)
        for b in range(3):
            i = int(cells[b].flatten().argmax())
            r0, c0 = min(max(i // 16 * 4 - 6, 0), 48), min(max(i % 16 * 4 - 6, 0), 48)
            win = f[b:b + 1, :, r0:r0 + 16, c0:c0 + 16]
            c = ctx[b:b + 1]
            want = 0.5 * (net._unet(win, c) + net._unet(win.flip(-1), c).flip(-1))
            torch.testing.assert_close(got[b, r0:r0 + 16, c0:c0 + 16], want[0], atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(logits[6 + b], net._unet(win, c)[0], atol=1e-5, rtol=1e-4)
            for k in (2 * b, 2 * b + 1):
                torch.testing.assert_close(logits[k], net._unet(pf[k:k + 1], c)[0], atol=1e-5, rtol=1e-4)
        # without context the same weights give other logits: the term is used
        assert not torch.allclose(net._unet(pf[:1]), net._unet(pf[:1], ctx[:1]))
    with pytest.raises(ValueError, match="needs crop > 0"):
        SegNetConfig(context=True)
    with pytest.raises(ValueError, match="whole number per frame"):
        net(patches[:5], frames=x)


def test_mirrored_window_in_one_grouped_pass_is_the_two_pass_average():
    """Eval mode: the window and its mirror run side by side in the channels through grouped convolutions
    (``SegNet._unet_mirrored``) and give the average of the two separate passes, with the context term, with real
    BatchNorm layers (before folding) and in the folded bfloat16 copy that inference runs; in training mode the
    cascade keeps two passes (each view's own batch statistics)."""
    from graspsim.vision.model import _twin, fold_batchnorm

    torch.manual_seed(0)
    net = SegNet(SegNetConfig(crop=16, base_channels=4, max_channels=16, depth=2, locator_channels=4, context=True,
                              chroma=True))
    for m in net.modules():  # BatchNorm statistics that are not the identity
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5), m.running_var.uniform_(0.5, 2.0)
    net.eval()
    win = torch.randn(5, 7, 16, 16).contiguous(memory_format=torch.channels_last)
    ctx = torch.randn(5, net.channels[-1])
    with torch.no_grad():
        for model in (net, fold_batchnorm(net)):
            want = 0.5 * (model._unet(win, ctx) + model._unet(win.flip(-1), ctx).flip(-1))
            torch.testing.assert_close(model._unet_mirrored(win, ctx), want, atol=1e-5, rtol=1e-5)
        low = fold_batchnorm(net).to(torch.bfloat16)
        w16, c16 = win.to(torch.bfloat16), ctx.to(torch.bfloat16)
        want = 0.5 * (low._unet(w16, c16) + low._unet(w16.flip(-1), c16).flip(-1))
        torch.testing.assert_close(low._unet_mirrored(w16, c16).float(), want.float(), atol=0.05, rtol=0.02)
    with pytest.raises(TypeError, match="no side-by-side form for Dropout"):
        _twin(torch.nn.Dropout(), win)
    net.train()
    calls = []
    net._unet_mirrored = lambda *a: calls.append(a)  # never reached in training mode
    net.mirror_averaged(torch.rand(2, 3, 32, 32))
    assert not calls


def test_default_net_is_the_cascade_at_a_tenth_of_the_unet():
    """The default net is CROPPED_MODEL (issue 40); as deployed (mirror averaging of the window) it is within issue
    27's 40 MFLOP and at least 10x cheaper than the whole-frame U-Net with mirror averaging."""
    from torch.utils.flop_counter import FlopCounterMode

    from graspsim.vision.train_config import CROPPED_MODEL, DEFAULT_MODEL, UNET_MODEL

    assert DEFAULT_MODEL == CROPPED_MODEL and TrainVisionConfig(out="x").model == CROPPED_MODEL
    x = torch.rand(1, 3, 64, 64)
    flops = {}
    for name, cfg in (("cropped", CROPPED_MODEL), ("default", UNET_MODEL)):
        with FlopCounterMode(display=False) as fc, torch.no_grad():
            SegNet(cfg).eval().mirror_averaged(x)
        flops[name] = fc.get_total_flops() / 1e6  # MFLOP, a multiply-add counted as two (as graspsim bench reports)
    assert flops["cropped"] <= 40.0 and flops["default"] >= 10 * flops["cropped"], flops


def test_locator_loss_hand_case():
    """The locator's loss: -log of the softmax mass on the cells holding target pixels, averaged over the frames
    with a target; target-free frames add nothing."""
    from graspsim.vision.model import locator_loss

    cells = torch.zeros(3, 4, 4)
    mask = torch.zeros(3, 16, 16, dtype=torch.bool)
    mask[0, 5:7, 5:7] = True  # one 4x4 cell (1, 1)
    mask[1, 3:5, 0:2] = True  # two cells, (0, 0) and (1, 0)
    torch.testing.assert_close(locator_loss(cells, mask), torch.tensor(0.5 * (math.log(16) + math.log(8))))
    cells[0, 1, 1] = 50.0
    cells[1, 0, 0] = 50.0
    cells[2, 3, 3] = 80.0  # the target-free frame's cells do not matter
    torch.testing.assert_close(locator_loss(cells, mask), torch.tensor(0.0), atol=1e-6, rtol=0)
    assert float(locator_loss(cells[2:], mask[2:])) == 0.0


@pytest.mark.parametrize("context", [False, True])
def test_cropped_net_trains_and_reports_window_coverage(tmp_path, context):
    """A short cropped run: the locator learns beside the U-Net, validation reports the share of target pixels
    inside the chosen windows, and the checkpoint rebuilds a cropped Segmenter (with its context layer if any)."""
    from graspsim.vision.train import train_vision

    model = dataclasses.replace(CROPPED, context=context)
    kw = dict(batch_size=6, val_every=4, ckpt_every=4, n_val=32, n_test=16, model=model, patch=16, transfer=None,
              operating_point="composite", runtime=RuntimeConfig(threads=2, progress=False))
    r = train_vision(TrainVisionConfig(out=tmp_path / "run", steps=4, **kw))
    assert 0.0 <= r["val"]["window_coverage"] <= 1.0
    seg = Segmenter.from_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert seg.model.cfg.crop == 16 and seg.model.cfg.context == context
    assert seg(torch.zeros(2, 3, 64, 64, dtype=torch.uint8)).shape == (2, 64, 64)


def test_folded_batchnorm_keeps_the_outputs():
    """Segmenter runs a copy with BatchNorm folded into the convolutions: same logits as the trained net, for both
    designs, and the trained net keeps its BatchNorm layers (calibration and fine-tuning use them)."""
    from graspsim.vision.model import fold_batchnorm

    for cfg in (TINY, SegNetConfig(arch="halfres", base_channels=4, max_channels=8, depth=2, chroma=True)):
        torch.manual_seed(0)
        net = SegNet(cfg)
        x = torch.rand(6, 3, 32, 32)
        for _ in range(3):  # running statistics away from their initial values
            net(x)
        net.eval()
        folded = fold_batchnorm(net)
        assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())
        assert any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules())
        torch.testing.assert_close(folded(x), net(x), atol=1e-5, rtol=1e-4)
        seg = Segmenter(net, image_size=32, precision="fp32")
        rgb = (x * 255).to(torch.uint8)
        torch.testing.assert_close(seg.logits(rgb), net(rgb.float() / 255), atol=1e-5, rtol=1e-4)


def test_checkpoint_roundtrip_identical_parameters(tmp_path):
    torch.manual_seed(0)
    model = SegNet(TINY)
    seg = Segmenter.from_checkpoint(_ckpt(tmp_path / "c.pt", model), "cpu")
    ref = model.state_dict()
    got = seg.model.state_dict()
    assert ref.keys() == got.keys()
    assert all(torch.equal(ref[k], got[k]) for k in ref)
    assert load_checkpoint(tmp_path / "c.pt")["kind"] == KIND


def test_bad_values_stored_in_a_checkpoint_name_the_file(tmp_path):
    path = _ckpt(tmp_path / "good.pt", SegNet(TINY))
    ck = load_checkpoint(path)
    for key, bad, what in [("peak_threshold", 1.5, "peak_threshold"), ("threshold", 0.0, "threshold"),
                           ("model_config", {"base_channels": 4, "max_channels": 8, "depth": 3}, "state_dict"),
                           ("model_config", {"base_channels": 4, "widht": 8}, "widht")]:
        save_checkpoint(tmp_path / "bad.pt", {**ck, key: bad})
        with pytest.raises(ValueError, match=f"bad.pt.*{what}"):
            Segmenter.from_checkpoint(tmp_path / "bad.pt")


def test_mirror_averaging_is_the_mean_of_the_two_views_and_follows_the_checkpoint(tmp_path):
    torch.manual_seed(3)
    model = SegNet(TINY).eval()
    x = torch.rand(3, 3, 64, 64)
    with torch.no_grad():
        got = model.mirror_averaged(x)
        ref = 0.5 * (model(x) + model(x.flip(-1)).flip(-1))
        assert torch.allclose(got, ref, atol=1e-5)
        # a mirrored input gives the mirrored output: the averaged net is exactly left-right equivariant
        assert torch.allclose(model.mirror_averaged(x.flip(-1)), got.flip(-1), atol=1e-5)
        assert not torch.allclose(model(x.flip(-1)), model(x).flip(-1), atol=1e-3)  # the plain net is not
    rgb = (x * 255).to(torch.uint8)
    ck = load_checkpoint(_ckpt(tmp_path / "c.pt", model))
    assert not Segmenter.from_checkpoint(tmp_path / "c.pt", "cpu").mirror_tta  # older checkpoints: no key, off
    save_checkpoint(tmp_path / "m.pt", {**ck, "mirror_tta": True})
    seg = Segmenter.from_checkpoint(tmp_path / "m.pt", "cpu", precision="fp32")
    assert seg.mirror_tta
    with torch.no_grad():
        ref = model.mirror_averaged(rgb.float().div(255.0))
    assert torch.allclose(seg.logits(rgb), ref, atol=1e-4)
    assert torch.equal(seg.predict_mask(rgb, 0.3), seg(rgb) >= 0.3)
    save_checkpoint(tmp_path / "bad.pt", {**ck, "mirror_tta": "yes"})
    with pytest.raises(ValueError, match="bad.pt.*mirror_tta"):
        Segmenter.from_checkpoint(tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="mirror_tta"):
        TrainVisionConfig(out=Path("x"), mirror_tta=1)


def test_missing_wrong_kind_and_garbage_checkpoints(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        Segmenter.from_checkpoint(tmp_path / "nope.pt")
    torch.save({"kind": "graspsim-control", "model": {}, "config": {}}, tmp_path / "control.pt")
    with pytest.raises(ValueError, match="graspsim-control"):
        Segmenter.from_checkpoint(tmp_path / "control.pt")
    (tmp_path / "garbage.pt").write_bytes(b"not a checkpoint at all")
    with pytest.raises(ValueError, match="not a readable torch checkpoint"):
        Segmenter.from_checkpoint(tmp_path / "garbage.pt")


def test_segmenter_shapes_bf16_check_and_bad_input(tmp_path):
    torch.manual_seed(1)
    probe = torch.randint(0, 256, (4, 3, 64, 64), dtype=torch.uint8)
    seg = Segmenter.from_checkpoint(_ckpt(tmp_path / "c.pt", SegNet(TINY), probe=probe), "cpu")
    if cpu_has_fast_bf16():
        assert seg.bf16_disagreement is not None  # the bf16-vs-fp32 check ran on the probe
    else:
        assert not seg.bf16 and seg.bf16_disagreement is None  # emulated bf16 is slower: never chosen
    rgb = torch.randint(0, 256, (5, 3, 64, 64), dtype=torch.uint8)
    p = seg(rgb)
    m = seg.predict_mask(rgb)
    assert p.shape == (5, 64, 64) and p.dtype == torch.float32 and m.shape == (5, 64, 64) and m.dtype == torch.bool
    fp32 = Segmenter.from_checkpoint(tmp_path / "c.pt", "cpu", precision="fp32")
    assert torch.equal(fp32.predict_mask(rgb, 0.3), fp32(rgb) >= 0.3)
    # frame gate: masks only in frames whose highest probability reaches the peak; equal to thresholding the
    # gated probabilities
    raw = fp32(rgb)
    fp32.peak_threshold = float(raw.flatten(1).amax(1).median())
    kept = raw.flatten(1).amax(1) >= fp32.peak_threshold
    gated = fp32.predict_mask(rgb, 0.3)
    assert torch.equal(gated, (raw >= 0.3) & kept[:, None, None]) and not bool(gated[~kept].any())
    assert torch.equal(gated, fp32(rgb) >= 0.3)
    with pytest.raises(ValueError, match="peak_threshold"):
        Segmenter(SegNet(TINY), peak_threshold=1.0)
    with pytest.raises(ValueError, match="uint8"):
        seg(rgb.float())
    with pytest.raises(ValueError, match="B,3,H,W"):
        seg(rgb[:, :2])


# ----------------------------------------------------------------------------------------------- metrics
def test_metrics_hand_case():
    gt = torch.zeros(3, 8, 8, dtype=torch.bool)
    gt[0, 2:4, 2:4] = True  # 4 px
    prob = torch.zeros(3, 8, 8)
    prob[0, 2:4, 2:4] = 0.9
    prob[0, 2, 4] = 0.8  # one false positive pixel in a target frame
    prob[2, 0, 0] = 0.7  # target-free frame 2 has a predicted pixel; frame 1 has none
    m = SegMetrics(0.5)
    m.update(prob, gt)
    s = m.summary()
    assert s["precision"] == pytest.approx(4 / 5) and s["recall"] == 1.0 and s["iou"] == pytest.approx(4 / 5)
    assert s["f1"] == pytest.approx(8 / 9) and s["false_positive_image_rate"] == 0.5 and s["num_images"] == 3
    c = m.curve()
    i85 = int(np.argmin(np.abs(c["threshold"] - 0.85)))
    assert c["precision"][i85] == 1.0 and c["false_positive_image_rate"][i85] == 0.0


# ----------------------------------------------------------------------------------------------- eval-real
def _real_set(tmp_path: Path, seg: Segmenter, n: int = 4):
    """64x64 images; masks = the model's own prediction at a threshold that leaves one frame empty."""
    rng = np.random.default_rng(7)
    imgs = rng.integers(0, 256, (n, 64, 64, 3), dtype=np.uint8)
    probs = seg(torch.from_numpy(imgs).permute(0, 3, 1, 2).contiguous()).numpy()
    mx = np.sort(probs.reshape(n, -1).max(1))
    thr = float((mx[0] + mx[1]) / 2)  # frame with the lowest max has no predicted pixel
    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    for i in range(n):
        _write(tmp_path / "images" / f"frame_{i:02d}.png", imgs[i][..., ::-1])
        _write(tmp_path / "masks" / f"frame_{i:02d}.png", (probs[i] >= thr).astype(np.uint8) * 255)
    return thr


def test_best_threshold_constraints():
    from graspsim.vision.metrics import best_threshold

    curve = {"threshold": np.array([0.1, 0.5, 0.9]), "f1": np.array([0.9, 0.8, 0.7]),
             "precision": np.array([0.90, 0.94, 0.97]), "false_positive_image_rate": np.array([0.05, 0.01, 0.0])}
    assert best_threshold(curve) == 0.1
    assert best_threshold(curve, 0.02) == 0.5
    assert best_threshold(curve, 0.02, 0.95) == 0.9
    assert best_threshold(curve, 0.02, 0.99) == 0.5  # no threshold reaches the precision: it is dropped
    assert best_threshold(curve, -1.0) == 0.9  # none meets the false-positive limit: the lowest rate wins


def test_frame_gate_and_joint_threshold_choice():
    from graspsim.vision.metrics import choose_thresholds, gate_frames

    # frame 0: a target at 0.6 with a peak of 0.99; frame 1: target-free with one confident false pixel (0.9)
    # and a faint one; frame 2: target-free, faint. A single threshold low enough for the whole target
    # (0.6) also fires on frame 1; the gate at a peak above 0.9 removes frame 1 and keeps frame 0 whole.
    prob = torch.zeros((3, 4, 4))
    gt = torch.zeros((3, 4, 4), dtype=torch.bool)
    gt[0, 1:3, 1:3] = True
    prob[0, 1:3, 1:3] = 0.6
    prob[0, 1, 1] = 0.99
    prob[0, 0, 3] = 0.25  # background next to the target
    prob[1, 0, 0], prob[1, 3, 3] = 0.9, 0.3
    prob[2, 2, 2] = 0.2
    g = gate_frames(prob, 0.95)
    assert torch.equal(g[0], prob[0]) and not bool(g[1:].any())
    assert torch.equal(gate_frames(prob, 0.0), prob)
    t, peak = choose_thresholds(prob, gt, max_fp_image_rate=0.0)
    assert 0.25 < t <= 0.6 and 0.9 < peak <= 0.99
    prob3, gt3 = prob, gt
    # the per-frame-histogram table equals scoring the gated probabilities directly
    from graspsim.vision.metrics import SegMetrics, gated_curves

    r = torch.Generator().manual_seed(0)
    prob = torch.rand((40, 8, 8), generator=r) ** 3
    gt = (torch.rand((40, 8, 8), generator=r) < 0.1) & (torch.arange(40) < 30)[:, None, None]
    table = gated_curves(prob, gt, min_pixels=2, peaks=(0.0, 0.9, 0.97))
    for j, peak in enumerate((0.0, 0.9, 0.97)):
        m = SegMetrics(0.5, 2)
        m.update(gate_frames(prob, peak), gt)
        ref = m.curve()
        for key in ("precision", "recall", "f1", "false_positive_image_rate"):
            np.testing.assert_allclose(table[key][j * 99:(j + 1) * 99], ref[key])
    t, peak = choose_thresholds(prob, gt)
    assert 0.0 < t < 1.0 and (peak == 0.0 or peak > t)
    # without the false-positive constraint the gate buys nothing and is not used
    prob, gt = prob3, gt3
    t, peak = choose_thresholds(prob, gt)
    assert peak == 0.0 and 0.25 < t <= 0.6


def test_eval_real_prediction_equals_ground_truth(tmp_path):
    torch.manual_seed(2)
    ck = _ckpt(tmp_path / "c.pt", SegNet(TINY))
    seg = Segmenter.from_checkpoint(ck, "cpu", precision="fp32")
    thr = _real_set(tmp_path, seg)
    res = evaluate_real(EvalRealConfig(images=tmp_path / "images", masks=tmp_path / "masks", vision=ck,
                                       out=tmp_path / "out", threshold=thr, precision="fp32"))
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    for k in ("precision", "recall", "iou", "f1", "false_positive_image_rate", "num_images"):
        assert k in m
    assert m["iou"] == 1.0 and m["precision"] == 1.0 and m["recall"] == 1.0 and m["f1"] == 1.0
    assert m["false_positive_image_rate"] == 0.0 and m["num_images"] == 4 and m["num_empty_images"] == 1
    assert res["iou"] == 1.0
    rows = (tmp_path / "out" / "per_image.csv").read_text().strip().splitlines()
    assert len(rows) == 5 and rows[0].startswith("file,")
    for name in ("pr_curve.png", "report.html"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    assert len(list((tmp_path / "out" / "overlays").glob("*.png"))) == 4
    assert "frame_00.png" in (tmp_path / "out" / "report.html").read_text()
    with pytest.raises(FileExistsError):  # never overwrite earlier outputs silently
        evaluate_real(EvalRealConfig(images=tmp_path / "images", vision=ck, out=tmp_path / "out"))


def test_eval_real_without_masks_other_size_and_skip_bad(tmp_path):
    torch.manual_seed(3)
    ck = _ckpt(tmp_path / "c.pt", SegNet(TINY))
    imgs = tmp_path / "images"
    imgs.mkdir()
    rng = np.random.default_rng(0)
    _write(imgs / "a.jpg", rng.integers(0, 255, (90, 120, 3), dtype=np.uint8))
    _write(imgs / "b.png", rng.integers(0, 255, (48, 48), dtype=np.uint8))
    (imgs / "c.png").write_bytes(b"\x89PNG\r\n\x1a\n corrupt")
    with pytest.raises(ValueError, match="c.png"):
        evaluate_real(EvalRealConfig(images=imgs, vision=ck, out=tmp_path / "o1"))
    res = evaluate_real(EvalRealConfig(images=imgs, vision=ck, out=tmp_path / "o2", skip_bad=True))
    assert res["num_images"] == 2 and res["num_skipped"] == 1 and res["skipped"][0]["file"].endswith("c.png")
    assert not (tmp_path / "o2" / "metrics.json").exists()
    pred = cv2.imread(str(tmp_path / "o2" / "predictions" / "a.png"), cv2.IMREAD_UNCHANGED)
    assert pred.shape == (90, 120)  # predictions at the original resolution
    assert (tmp_path / "o2" / "report.html").exists()


def test_eval_real_input_errors(tmp_path):
    torch.manual_seed(4)
    ck = _ckpt(tmp_path / "c.pt", SegNet(TINY))
    imgs, masks = tmp_path / "images", tmp_path / "masks"
    imgs.mkdir()
    masks.mkdir()
    _write(imgs / "a.png", np.zeros((64, 64, 3), np.uint8))
    _write(masks / "a.png", np.zeros((32, 64), np.uint8))
    with pytest.raises(ValueError, match="must match"):
        evaluate_real(EvalRealConfig(images=imgs, masks=masks, vision=ck, out=tmp_path / "o"))
    _write(imgs / "b.png", np.zeros((64, 64, 3), np.uint8))
    with pytest.raises(ValueError, match=r"no mask.*b\.png"):
        evaluate_real(EvalRealConfig(images=imgs, masks=masks, vision=ck, out=tmp_path / "o"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no PNG/JPEG"):
        evaluate_real(EvalRealConfig(images=tmp_path / "empty", vision=ck, out=tmp_path / "o"))
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        evaluate_real(EvalRealConfig(images=imgs, vision=tmp_path / "missing.pt", out=tmp_path / "o"))
    torch.save({"kind": "graspsim-control", "model": {}}, tmp_path / "control.pt")
    with pytest.raises(ValueError, match="kind 'graspsim-control'"):
        evaluate_real(EvalRealConfig(images=imgs, vision=tmp_path / "control.pt", out=tmp_path / "o"))
    with pytest.raises(ValueError, match="threshold"):
        EvalRealConfig(images=imgs, vision=ck, out=tmp_path / "o", threshold=1.5)


def test_cli_reports_wrong_kind_cleanly(tmp_path, capsys):
    from graspsim.cli import main

    torch.save({"kind": "graspsim-control"}, tmp_path / "control.pt")
    (tmp_path / "images").mkdir()
    _write(tmp_path / "images" / "a.png", np.zeros((64, 64, 3), np.uint8))
    code = main(["eval-real", "--images", str(tmp_path / "images"), "--vision", str(tmp_path / "control.pt"),
                 "--out", str(tmp_path / "o")])
    assert code == 2 and "graspsim-control" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------- training
def test_seg_loss_tversky_and_pos_weight():
    from graspsim.vision.train import seg_loss

    g = torch.Generator().manual_seed(0)
    logits = torch.randn((3, 8, 8), generator=g)
    y = torch.rand((3, 8, 8), generator=g) < 0.2
    p = torch.sigmoid(logits)
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, y.float())
    dice = 1 - (2 * (p * y).sum() + 1) / (p.sum() + y.sum() + 1)
    assert torch.allclose(seg_loss(logits, y, 1.0), bce + dice, atol=1e-6)  # beta 0.5 is soft Dice
    assert torch.allclose(seg_loss(logits, y, 0.0), bce)
    # recall-favouring settings penalise missed target pixels more: all-background logits cost more
    low = torch.full((3, 8, 8), -3.0)
    assert seg_loss(low, y, 1.0, pos_weight=3.0, tversky_beta=0.8) > seg_loss(low, y, 1.0)
    # frame-level term: BCE of each frame's highest logit against "the target is visible"
    y[2] = False  # a target-free frame
    frame = torch.nn.functional.binary_cross_entropy_with_logits(logits.flatten(1).amax(1), torch.tensor([1.0, 1.0, 0.0]))
    assert torch.allclose(seg_loss(logits, y, 0.0, frame_weight=0.5), seg_loss(logits, y, 0.0) + 0.5 * frame, atol=1e-6)
    # its gradient reaches only each frame's highest pixel, pushing it down on the target-free frame
    x = logits.clone().requires_grad_()
    (seg_loss(x, y, 0.0, frame_weight=1.0) - seg_loss(x, y, 0.0)).backward()
    top = logits[2].flatten().argmax()
    assert x.grad[2].flatten()[top] > 0 and int((x.grad[2] != 0).sum()) == 1


def test_random_patches_are_exact_windows_and_aim_at_the_target():
    from graspsim.vision.train import TrainVisionConfig, random_patches

    B, S, side, k = 3, 64, 16, 40
    yy, xx = torch.meshgrid(torch.arange(S), torch.arange(S), indexing="ij")
    rgb = torch.stack([yy, xx, torch.zeros_like(yy)])[None].repeat(B, 1, 1, 1)
    rgb[:, 2] = torch.arange(B)[:, None, None]  # channel 2 names the frame, channels 0/1 the pixel
    mask = torch.zeros((B, S, S), dtype=torch.bool)
    mask[0, 60:63, 1:4] = True  # a target in the bottom-left corner
    mask[1, 20:25, 30:35] = True
    pr, pm = random_patches(rgb, mask, side, k, 1.0, torch.Generator().manual_seed(0))
    assert pr.shape == (B * k, 3, side, side) and pm.shape == (B * k, side, side)
    for i in range(B * k):
        f, oy, ox = int(pr[i, 2, 0, 0]), int(pr[i, 0, 0, 0]), int(pr[i, 1, 0, 0])
        assert f == i // k and 0 <= oy <= S - side and 0 <= ox <= S - side
        assert torch.equal(pr[i, :2], rgb[f, :2, oy:oy + side, ox:ox + side])
        assert torch.equal(pm[i], mask[f, oy:oy + side, ox:ox + side])
    # target_prob 1: every patch of a target frame holds the target's centre pixel; frame 2 has no target
    assert bool(pm[:2 * k].flatten(1).any(1).all()) and not bool(pm[2 * k:].any())
    assert bool(pm[:k, :, :][torch.arange(k), 61 - pr[:k, 0, 0, 0], 2 - pr[:k, 1, 0, 0]].all())
    # target_prob 0: uniform windows, which in a 64 px frame mostly miss a corner target
    _, pm0 = random_patches(rgb, mask, side, k, 0.0, torch.Generator().manual_seed(0))
    assert int(pm0[:k].flatten(1).any(1).sum()) < k // 2
    with pytest.raises(ValueError, match="patch"):
        TrainVisionConfig(out=Path("x"), patch=12)  # not a multiple of the default net's stride 8
    with pytest.raises(ValueError, match=r"stride 16 \(model.multiple\); got 24 \(e.g. --patch 32\)"):
        TrainVisionConfig(out=Path("x"), model=SegNetConfig(depth=4))  # the default patch with a deeper net


def test_short_training_improves_val_loss_and_resumes(tmp_path):
    from graspsim.vision.train import TrainVisionConfig, train_vision

    kw = dict(out=tmp_path / "run", batch_size=16, val_every=15, ckpt_every=15, n_val=32, n_test=16, lr=1e-2, model=TINY,
              transfer=None, operating_point="composite", runtime=RuntimeConfig(threads=2, progress=False))
    r1 = train_vision(TrainVisionConfig(steps=15, **kw))
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt")["step"] == 15
    with pytest.raises(FileExistsError):
        train_vision(TrainVisionConfig(steps=30, **kw))
    with pytest.raises(ValueError, match=r"lr: 0\.01 -> 0\.02"):  # the one resume rule names the changed setting
        train_vision(TrainVisionConfig(steps=30, resume=True, **{**kw, "lr": 2e-2}))
    r2 = train_vision(TrainVisionConfig(steps=30, resume=True, **kw))
    hist = r2["history"]
    assert [h["step"] for h in hist] == [0, 15, 30]
    assert hist[-1]["loss"] < hist[0]["loss"]
    assert r1["history"][0]["loss"] == hist[0]["loss"]
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["steps"] == 30 and 0.0 < m["threshold"] < 1.0 and "iou" in m["test"]
    assert any((tmp_path / "run" / "tb").iterdir())
    seg = Segmenter.from_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert seg.threshold == m["threshold"] and seg.mirror_tta and m["mirror_tta"]  # the default is on


def test_the_weight_average_is_what_a_run_validates_saves_and_resumes(tmp_path):
    """--ema-decay: the checkpoint's ``model`` is the moving average (d * average + (1 - d) * weights after every step,
    the first step copied), the optimizer's weights are ``raw_model`` for --resume only, and a resumed run ends where
    an uninterrupted one does."""
    from graspsim.vision.checkpoint import deployable_payload
    from graspsim.vision.train import _Training, train_vision
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    d = 0.75  # the average's rule, on a net whose weights are set by hand
    net = SegNet(TINY)
    run = _Training(net, None, None, False, 0, 0.0, None, [],
                    AveragedModel(net, multi_avg_fn=get_ema_multi_avg_fn(d), use_buffers=True))
    w = net.head.weight if hasattr(net, "head") else next(net.parameters())
    expected = None
    for value in (1.0, 3.0, -2.0):
        with torch.no_grad():
            w.fill_(value)
        run.update_average()
        expected = value if expected is None else d * expected + (1 - d) * value
    averaged = dict(run.net.named_parameters())[[k for k, p in net.named_parameters() if p is w][0]]
    assert torch.allclose(averaged, torch.full_like(w, expected)) and run.net is not net

    kw = dict(batch_size=4, val_every=2, ckpt_every=2, n_val=8, n_test=8, lr=1e-2, model=TINY, transfer=None,
              operating_point="composite", sim=SimConfig(image_size=32), ema_decay=0.5,
              runtime=RuntimeConfig(threads=1, progress=False))
    train_vision(TrainVisionConfig(out=tmp_path / "a", steps=4, **kw))
    ckpt = load_checkpoint(tmp_path / "a" / "checkpoint.pt")
    assert ckpt["ema_updates"] == 4 and ckpt["raw_model"].keys() == ckpt["model"].keys()
    assert any(not torch.equal(ckpt["model"][k], ckpt["raw_model"][k]) for k in ckpt["model"])
    assert "raw_model" not in deployable_payload(tmp_path / "a" / "checkpoint.pt")
    train_vision(TrainVisionConfig(out=tmp_path / "b", steps=2, **kw))
    train_vision(TrainVisionConfig(out=tmp_path / "b", steps=4, resume=True, **kw))
    resumed = load_checkpoint(tmp_path / "b" / "checkpoint.pt")
    assert resumed["ema_updates"] == 4
    for key in ("model", "raw_model"):
        for k, v in ckpt[key].items():
            assert torch.allclose(resumed[key][k].float(), v.float(), atol=1e-5), (key, k)
    with pytest.raises(ValueError, match="ema_decay"):
        TrainVisionConfig(out=tmp_path / "c", ema_decay=1.0)


def test_a_run_folder_of_the_old_default_net_resumes_as_that_net(tmp_path):
    """A train-vision folder written when the U-Net was the default (before issue 40) resumes as the U-Net when the
    request holds today's default net; another net is refused by the one resume rule."""
    from graspsim import SimConfig
    from graspsim.vision.train import TrainVisionConfig, train_vision
    from graspsim.vision.train_config import UNET_MODEL

    kw = dict(out=tmp_path / "run", batch_size=4, val_every=2, ckpt_every=2, n_val=8, n_test=8, transfer=None,
              operating_point="composite", sim=SimConfig(image_size=32), runtime=RuntimeConfig(threads=1, progress=False))
    train_vision(TrainVisionConfig(steps=2, model=UNET_MODEL, **kw))
    m = train_vision(TrainVisionConfig(steps=3, resume=True, **kw))  # today's default net requested
    ckpt = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert ckpt["step"] == 3 == m["steps"] and ckpt["model_config"] == dataclasses.asdict(UNET_MODEL)
    with pytest.raises(ValueError, match="model.base_channels"):
        train_vision(TrainVisionConfig(steps=4, resume=True, model=TINY, **kw))


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the run takes 11-13 minutes; the suite-wide 600 s limit would cut it off
def test_default_training_meets_targets(tmp_path):
    """Full default budget (3700 steps of 24x24 patches, 11.4 minutes on the idle 2-core AMD EPYC with bf16): the
    issue-16 targets on the transfer test and on our own composites. Met there since round 11: transfer 0.870 /
    0.961 / 0.901 / 0.8 %, composite IoU 0.892. The recall margin is 0.001: seeds 1-4 of the same recipe (one
    thread) read 0.890, 0.906, 0.873 and 0.887 (mean over seeds 0-4: 0.891), so on another CPU (other floating-point
    sums) this test is likely to fail on recall (docs/vision.md, "Fourth session"). Timings belong in benchmarks and
    are not tested here."""
    from graspsim.vision.train import TrainVisionConfig, train_vision

    r = train_vision(TrainVisionConfig(out=tmp_path / "run", runtime=RuntimeConfig(threads=2, progress=False)))
    t = r["transfer_test"]
    assert t["iou"] >= 0.85 and t["precision"] >= 0.93 and t["recall"] >= 0.90
    assert t["false_positive_image_rate"] <= 0.03
    assert r["test"]["iou"] >= 0.88


def test_hdf5_frames_load_and_errors(tmp_path):
    import h5py

    from graspsim.vision.train import HDF5Frames

    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        for k, T in (("demo_0", 5), ("demo_1", 3)):
            obs = f.create_group(f"data/{k}/obs")
            obs["rgb"] = np.full((T, 64, 64, 3), 7, np.uint8)
            m = np.zeros((T, 64, 64), np.uint8)
            m[:, 3, 4] = 1
            obs["mask"] = m
    fr = HDF5Frames(path, 64, max_frames=6)
    assert fr.rgb.shape == (6, 3, 64, 64) and fr.mask.shape == (6, 64, 64) and bool(fr.mask[:, 3, 4].all())
    rgb, mask = fr.sample(4, torch.Generator().manual_seed(0))
    assert rgb.shape == (4, 3, 64, 64) and mask.dtype == torch.bool
    with pytest.raises(ValueError, match="expected"):
        HDF5Frames(path, 32, max_frames=10)
    with pytest.raises(FileNotFoundError):
        HDF5Frames(tmp_path / "none.h5", 64, 10)
    # mixed into a training batch: the last hdf5_fraction of the frames are HDF5 frames, then patches are cut
    from graspsim.vision.train import build_composers, training_batch

    cfg = TrainVisionConfig(out=tmp_path / "run", batch_size=8, hdf5_fraction=0.25, patch=0, model=TINY)
    composer, _ = build_composers(cfg)
    x, mask = training_batch(composer, cfg, torch.Generator().manual_seed(0), fr)
    assert x.shape == (8, 3, 64, 64) and mask.shape == (8, 64, 64)
    assert torch.allclose(x[6:], torch.full_like(x[6:], 7 / 255)) and bool(mask[6:, 3, 4].all())
    assert int(mask[6:].sum()) == 2
    x, mask = training_batch(composer, dataclasses.replace(cfg, patch=32), torch.Generator().manual_seed(0), fr)
    assert x.shape == (32, 3, 32, 32) and mask.shape == (32, 32, 32)


def test_input_features_are_the_per_pixel_colour_features_in_either_layout():
    """The chroma nets' 7 input channels, computed on whole colour planes, are bit for bit the per-pixel definition
    (normalised RGB, chromaticity, channel spread) for plain and channels-last input, in the layout asked for."""
    # more frames than one slice of the channels-last path (FEATURE_CHUNK), with a remainder
    x = torch.rand(2 * FEATURE_CHUNK + 3, 3, 16, 24, generator=torch.Generator().manual_seed(0))
    x[0, :, 0, 0] = 0.0  # a black pixel: the chromaticity's offsets keep it finite
    total = x.sum(1, keepdim=True)
    want = torch.cat([(x - 0.45) / 0.25, ((x + 0.02) / (total + 0.06) - 1.0 / 3.0) * 4.0,
                      (x.amax(1, keepdim=True) - x.amin(1, keepdim=True) - 0.2) * 3.0], 1)
    for inp in (x, x.contiguous(memory_format=torch.channels_last)):
        for last in (False, True):
            got = input_features(inp, 0.45, 0.25, channels_last=last)
            assert torch.equal(got, want)
            assert got.is_contiguous(memory_format=torch.channels_last) == last
            # in bfloat16 (what the bf16 inference net reads): the float32 values rounded once, in the same layout
            low = input_features(inp, 0.45, 0.25, channels_last=last, dtype=torch.bfloat16)
            assert low.dtype == torch.bfloat16 and torch.equal(low, want.to(torch.bfloat16))
            assert low.is_contiguous(memory_format=torch.channels_last) == last
    assert bool(torch.isfinite(want).all())
    # an empty batch, and an input that needs gradients (the sliced path writes with out=), take the whole planes
    assert input_features(x[:0], 0.45, 0.25, channels_last=True).shape == (0, 7, 16, 24)
    g = x[:2].clone().requires_grad_(True)
    got = input_features(g, 0.45, 0.25, channels_last=True)
    got.sum().backward()
    assert torch.equal(got.detach(), want[:2]) and g.grad is not None and bool(torch.isfinite(g.grad).all())


def test_bf16_inference_stores_bf16_weights_and_gives_autocasts_logits():
    """With bf16 the Segmenter runs a copy of the folded net with bfloat16 weights: the logits are bit for bit those
    of autocast over the float32 net (autocast rounds the same weights the same way), and the float32 net is kept."""
    torch.manual_seed(0)
    net = SegNet(CROPPED).eval()
    seg = Segmenter(net, image_size=64, precision="bf16", mirror_tta=True)
    rgb = torch.randint(0, 256, (4, 3, 64, 64), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = seg.net.mirror_averaged((rgb.float() / 255).contiguous(memory_format=torch.channels_last)).float()
    assert torch.equal(seg.logits(rgb), want)
    # the bf16 net is handed its input features in bfloat16 already, and the float32 net keeps float32 ones
    x = (rgb.float() / 255).contiguous(memory_format=torch.channels_last)
    assert seg._bf16_net()._inputs(x).dtype == torch.bfloat16 and seg.net._inputs(x).dtype == torch.float32
    assert next(seg.net.parameters()).dtype == torch.float32
    assert next(seg._bf16_net().parameters()).dtype == torch.bfloat16


def test_bootstrap_intervals_are_seeded_hold_the_measured_value_and_narrow_with_more_frames():
    from graspsim.vision.metrics import bootstrap_intervals, subset_metrics_from_counts

    rng = np.random.default_rng(5)

    def counts(n_target: int, n_empty: int):
        gt = np.concatenate([rng.integers(5, 60, n_target), np.zeros(n_empty, np.int64)])
        tp = np.minimum(gt, rng.integers(0, 60, len(gt)))
        fn = gt - tp
        fp = rng.integers(0, 8, len(gt)) * (gt > 0)
        pred = tp + fp + (rng.random(len(gt)) < 0.1) * (gt == 0)  # a tenth of the target-free frames fire
        return tp, fp, fn, gt, pred

    small, large = counts(40, 20), counts(4000, 2000)
    groups = lambda c: {"all": np.ones(len(c[0]), dtype=bool), "none": np.zeros(len(c[0]), dtype=bool)}  # noqa: E731
    a = bootstrap_intervals(groups(small), *small, min_pixels=1, draws=500, seed=3)
    assert a == bootstrap_intervals(groups(small), *small, min_pixels=1, draws=500, seed=3)  # seeded
    assert "none" not in a  # a group without frames is left out
    point = subset_metrics_from_counts(groups(small), *small, min_pixels=1)["all"]
    for k, (lo, hi) in a["all"].items():
        assert lo <= point[k] <= hi and lo < hi
    b = bootstrap_intervals(groups(large), *large, min_pixels=1, draws=500, seed=3)
    for k in a["all"]:  # 100 times the frames: about a tenth of the width
        assert (b["all"][k][1] - b["all"][k][0]) < 0.3 * (a["all"][k][1] - a["all"][k][0])
    only_targets = bootstrap_intervals({"t": np.arange(len(small[0])) < 40}, *small, min_pixels=1, draws=50)
    assert all(math.isnan(v) for v in only_targets["t"]["false_positive_image_rate"])
    with pytest.raises(ValueError, match="level must be in"):
        bootstrap_intervals(groups(small), *small, min_pixels=1, level=95)
    with pytest.raises(ValueError, match="draws"):
        bootstrap_intervals(groups(small), *small, min_pixels=1, draws=0)
    with pytest.raises(ValueError, match=r"bootstrap must be a non-negative int; got -1"):
        EvalRealConfig(images=Path("i"), vision=Path("v"), out=Path("o"), bootstrap=-1)


def test_bootstrap_intervals_have_their_level_and_the_false_positive_rate_its_wilson_interval():
    """Known answers: 400 equal target frames of which 80 % are found whole give recall 0.8 with standard error
    sqrt(0.8 * 0.2 / 400) = 0.02, so the 95 % interval is about 0.8 +- 0.039 and the 50 % one about 0.8 +- 0.013; the
    false-positive image rate of 0 in 256 frames gets Wilson's 0 to 0.0148; groups sharing their target-free frames
    get the same rate interval, and a group's interval does not depend on the other groups asked for."""
    from graspsim.vision.metrics import bootstrap_intervals

    n = 400
    gt = np.concatenate([np.full(n, 10), np.zeros(256, np.int64)])
    hit = np.concatenate([np.arange(n) < 0.8 * n, np.zeros(256, bool)])
    tp, fn, fp, pred = gt * hit, gt * ~hit, np.zeros_like(gt), gt * hit
    half = lambda iv: (iv[1] - iv[0]) / 2  # noqa: E731
    wide = bootstrap_intervals({"all": gt >= 0}, tp, fp, fn, gt, pred, 1, draws=4000)["all"]
    narrow = bootstrap_intervals({"all": gt >= 0}, tp, fp, fn, gt, pred, 1, draws=4000, level=0.5)["all"]
    assert half(wide["recall"]) == pytest.approx(1.96 * 0.02, rel=0.08)
    assert half(narrow["recall"]) == pytest.approx(0.674 * 0.02, rel=0.12)
    assert wide["false_positive_image_rate"][0] == 0.0
    assert wide["false_positive_image_rate"][1] == pytest.approx(1.96**2 / (256 + 1.96**2), rel=1e-3)
    first = np.arange(len(gt)) < n // 2
    both = bootstrap_intervals({"a": first | (gt == 0), "b": ~first}, tp, fp, fn, gt, pred, 1, draws=300)
    alone = bootstrap_intervals({"b": ~first}, tp, fp, fn, gt, pred, 1, draws=300)
    assert both["a"]["false_positive_image_rate"] == both["b"]["false_positive_image_rate"]
    assert both["b"] == alone["b"]  # the same group, asked with or without another


def test_decoys_are_target_coloured_texture_outside_the_label():
    from graspsim.vision.compose import paste_decoys

    g = torch.Generator().manual_seed(0)
    n, s = 64, 32
    bg = 0.3 + 0.4 * torch.rand(n, 3, s, s, generator=g)
    color = torch.zeros(n, 3, s, s)
    mask = torch.zeros(n, s, s, dtype=torch.bool)
    tcol = torch.tensor([0.8, 0.3, 0.1])
    mask[:8, 2:5, 2:5] = True  # frames 0-7 show a target of one colour; the rest are target-free
    color[:8, :, 2:5, 2:5] = tcol[:, None, None]
    kind = torch.zeros(n, dtype=torch.long)
    kind[-4:] = 3  # sim frames
    out = paste_decoys(bg, color, mask, kind, 1.0, torch.Generator().manual_seed(1))
    changed = (out != bg).any(1)  # n,H,W
    assert not bool(changed[-4:].any())  # sim frames keep their own table
    assert bool(changed[:-4].flatten(1).any(1).all())  # every other frame got a decoy
    area = changed[:-4].flatten(1).sum(1).float() / (s * s)
    assert float(area.min()) > 0.002 and float(area.max()) < 0.2  # target-sized, not the whole crop
    hard = changed[:-4] & ((out - bg).abs().amax(1)[:-4] > 0.2)  # the decoys' cores moved towards the target colour
    core = out[:-4].permute(0, 2, 3, 1)[hard].mean(0)
    assert float(core[0] - core[2]) > 0.4  # red-orange on average (the crops are grey on average)
    assert torch.equal(paste_decoys(bg, color, mask, kind, 0.0, g), bg)
    assert torch.equal(paste_decoys(bg, color, torch.zeros_like(mask), kind, 1.0, g), bg)  # no target to copy


def test_cast_shadows_darken_the_photo_beside_each_object_and_never_the_label():
    from graspsim.vision.compose import cast_shadows

    n, s = 32, 32
    bg = torch.full((n, 3, s, s), 0.6)
    cover = torch.zeros(n, s, s)
    cover[:, 12:20, 12:20] = 1.0  # one 8 px object in the middle of every frame
    kind = torch.zeros(n, dtype=torch.long)
    kind[-4:] = 3  # sim frames cast their own shadows
    ccfg = ComposeConfig(cast_shadow_prob=1.0, cast_shadow_darkness=(0.5, 0.5), cast_shadow_length=(0.25, 0.25))
    out = cast_shadows(bg, cover, kind, ccfg, torch.Generator().manual_seed(0))
    assert torch.equal(out[-4:], bg[-4:])
    assert float(out.min()) >= 0.6 * 0.5 - 1e-6 and float(out.max()) <= 0.6 + 1e-6  # light is only taken away
    dark = (out[:-4, 0] < 0.55)  # n,H,W in shadow
    outside = dark.clone()
    outside[:, 12:20, 12:20] = False
    assert bool(outside.flatten(1).any(1).all())  # every frame shows a shadow beyond its object
    ring = torch.zeros(s, s, dtype=torch.bool)
    ring[11:21, 11:21] = True
    ring[12:20, 12:20] = False
    assert bool((outside & ring).flatten(1).any(1).all())  # joined to the object, not somewhere else
    ys, xs = torch.nonzero(outside, as_tuple=True)[1:]
    assert int((ys - 15.5).abs().max()) <= 4 + 8 + 2 and int((xs - 15.5).abs().max()) <= 4 + 8 + 2  # 0.25 x 32 px
    sides = torch.stack([outside[:, :, :12].sum((1, 2)), outside[:, :, 20:].sum((1, 2))], 1)
    assert bool((sides.amin(1) < sides.amax(1)).all())  # it falls to one side: away from the light, not all round
    g = torch.Generator().manual_seed(5)
    before = g.get_state()
    assert cast_shadows(bg, cover, kind, ComposeConfig(), g) is bg
    assert torch.equal(g.get_state(), before)  # the default draws nothing


def test_cast_shadows_leave_the_label_and_default_composites_unchanged():
    sim = SimConfig(embodiment="so101")
    plain = Composer(_bank64(), sim, ComposeConfig(sim_prob=0.0))(16, torch.Generator().manual_seed(3))
    shade = Composer(_bank64(), sim, ComposeConfig(sim_prob=0.0, cast_shadow_prob=1.0))(16, torch.Generator().manual_seed(3))
    assert torch.equal(shade.mask, plain.mask)
    assert not torch.equal(shade.rgb, plain.rgb)
    with pytest.raises(ValueError, match="cast_shadow_prob"):
        ComposeConfig(cast_shadow_prob=1.5)
    with pytest.raises(ValueError, match="cast_shadow_darkness"):
        ComposeConfig(cast_shadow_darkness=(0.9, 0.2))
    with pytest.raises(ValueError, match="cast_shadow_length"):
        ComposeConfig(cast_shadow_length=(0.1, 1.5))


def test_decoys_leave_the_label_and_default_composites_unchanged():
    sim = SimConfig()
    ccfg = ComposeConfig(sim_prob=0.0)
    plain = Composer(_bank64(), sim, ccfg)(16, torch.Generator().manual_seed(3))
    zero = Composer(_bank64(), sim, ccfg, decoy_prob=0.0)(16, torch.Generator().manual_seed(3))
    assert torch.equal(plain.rgb, zero.rgb)  # the default draws nothing: earlier runs keep their bytes
    dec = Composer(_bank64(), sim, ccfg, decoy_prob=1.0)(16, torch.Generator().manual_seed(3))
    assert torch.equal(dec.mask, plain.mask)
    assert not torch.equal(dec.rgb, plain.rgb)
    with pytest.raises(ValueError, match="Composer.decoy_prob"):
        Composer(_bank64(), decoy_prob=1.5)
    with pytest.raises(ValueError, match="decoy_prob"):
        TrainVisionConfig(out=Path("x"), decoy_prob=-0.1)
