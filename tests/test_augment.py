"""Training-only appearance randomization (vision/augment.py) and the joint operating-point choice."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from graspsim import SimConfig
from graspsim.vision.augment import (AugmentConfig, augment_frame, augment_layer, filter_frames, gaussian_kernels, jpeg_frames,
                            motion_kernels)
from graspsim.vision.backgrounds import DEFAULT_BACKGROUNDS, BackgroundBank
from graspsim.vision.compose import Composer
from graspsim.vision.metrics import choose_thresholds, choose_thresholds_on, gated_curves

torch.set_num_threads(2)
OFF = AugmentConfig.off()


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def layers():
    bank = BackgroundBank.from_folder(DEFAULT_BACKGROUNDS / "train", size=64)
    comp = Composer(bank, SimConfig())
    lay = comp.render_layers(48, _gen(3))
    bg = bank.sample_tensor(48, _gen(4))
    return lay, bg, bank


def _only(**on) -> AugmentConfig:
    return dataclasses.replace(OFF, **on)


def test_everything_off_is_the_identity(layers):
    lay, bg, _ = layers
    color, cover, bg2 = augment_layer(lay.color, lay.alpha, lay.mask, bg, lay.kind, OFF, _gen())
    sim = (lay.kind == 3)[:, None, None]
    assert torch.equal(cover[:, 0], (lay.alpha | sim).float())
    assert torch.allclose(color, lay.color.clamp(0, 1)) and torch.equal(bg2, bg)
    frame = lay.color.clamp(0, 1)
    out, mask = augment_frame(frame, lay.mask, OFF, _gen())
    assert torch.allclose(out, frame, atol=1e-6) and torch.equal(mask, lay.mask)
    rgb = (frame * 255).to(torch.uint8)
    assert torch.equal(jpeg_frames(rgb, OFF, _gen()), rgb)


def test_clean_fraction_leaves_its_frames_untouched(layers):
    lay, bg, _ = layers
    n = lay.color.shape[0]
    full = dataclasses.replace(AugmentConfig(), clean_fraction=0.5, **{f.name: 1.0 for f in dataclasses.fields(AugmentConfig)
                                                                      if f.name.endswith("_prob")})
    k = int(round(0.5 * n))
    color, cover, bg2 = augment_layer(lay.color, lay.alpha, lay.mask, bg, lay.kind, full, _gen())
    sim = (lay.kind == 3)[:, None, None]
    assert torch.equal(cover[:k, 0], (lay.alpha | sim).float()[:k]) and torch.equal(color[:k], lay.color[:k])
    assert torch.equal(bg2[:k], bg[:k]) and not torch.equal(bg2[k:], bg[k:])
    frame = lay.color.clamp(0, 1)
    out, mask = augment_frame(frame, lay.mask, full, _gen())
    assert torch.equal(out[:k], frame[:k]) and torch.equal(mask[:k], lay.mask[:k]) and not torch.equal(out[k:], frame[k:])
    rgb = (frame * 255).to(torch.uint8)
    assert torch.equal(jpeg_frames(rgb, full, _gen())[:k], rgb[:k])


def test_a_frames_augmentation_does_not_depend_on_the_clean_share(layers):
    """The stages draw for every frame and work only on the augmented ones: frame i comes out the same whether the
    frames before it were clean or augmented, and the random stream ends in the same state."""
    lay, bg, _ = layers
    n = lay.color.shape[0]
    k = int(round(0.5 * n))
    every = {f.name: 1.0 for f in dataclasses.fields(AugmentConfig) if f.name.endswith("_prob")}
    half, none = (dataclasses.replace(AugmentConfig(), clean_fraction=c, **every) for c in (0.5, 0.0))
    outs = {}
    for name, cfg in (("half", half), ("none", none)):
        g = _gen()
        outs[name] = (augment_layer(lay.color, lay.alpha, lay.mask, bg, lay.kind, cfg, g)
                      + augment_frame(lay.color.clamp(0, 1), lay.mask, cfg, g) + (g.get_state(),))
    for a, b in zip(outs["half"][:-1], outs["none"][:-1]):
        assert torch.equal(a[k:], b[k:])
    assert torch.equal(outs["half"][-1], outs["none"][-1])


def test_a_batch_of_clean_frames_only_comes_back_unchanged(layers):
    """One frame with the default 80 % clean share is a clean frame: nothing is left to augment or filter."""
    lay, bg, _ = layers
    cfg = AugmentConfig()
    color, cover, bg2 = augment_layer(lay.color[:1], lay.alpha[:1], lay.mask[:1], bg[:1], lay.kind[:1], cfg, _gen())
    assert torch.equal(color, lay.color[:1]) and torch.equal(bg2, bg[:1]) and cover.shape == (1, 1, 64, 64)
    out, mask = augment_frame(lay.color[:1].clamp(0, 1), lay.mask[:1], cfg, _gen())
    assert torch.equal(out, lay.color[:1].clamp(0, 1)) and torch.equal(mask, lay.mask[:1])


def test_highlights_and_speckle_touch_only_the_target(layers):
    lay, bg, _ = layers
    for cfg in (_only(highlight_prob=1.0), _only(speckle_prob=1.0)):
        base, _, _ = augment_layer(lay.color, lay.alpha, lay.mask, bg, lay.kind, OFF, _gen(1))
        out, _, _ = augment_layer(lay.color, lay.alpha, lay.mask, bg, lay.kind, cfg, _gen(1))
        changed = (out - base).abs().amax(1) > 1e-6
        assert bool(changed.any()) and not bool((changed & ~lay.mask).any())


def test_highlights_brighten_the_target(layers):
    lay, bg, _ = layers
    base, _, _ = augment_layer(lay.color, lay.alpha, lay.mask, bg, lay.kind, OFF, _gen(1))
    out, _, _ = augment_layer(lay.color, lay.alpha, lay.mask, bg, lay.kind, _only(highlight_prob=1.0), _gen(1))
    m = lay.mask[:, None].expand_as(out)
    assert float(out[m].mean()) > float(base[m].mean()) + 0.01


def test_shadow_only_darkens_the_photo_and_soft_edges_stay_near_objects(layers):
    lay, bg, _ = layers
    _, _, dark = augment_layer(lay.color, lay.alpha, lay.mask, bg, lay.kind, _only(shadow_prob=1.0), _gen(2))
    assert bool((dark <= bg + 1e-6).all()) and float((bg - dark).sum()) > 0
    _, cover, _ = augment_layer(lay.color, lay.alpha, lay.mask, bg, lay.kind, _only(soft_edge_prob=1.0), _gen(2))
    a = lay.alpha.float()
    near = torch.nn.functional.max_pool2d(a[:, None], 3, 1, 1)[:, 0] > 0
    partial = (cover[:, 0] > 0) & (cover[:, 0] < 1)
    assert bool(partial.any()) and not bool((partial & ~near).any())


def test_occluders_only_remove_target_pixels(layers):
    lay, _, _ = layers
    frame = lay.color.clamp(0, 1)
    _, mask = augment_frame(frame, lay.mask, _only(occluder_prob=1.0), _gen(5))
    assert not bool((mask & ~lay.mask).any())
    assert int(mask.sum()) < int(lay.mask.sum())


def test_photometric_stages_change_frames_but_not_the_mask(layers):
    lay, _, _ = layers
    frame = lay.color.clamp(0, 1)
    for name in ("exposure_prob", "white_balance_prob", "gamma_prob", "vignette_prob", "defocus_prob",
                 "motion_blur_prob", "shot_noise_prob"):
        out, mask = augment_frame(frame, lay.mask, _only(**{name: 1.0}), _gen(6))
        assert torch.equal(mask, lay.mask), name
        assert float((out - frame).abs().mean()) > 1e-4, name
        assert float(out.min()) >= 0 and float(out.max()) <= 1, name
    rgb = (frame * 255).to(torch.uint8)
    assert not torch.equal(jpeg_frames(rgb, _only(jpeg_prob=1.0, jpeg_quality=(30.0, 30.0)), _gen()), rgb)


def test_kernels_are_normalised_and_sigma_zero_is_the_identity():
    g = gaussian_kernels(torch.tensor([0.0, 0.7, 1.3]))
    m = motion_kernels(torch.tensor([2.0, 5.0]), torch.tensor([0.0, 1.0]))
    assert torch.allclose(g.sum((1, 2)), torch.ones(3)) and torch.allclose(m.sum((1, 2)), torch.ones(2))
    x = torch.rand(3, 3, 16, 16, generator=_gen())
    y = filter_frames(x, g)
    assert torch.allclose(y[0], x[0], atol=1e-6) and not torch.allclose(y[2], x[2], atol=1e-3)


def test_augmented_composites_are_deterministic_and_target_scale_grows_the_target(layers):
    _, _, bank = layers
    comp = Composer(bank, SimConfig(), augment=AugmentConfig())
    a, b = comp(32, _gen(9)), comp(32, _gen(9))
    assert torch.equal(a.rgb, b.rgb) and torch.equal(a.mask, b.mask)

    def area(scale):
        c = Composer(bank, SimConfig(), augment=_only(target_scale=(scale, scale)))
        m = c(128, _gen(10)).mask
        return float(m.sum()) / max(1, int(m.flatten(1).any(1).sum()))

    assert area(2.0) > 2.5 * area(1.0)


def test_augment_config_validation_names_the_field():
    with pytest.raises(ValueError, match="AugmentConfig.gamma_prob"):
        AugmentConfig(gamma_prob=1.5)
    with pytest.raises(ValueError, match="AugmentConfig.target_scale"):
        AugmentConfig(target_scale=(2.0, 1.0))
    with pytest.raises(ValueError, match="AugmentConfig.shadow_darkness"):
        AugmentConfig(shadow_darkness=(0.2, 1.5))
    with pytest.raises(ValueError, match="kernel"):
        AugmentConfig(motion_length=(2.0, 12.0))


def test_joint_operating_point_holds_on_every_set():
    g = _gen(0)
    gt = torch.zeros(200, 16, 16, dtype=torch.bool)
    gt[:150, 6:10, 6:10] = True
    clean = torch.where(gt, 0.9, 0.05) + 0.02 * torch.rand(gt.shape, generator=g)
    # a second distribution whose target-free frames hold confident blobs: a threshold fit to `clean` alone fails it
    hard = clean.clone()
    hard[150:, 2:4, 2:4] = 0.7 + 0.25 * torch.rand(50, 2, 2, generator=g)
    assert choose_thresholds_on([(clean, gt)]) == choose_thresholds(clean, gt)
    t1, p1 = choose_thresholds_on([(clean, gt)], max_fp_image_rate=0.02)
    t2, p2 = choose_thresholds_on([(clean, gt), (hard, gt)], max_fp_image_rate=0.02)
    for t, p, ok in ((t1, p1, False), (t2, p2, True)):
        table = gated_curves(hard, gt)
        i = int(np.argmin(np.abs(table["threshold"] - t) + np.abs(table["peak"] - (p if p > t else 0.0)) * 10))
        assert (table["false_positive_image_rate"][i] <= 0.02) == ok


# ------------------------------------------------------------------ the arm's shadow (embodiments with an arm overhead)

def test_arm_shadow_darkens_inside_a_soft_ellipse_and_only_the_frames_that_drew_one():
    from graspsim.vision.compose import ComposeConfig, arm_shadow
    light = arm_shadow(400, 64, ComposeConfig(arm_shadow_prob=0.5, arm_shadow_darkness=(0.4, 0.6)), _gen(1), "cpu")
    assert light.shape == (400, 64, 64)
    low = light.flatten(1).amin(1)
    shaded = low < 0.999
    assert 150 < int(shaded.sum()) < 250  # about half the frames
    assert bool((light <= 1.0).all()) and float(low.min()) >= 0.4 - 1e-6  # never more than the darkest draw
    assert bool((light[~shaded] > 0.999).all())
    # most shadows reach their drawn darkness in view (an ellipse centred outside the frame may show only its edge);
    # the edge is soft (values between the core and full light exist)
    assert float((low[shaded] < 0.61).float().mean()) > 0.8
    frac = ((light[shaded] < 0.98) & (light[shaded] > low[shaded][:, None, None] + 0.02)).float().mean()
    assert float(frac) > 0.005
    none = arm_shadow(50, 64, ComposeConfig(arm_shadow_prob=0.0), _gen(1), "cpu")
    assert bool((none == 1.0).all())


def test_composites_get_the_arm_shadow_only_on_an_embodiment_with_an_arm_overhead():
    from graspsim.config import TargetConfig
    from graspsim.vision.compose import ComposeConfig
    bank = BackgroundBank.from_folder(DEFAULT_BACKGROUNDS / "train", size=64)
    # the floating gripper has no arm over its camera: the setting draws nothing and changes no pixel
    a = Composer(bank, SimConfig(), cfg=ComposeConfig(arm_shadow_prob=0.0))(24, _gen(7))
    b = Composer(bank, SimConfig(), cfg=ComposeConfig(arm_shadow_prob=1.0))(24, _gen(7))
    assert torch.equal(a.rgb, b.rgb) and torch.equal(a.mask, b.mask)
    # the SO-101's arm shades every frame at probability 1: darker frames, the same exact masks
    so = SimConfig(embodiment="so101", target=TargetConfig(kinds=("sphere", "cube", "cylinder")))
    lay = Composer(bank, so).render_layers(24, _gen(8))
    off = Composer(bank, so, cfg=ComposeConfig(arm_shadow_prob=0.0)).composite(lay, _gen(9))
    on = Composer(bank, so, cfg=ComposeConfig(arm_shadow_prob=1.0, arm_shadow_darkness=(0.8, 0.8))).composite(lay, _gen(9))
    assert torch.equal(off.mask, on.mask)
    assert float(on.rgb.float().mean()) < 0.9 * float(off.rgb.float().mean())


def test_arm_shadow_settings_are_checked():
    from graspsim.vision.compose import ComposeConfig
    with pytest.raises(ValueError, match="arm_shadow_darkness"):
        ComposeConfig(arm_shadow_darkness=(0.5, 1.2))
    with pytest.raises(ValueError, match="arm_shadow_prob"):
        ComposeConfig(arm_shadow_prob=1.5)
