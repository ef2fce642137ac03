"""The image-set folder (graspsim.vision.image_set): what the writer writes reads back bit for bit, the one overwrite
rule, the naming, and clear errors that name the frame or file."""

from __future__ import annotations

import numpy as np
import pytest

from graspsim.cli.cli import main
from graspsim.vision.image_set import (ImageSetWriter, encode_png, find_masks, frame_stem, images_folder, list_images,
                                       load_mask, read_image, read_mask, read_meta)
from graspsim.vision.sample_set import SAMPLE_REAL


def _frames(n: int, h: int = 12, w: int = 16, seed: int = 0):
    g = np.random.default_rng(seed)
    return [(g.integers(0, 256, (h, w, 3), dtype=np.uint8), g.random((h, w)) < 0.2) for _ in range(n)]


def test_round_trip_naming_bit_depth_and_metadata(tmp_path):
    out = tmp_path / "set"
    frames = _frames(3)
    with ImageSetWriter(out, meta_fields=("name", "t_s", "ok")) as w:
        stems = [w.add(rgb, m, {"t_s": 0.5 * k, "ok": k == 1}) for k, (rgb, m) in enumerate(frames)]
        assert not out.exists()  # staged beside it until the block ends
    assert stems == ["frame_0000", "frame_0001", "frame_0002"] == [frame_stem(k) for k in range(3)]
    images = list_images(out / "images")
    pairs = find_masks(images, out / "masks")
    for (rgb, m), p in zip(frames, images):
        assert np.array_equal(read_image(p), rgb)
        mask, levels = load_mask(pairs[p])
        assert np.array_equal(mask, m) and levels == 2
        assert pairs[p].read_bytes() == encode_png(m)  # 8-bit grey, 0/255
    assert np.unique(read_image(pairs[images[0]])).tolist() == [0, 255]
    meta = read_meta(out / "meta.csv")
    assert list(meta) == stems and meta["frame_0001"] == {"name": "frame_0001", "t_s": "0.5", "ok": "1"}
    assert (out / "meta.csv").read_bytes().startswith(b"name,t_s,ok\r\n")
    assert images_folder(out) == out / "images" and images_folder(out / "images") == out / "images"
    assert [p.name for p in tmp_path.iterdir()] == ["set"]  # no staging folder left


def test_overwrite_rule(tmp_path):
    out = tmp_path / "set"
    with ImageSetWriter(out, prefix="pile", digits=2) as w:
        for rgb, m in _frames(3):
            w.add(rgb, m)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty.*--overwrite"):
        ImageSetWriter(out)
    with pytest.raises(RuntimeError, match="boom"):  # a failed write leaves the earlier set as it was
        with ImageSetWriter(out, overwrite=True) as w:
            w.add(*_frames(1, seed=1)[0])
            raise RuntimeError("boom")
    assert sorted(p.name for p in (out / "images").iterdir()) == ["pile_00.png", "pile_01.png", "pile_02.png"]
    with ImageSetWriter(out, overwrite=True) as w:  # replaced as a whole: no frame of the longer set survives
        w.add(_frames(1, seed=2)[0][0])
    assert sorted(p.name for p in out.iterdir()) == ["images", "notes.txt"]
    assert [p.name for p in (out / "images").iterdir()] == ["frame_0000.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set"]


def test_writer_errors_name_the_frame(tmp_path):
    rgb, m = _frames(1)[0]
    with pytest.raises(ValueError, match="frame_0000.*H,W,3 uint8"):
        with ImageSetWriter(tmp_path / "a") as w:
            w.add(rgb.astype(np.float32))
    with pytest.raises(ValueError, match="frame_0001.*every frame needs one"):
        with ImageSetWriter(tmp_path / "b") as w:
            w.add(rgb, m)
            w.add(rgb)
    with pytest.raises(ValueError, match="x.*mask is"):
        with ImageSetWriter(tmp_path / "c") as w:
            w.add(rgb, m[:, :3], stem="x")
    with pytest.raises(ValueError, match="already added"):
        with ImageSetWriter(tmp_path / "d") as w:
            w.add(rgb, stem="x")
            w.add(rgb, stem="x")
    with pytest.raises(ValueError, match="stem"):
        with ImageSetWriter(tmp_path / "e") as w:
            w.add(rgb, stem="../up")
    assert not list(tmp_path.iterdir())  # nothing written by any failed set
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="existing file"):
        ImageSetWriter(tmp_path / "file")


def test_readers_name_the_file(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "bad.png").write_bytes(b"not a png")
    with pytest.raises(ValueError, match="bad.png"):
        read_image(tmp_path / "images" / "bad.png")
    with pytest.raises(ValueError, match="bad.png"):
        read_mask(tmp_path / "images" / "bad.png")
    with pytest.raises(FileNotFoundError, match="nope.png"):
        read_image(tmp_path / "nope.png")
    with pytest.raises(FileNotFoundError, match="masks"):
        find_masks(list_images(tmp_path / "images"), tmp_path / "masks")
    (tmp_path / "m.csv").write_text("stem,x\na,1\n")
    with pytest.raises(ValueError, match="m.csv.*'name'"):
        read_meta(tmp_path / "m.csv")


def test_sample_set_verb_prints_the_installed_folder(capsys):
    assert main(["sample-set", "--where"]) == 0
    assert capsys.readouterr().out.strip() == str(SAMPLE_REAL)
    assert main(["sample-set"]) == 2 and "exactly one of --where" in capsys.readouterr().err
