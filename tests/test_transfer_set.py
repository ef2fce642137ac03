"""Foreign-render transfer sets: the TinyRenderer generator, the shipped sets, their loader, and that
training never touches them."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import colorsys

import cv2
import numpy as np
import pybullet
import pytest
import torch

from graspsim.vision.backgrounds import DEFAULT_BACKGROUNDS, resolve_split
from graspsim.vision.foreign_render import DIAMETER_PX, DISTRACTOR_HUE_GAP, ForeignRenderer, distractor_hue_gap, generate
from graspsim.vision.transfer import TRANSFER_DIR, load_transfer_set

REPO = Path(__file__).resolve().parent.parent
TEST_PHOTOS = DEFAULT_BACKGROUNDS / "test"
SHIPPED_FRAMES = 1024


@pytest.fixture(scope="module")
def sample():
    """Frames 0-11 of seed 5: 9 with a target, 3 target-free (every 4th index)."""
    return generate(TEST_PHOTOS, 12, seed=5)


def test_generator_is_deterministic_and_frames_do_not_depend_on_count(sample):
    rgb4, mask4, meta4 = generate(TEST_PHOTOS, 4, seed=5)
    rgb8, mask8, _ = generate(TEST_PHOTOS, 8, seed=5)
    assert np.array_equal(rgb4, sample[0][:4]) and np.array_equal(mask4, sample[1][:4])
    assert np.array_equal(rgb8[:4], rgb4) and np.array_equal(mask8[:4], mask4)
    assert [m.name for m in meta4] == ["frame_00000", "frame_00001", "frame_00002", "frame_00003"]
    rgb_other, _, _ = generate(TEST_PHOTOS, 1, seed=6)
    assert not np.array_equal(rgb_other[0], rgb4[0])
    assert rgb4.shape == (4, 64, 64, 3) and rgb4.dtype == np.uint8 and mask4.dtype == bool


def test_target_masks_lie_on_the_target_and_target_free_masks_are_empty(sample):
    rgb, masks, metas = sample
    for mask, meta in zip(masks, metas):
        if not meta.has_target:
            assert not mask.any(), meta.name
            continue
        assert mask.sum() == meta.visible_px > 0, meta.name
        ys, xs = np.nonzero(mask)
        r = meta.diameter_px / 2
        # every mask pixel is near the projected sphere (off-axis spheres project slightly stretched)
        dist = np.hypot(xs + 0.5 - meta.target_u, ys + 0.5 - meta.target_v)
        assert dist.max() <= 1.5 * r + 1.0, (meta.name, dist.max(), r)
        # and the target is the reddish thing there: its pixels are redder than the frame on average
        px = rgb[metas.index(meta)][mask].astype(float)
        assert px[:, 0].mean() > px[:, 2].mean(), meta.name


def test_apparent_diameters_within_range(sample):
    _, masks, metas = sample
    lo, hi = DIAMETER_PX
    for mask, meta in zip(masks, metas):
        if not meta.has_target:
            continue
        assert lo <= meta.diameter_px <= hi
        if not (meta.truncated or meta.occluded):
            # mask area of a whole sphere: its equivalent diameter is the apparent one, within pixel effects
            eq = 2 * np.sqrt(mask.sum() / np.pi)
            assert lo - 1.0 <= eq <= hi * 1.25 + 1.0, (meta.name, eq, meta.diameter_px)
            assert abs(eq - meta.diameter_px) <= 0.35 * meta.diameter_px + 1.0, (meta.name, eq, meta.diameter_px)


BLUE = (0.58, 0.66)


class _ColourSpy:
    """Stands in for the pybullet module and records the colour of every object shape the renderer creates."""

    def __init__(self):
        self.colors = []

    def __getattr__(self, name):
        return getattr(pybullet, name)

    def createVisualShape(self, shape, **kw):  # noqa: N802 - pybullet's name
        if "rgbaColor" in kw and shape != pybullet.GEOM_MESH:  # the table mesh is textured, not coloured
            self.colors.append(colorsys.rgb_to_hsv(*kw["rgbaColor"][:3]))
        return pybullet.createVisualShape(shape, **kw)


def _in_band(h, band):
    lo, hi = band
    return (h - lo) % 1.0 <= hi - lo


def test_target_hue_band_follows_the_option_and_distractors_avoid_it(sample):
    """A blue target (--target-hue 0.58 0.66): its pixels are blue, the distractors' hues keep out of the band plus
    the margin, and the band changes nothing but colours (same geometry, masks and metadata as the default)."""
    assert DISTRACTOR_HUE_GAP == (-0.12, 0.14) == distractor_hue_gap((-0.04, 0.06))
    gap = distractor_hue_gap(BLUE)
    assert gap == pytest.approx((0.50, 0.74))
    with pytest.raises(ValueError, match="too wide"):
        distractor_hue_gap((0.1, 0.9))
    n = len(sample[2])
    pooled, distractor_hues = [], []
    with ForeignRenderer(TEST_PHOTOS, 5, target_hue=BLUE) as r:
        spy = r.p = _ColourSpy()
        for k in range(n):
            spy.colors.clear()
            rgb, mask, meta = r.frame(k)
            assert np.array_equal(mask, sample[1][k]) and meta == sample[2][k], k
            chromatic = [h for h, s, _ in spy.colors if s > 0.2]  # fingers and grey distractors have s <= 0.06
            if meta.has_target:  # the target is created first, then distractors
                assert _in_band(chromatic[0], BLUE), (k, chromatic)
                chromatic = chromatic[1:]
                px = rgb[mask].astype(np.float64) / 255.0
                pooled.append(px)
                hue = colorsys.rgb_to_hsv(*px.mean(0))[0]
                # light tint, shading, noise and edge pixels mixed with the photo move a frame's hue a little
                assert _in_band(hue, (BLUE[0] - 0.02, BLUE[1] + 0.02)), (k, hue)
            assert not any(_in_band(h, gap) for h in chromatic), (k, chromatic)
            distractor_hues += chromatic
    assert len(distractor_hues) >= 5
    assert _in_band(colorsys.rgb_to_hsv(*np.concatenate(pooled).mean(0))[0], BLUE)


@pytest.mark.parametrize("split", ["val", "test"])
def test_shipped_sets_load(split):
    s = load_transfer_set(split)
    n = SHIPPED_FRAMES
    assert len(s) == n and len(s.names) == n and len(s.meta) == n
    assert s.rgb.shape == (n, 3, 64, 64) and s.rgb.dtype == torch.uint8
    assert s.mask.shape == (n, 64, 64) and s.mask.dtype == torch.bool
    has = torch.tensor([m["has_target"] for m in s.meta])
    assert torch.equal(has, s.mask.flatten(1).any(1))
    assert abs((~has).float().mean().item() - 0.25) < 0.01
    assert all(m["visible_px"] == int(k.sum()) for m, k in zip(s.meta[:50], s.mask[:50]))


def test_loader_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        load_transfer_set("nope", root=tmp_path)
    folder = tmp_path / "broken"
    (folder / "images").mkdir(parents=True)
    (folder / "masks").mkdir()
    img = np.zeros((64, 64, 3), np.uint8)
    for stem in ("a", "b"):
        cv2.imwrite(str(folder / "images" / f"{stem}.png"), img)
    cv2.imwrite(str(folder / "masks" / "a.png"), img[..., 0])
    with pytest.raises(ValueError, match=r"images without a mask .*masks.*: b"):
        load_transfer_set("broken", root=tmp_path)
    cv2.imwrite(str(folder / "masks" / "b.png"), img[..., 0])
    cv2.imwrite(str(folder / "images" / "b.png"), np.zeros((32, 64, 3), np.uint8))
    with pytest.raises(ValueError, match=r"b\.png is 64x32"):
        load_transfer_set("broken", root=tmp_path)


def test_training_never_reads_the_test_split_or_the_foreign_renderer():
    train_dir, val_dir = resolve_split(DEFAULT_BACKGROUNDS, None)
    assert (train_dir.name, val_dir.name) == ("train", "val")
    assert TRANSFER_DIR.parent == DEFAULT_BACKGROUNDS.parent
    code = (
        "import sys, graspsim.vision.train, graspsim.vision.compose\n"
        "bad = [m for m in ('graspsim.vision.foreign_render', 'graspsim.vision.mujoco_transfer', 'graspsim.vision.transfer')\n"
        "       if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_test_photos_are_new():
    def digests(split):
        return {hashlib.sha256(p.read_bytes()).hexdigest(): p.name for p in (DEFAULT_BACKGROUNDS / split).iterdir()}

    test = digests("test")
    assert 8 <= len(test) <= 12
    assert not set(test) & (set(digests("train")) | set(digests("val")))
    # the SO-101 nets' second validation folder (data/transfer_so101/val_extra): photos of no other split
    extra = digests("val_extra")
    assert len(extra) == 31 and not set(extra) & (set(test) | set(digests("train")) | set(digests("val")))
    # the later SO-101 folders, in the order they were added: each holds photos of no earlier folder. test2-test4 came
    # from wheels no split used; session 14's three from Debian and PyPI packages: more training photos (read only
    # with --extra-backgrounds), a third validation folder and the fifth test set; session 18's pychess boards (training,
    # read only with --extra-backgrounds)
    earlier = set(extra) | set(test) | set(digests("train")) | set(digests("val"))
    for split, n in (("test2", 14), ("test3", 14), ("test4", 14), ("train_extra", 32), ("val_warm", 12), ("test5", 16),
                     ("train_boards", 21)):
        new = digests(split)
        assert len(new) == n and not set(new) & earlier, split
        earlier |= set(new)


@pytest.mark.parametrize("split,seed", [("val", 11), ("test", 23)])
def test_shipped_sets_match_the_generator(split, seed):
    """The first frames of each shipped set are what the documented command makes (PNG is lossless)."""
    rgb, mask, metas = generate(DEFAULT_BACKGROUNDS / split, 3, seed=seed)
    shipped = load_transfer_set(split)
    assert torch.equal(shipped.rgb[:3], torch.from_numpy(rgb).permute(0, 3, 1, 2))
    assert torch.equal(shipped.mask[:3], torch.from_numpy(mask))
    assert [m["photo"] for m in shipped.meta[:3]] == [m.photo for m in metas]


def test_render_transfer_verb_rewrites_the_shipped_files_byte_for_byte(tmp_path):
    """`graspsim render-transfer` with the documented flags writes the shipped set's files, PNG bytes and meta.csv rows
    alike (frames 0-4 of val), and refuses a non-empty --out without --overwrite."""
    from graspsim.cli.cli import main

    out = tmp_path / "val"
    assert main(["render-transfer", "--split", "val", "--n", "5", "--seed", "11", "--out", str(out)]) == 0
    shipped = TRANSFER_DIR / "val"
    for sub in ("images", "masks"):
        names = sorted(p.name for p in (out / sub).iterdir())
        assert names == [f"frame_{k:05d}.png" for k in range(5)]
        for name in names:
            assert (out / sub / name).read_bytes() == (shipped / sub / name).read_bytes(), (sub, name)
    lines = (out / "meta.csv").read_bytes().split(b"\r\n")
    assert lines[:6] == (shipped / "meta.csv").read_bytes().split(b"\r\n")[:6]
    assert main(["render-transfer", "--split", "val", "--n", "1", "--out", str(out)]) == 2
    assert len(list((out / "images").iterdir())) == 5
