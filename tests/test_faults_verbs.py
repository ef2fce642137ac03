"""Faults of the verbs other than deploy (issue 38): bad inputs refused with one line naming the file, outputs that
are never lost, mixed or silently replaced, and no traceback or foreign log line on stderr.

Each case asserts the exit code, the one error line on stderr and the files left behind, like
tests/test_deploy_faults.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from child_signals import default_stop_signals, stop_signals_at_default

import cv2
import h5py
import numpy as np
import pytest

from deploy_fakes import RedDotCamera
from frame_sets import write_png
from cli_run import run_cli
from graspsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
VISION = ROOT / "vision" / "assets" / "segnet.pt"
POLICY = ROOT / "tests" / "assets" / "policy_format0.pt"
SAMPLE = ROOT / "data" / "sample_real"
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


_run = run_cli


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def _hidden(folder: Path) -> list[str]:
    """Staging and trash folders left beside outputs in ``folder``."""
    return [p.name for p in folder.iterdir() if p.name.endswith((".staging", ".old"))]


def _labelled(root: Path, n: int = 6, size: int = 64, grey: bool = False, inverted: bool = False) -> Path:
    """``root/images`` + ``root/masks``: red discs on noise (every other frame target-free)."""
    rng = np.random.default_rng(0)
    for i in range(n):
        img = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        mask = np.zeros((size, size), np.uint8)
        if i % 2 and size >= 8:
            cv2.circle(mask, (size // 2, size // 2), max(1, size // 10), 255, -1)
            img[mask > 0] = (30, 40, 220)  # BGR red
        write_png(root / "images" / f"r{i:02d}.png", cv2.cvtColor(img, cv2.COLOR_BGR2GRAY) if grey else img)
        write_png(root / "masks" / f"r{i:02d}.png", 255 - mask if inverted else mask)
    return root


# ------------------------------------------------------------------------------------------ calibrate
def test_calibrate_refuses_grey_frames_naming_the_file(tmp_path, capsys):
    """Grey frames used to give exit 0, recall 0.004 and the frame gate switched off."""
    root = tmp_path / "grey"
    for p in sorted((SAMPLE / "images").iterdir()):
        write_png(root / "images" / p.name, cv2.imread(str(p), cv2.IMREAD_GRAYSCALE))
    shutil.copytree(SAMPLE / "masks", root / "masks")
    out = tmp_path / "cal.pt"
    code, line = _run(["calibrate", "--vision", str(VISION), "--images", str(root / "images"), "--out", str(out)],
                      capsys)
    first = sorted((root / "images").iterdir())[0]
    assert code == 2 and line.startswith(f"graspsim calibrate: error: image {first} and 15 more of the 16 in "), line
    assert "has no colour (greyscale" in line and line.endswith("give the camera's colour frames")
    assert not out.exists() and _hidden(tmp_path) == []


@pytest.mark.parametrize("how", ["same path", "symlink"])
def test_calibrate_refuses_to_overwrite_its_own_source(tmp_path, capsys, how):
    net = tmp_path / "net.pt"
    shutil.copy(VISION, net)
    out = net
    if how == "symlink":
        out = tmp_path / "link.pt"
        out.symlink_to(net)
    before = net.read_bytes()
    code, line = _run(["calibrate", "--vision", str(net), "--images", str(SAMPLE / "images"), "--out", str(out),
                       "--overwrite"], capsys)
    assert code == 2 and line == (f"graspsim calibrate: error: --out {out} is the --vision checkpoint itself; calibrate "
                                  "writes a calibrated copy and keeps its source: choose another --out"), line
    assert net.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == sorted({net.name, out.name})


# ------------------------------------------------------------------------------------------ propose-masks
@pytest.mark.parametrize("inside", [False, True])
def test_propose_masks_refuses_an_out_in_its_images_folder(tmp_path, capsys, inside):
    images = _labelled(tmp_path / "s") / "images"
    before = _tree(images)
    out = images / "proposed" if inside else images
    code, line = _run(["propose-masks", "--images", str(images), "--out", str(out), "--overwrite"], capsys)
    assert code == 2 and line.startswith(f"graspsim propose-masks: error: --out {out} is "
                                         f"{'inside the' if inside else 'the'} --images folder"), line
    assert line.endswith("would be read as frames: choose an --out outside it")
    assert _tree(images) == before  # no contact_sheet.png among the frames


def test_a_write_error_names_out_not_the_hidden_staging_folder(tmp_path, capsys, monkeypatch):
    import errno

    import graspsim.vision.proposals as proposals

    images = _labelled(tmp_path / "s") / "images"
    real_write = proposals.write_png

    def disk_full(path, img, compact=False):
        if Path(path).name == "contact_sheet.png":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real_write(path, img, compact)

    monkeypatch.setattr(proposals, "write_png", disk_full)
    out = tmp_path / "proposed"
    code, line = _run(["propose-masks", "--images", str(images), "--out", str(out)], capsys)
    assert code == 2 and line == f"graspsim propose-masks: error: No space left on device: {out}/contact_sheet.png", line
    assert not out.exists() and _hidden(tmp_path) == []


# ------------------------------------------------------------------------------------------ pipeline
def test_pipeline_checks_transfer_before_the_collect_stage(tmp_path, capsys):
    runs = tmp_path / "runs"
    t0 = time.monotonic()
    code, line = _run(["pipeline", "--vision-model", "cropped", "--transfer", "/nope", "--runs-dir", str(runs),
                       "--name", "x", "--no-progress"], capsys)
    assert code == 2 and line.startswith("graspsim pipeline: error: --transfer /nope does not exist"), line
    assert time.monotonic() - t0 < 5 and not runs.exists()
    half = tmp_path / "half"
    (half / "val" / "images").mkdir(parents=True)
    code, line = _run(["pipeline", "--transfer", str(half), "--runs-dir", str(runs), "--no-progress"], capsys)
    assert code == 2 and f"--transfer {half} has no val/masks/, test/images/, test/masks/" in line, line
    assert not runs.exists()


# ------------------------------------------------------------------------------------------ export-dataset
@pytest.fixture(scope="module")
def episodes(tmp_path_factory) -> dict[str, Path]:
    """A finished episode file and damaged copies of it."""
    pytest.importorskip("pyarrow")
    from graspsim.config import SimConfig
    from graspsim.dataset import EpisodeWriter, read_episodes
    from graspsim.expert.collect import CollectConfig, collect
    from graspsim.runtime import RuntimeConfig

    root = tmp_path_factory.mktemp("episodes")
    good = root / "good.h5"
    collect(CollectConfig(out=good, episodes=2, num_envs=2, seed=0, sim=SimConfig(image_size=32, max_steps=8,
                                                                                    shadows=False),
                          runtime=RuntimeConfig(progress=False)))
    with h5py.File(good, "r") as f:
        config = json.loads(f.attrs["config"])
    # a collect killed before it consolidated its file, whose .parts folder was then deleted
    with EpisodeWriter(root / "killed.h5", config, consolidate=False) as w:
        for ep in read_episodes(good):
            w.append([ep])
    shutil.rmtree(root / "killed.h5.parts")
    shutil.copy(good, root / "no_gripper.h5")
    with h5py.File(root / "no_gripper.h5", "r+") as f:
        del f["data/demo_1/obs/gripper"]
    shutil.copy(good, root / "unequal.h5")
    with h5py.File(root / "unequal.h5", "r+") as f:
        g = f["data/demo_1/obs"]
        short = g["gripper"][:-2]
        del g["gripper"]
        g.create_dataset("gripper", data=short)
    # mid-file corruption: zeros over the stored bytes of demo_1's first image chunk
    with h5py.File(good, "r") as f:
        info = f["data/demo_1/obs/rgb"].id.get_chunk_info(0)
    raw = bytearray(good.read_bytes())
    raw[info.byte_offset:info.byte_offset + info.size] = bytes(info.size)
    (root / "corrupt.h5").write_bytes(bytes(raw))
    return {p.stem: p for p in root.glob("*.h5")}


@pytest.mark.parametrize("name, message", [
    ("killed", "{path} demo_0: its steps are stored in killed.h5.parts/part-000000.h5, which cannot be opened"),
    ("no_gripper", "{path} demo_1: no obs/gripper (the file's first episode has obs/gripper, obs/mask, obs/rgb); "
                   "every episode of a dataset needs the same observations: leave the file out"),
    ("unequal", "{path} demo_1: arrays of unequal lengths (obs/gripper has 6 steps, the episode 8)"),
    ("corrupt", "{path} demo_1: its data cannot be read ("),
])
def test_export_dataset_names_the_file_and_the_episode(tmp_path, capsys, episodes, name, message):
    out = tmp_path / "x"
    path = episodes[name]
    code, line = _run(["export-dataset", str(episodes["good"]), str(path), "--out", str(out), "--images", "png",
                       "--no-progress"], capsys)
    assert code == 2 and line.startswith("graspsim export-dataset: error: "), line
    assert message.format(path=path) in line, line
    assert not out.exists() and _hidden(tmp_path) == []


@pytest.mark.parametrize("overwrite", [False, True])
def test_two_exports_into_one_out_the_second_to_finish_is_refused(tmp_path, capsys, monkeypatch, episodes, overwrite):
    """The race, simulated: while this export writes its staged copy, another export completes into the same
    --out. This one must not replace that one's outputs."""
    import graspsim.dataset.lerobot as lerobot

    out = tmp_path / "x"
    flags = ["--images", "png", "--no-progress"] + (["--overwrite"] if overwrite else [])
    if overwrite:  # an earlier export that both runs were asked to replace
        assert _run(["export-dataset", str(episodes["good"]), "--out", str(out), *flags], capsys)[0] == 0
    real_write = lerobot._write
    other = {}

    def write_while_another_finishes(plan, root, total, progress):
        frames = real_write(plan, root, total, progress)
        if not other:  # the other run: exports the file twice, so that its info.json can be told apart
            monkeypatch.setattr(lerobot, "_write", real_write)
            other["summary"] = lerobot.export_lerobot([episodes["good"], episodes["good"].with_name("good2.h5")],
                                                      out, images="png", overwrite=True)
        return frames

    shutil.copy(episodes["good"], episodes["good"].with_name("good2.h5"))
    monkeypatch.setattr(lerobot, "_write", write_while_another_finishes)
    code, line = _run(["export-dataset", str(episodes["good"]), "--out", str(out), *flags], capsys)
    assert code == 2 and line.startswith(f"graspsim export-dataset: error: --out {out} was written by another run "
                                         "while this one worked (it now holds "), line
    # issue 55: the advice holds whether --overwrite was given or not (it used to suggest the flag already given)
    assert line.endswith("once that run has ended, run this one again (with --overwrite, which replaces what that run "
                         "wrote), or choose another --out")
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["total_episodes"] == 4 == other["summary"]["episodes"]  # the other run's export, whole
    assert _hidden(tmp_path) == []


def test_staged_dir_refuses_when_out_appeared_meanwhile(tmp_path):
    from graspsim.fileio import staged_dir

    out = tmp_path / "o"
    with pytest.raises(FileExistsError, match="was written by another run"):
        with staged_dir(out, lambda n: n == "a.txt") as stage:
            (stage / "a.txt").write_text("mine")
            out.mkdir()
            (out / "a.txt").write_text("theirs")
    assert (out / "a.txt").read_text() == "theirs" and _hidden(tmp_path) == []


# ------------------------------------------------------------------------------------------ train-vision --real
@pytest.fixture
def init(tmp_path) -> Path:
    import dataclasses

    import torch

    from frame_sets import TINY
    from graspsim.vision.checkpoint import save_checkpoint
    from graspsim.vision.model import SegNet

    torch.manual_seed(0)
    model = SegNet(TINY)
    path = tmp_path / "init.pt"
    save_checkpoint(path, {"model": model.state_dict(), "model_config": dataclasses.asdict(model.cfg), "config": {},
                           "step": 1, "threshold": 0.4, "peak_threshold": 0.0, "image_size": 64})
    return path


@pytest.mark.parametrize("case", ["inverted", "tiny", "twice", "grey"])
def test_train_vision_real_refuses_bad_folders(tmp_path, capsys, init, case):
    good = _labelled(tmp_path / "good")
    bad = {"inverted": lambda: _labelled(tmp_path / "bad", inverted=True),
           "tiny": lambda: _labelled(tmp_path / "bad", size=2),
           "twice": lambda: good,
           "grey": lambda: _labelled(tmp_path / "bad", grey=True)}[case]()
    real = f"{good},{tmp_path / 'good' / '..' / 'good'}" if case == "twice" else f"{good},{bad}"
    out = tmp_path / "run"
    code, line = _run(["train-vision", "--out", str(out), "--init", str(init), "--real", real, "--transfer", "None",
                       "--operating-point", "composite", "--no-progress"], capsys)
    expected = {
        "inverted": f"masks in {bad / 'masks'}: 3 of 6 mark every pixel of their frame as target (e.g. r00); they "
                    "look inverted: a mask is 255 on the target and 0 elsewhere",
        "tiny": f"image {bad / 'images' / 'r00.png'} is 2x2; labelled frames must be at least 16x16 pixels",
        "twice": f"--real {tmp_path / 'good' / '..' / 'good'} is given twice (as {good} and {tmp_path / 'good' / '..' / 'good'}); its "
                 "frames would count twice: give each folder once",
        "grey": f"image {bad / 'images' / 'r00.png'} and 5 more of the 6 in {bad / 'images'} has no colour",
    }[case]
    assert code == 2 and line.startswith("graspsim train-vision: error: ") and expected in line, line
    assert not out.exists() and _hidden(tmp_path) == []


def test_masks_covering_most_of_their_frames_are_called_inverted(tmp_path):
    from graspsim.vision.labelled import load_labelled

    root = _labelled(tmp_path / "s")
    for p in (root / "masks").iterdir():  # the target frames' masks inverted: 90 % of those frames marked
        m = cv2.imread(str(p), cv2.IMREAD_GRAYSCALE)
        if m.any():
            write_png(p, 255 - m)
        else:
            m[:60] = 255
            write_png(p, m)
    with pytest.raises(ValueError, match=r"mark 9\d% of each frame as target on average; .* look inverted"):
        load_labelled(root / "images")


# ------------------------------------------------------------------------------------------ checkpoints
@pytest.mark.parametrize("content", [b"not a checkpoint\n", "png"])
def test_a_non_checkpoint_is_one_line_naming_the_file(tmp_path, capsys, content):
    bad = tmp_path / "policy.pt"
    if content == "png":  # unpickling a PNG gives a message of two lines
        ok, buf = cv2.imencode(".png", np.zeros((4, 4), np.uint8))
        content = buf.tobytes()
    bad.write_bytes(content)
    out = tmp_path / "ev"
    code, line = _run(["eval-sim", "--policy", str(bad), "--out", str(out), "--episodes", "1", "--no-progress"], capsys)
    assert code == 2 and line.startswith(f"graspsim eval-sim: error: {bad} is not a readable torch checkpoint ("), line
    assert "; give a " in line and " written by " in line
    assert not out.exists()


# ------------------------------------------------------------------------------------------ stderr is ours alone
def test_a_damaged_png_gives_our_line_and_no_libpng_line(tmp_path, capfd):
    images = _labelled(tmp_path / "s") / "images"
    raw = bytearray((images / "r01.png").read_bytes())
    raw[60:80] = b"\xff" * 20  # inside the IDAT chunk
    (images / "r01.png").write_bytes(bytes(raw))
    out = tmp_path / "p"
    code = main(["propose-masks", "--images", str(images), "--out", str(out)])
    err = capfd.readouterr().err
    assert code == 2 and err.splitlines() == [
        f"graspsim propose-masks: error: cannot read image {images / 'r01.png'}: a damaged PNG file (its IDAT chunk "
        "at byte 33 fails its checksum)"], err
    assert not out.exists()
    (images / "r01.png").write_bytes(bytes(raw[:300]))  # cut short
    assert main(["propose-masks", "--images", str(images), "--out", str(out)]) == 2
    assert capfd.readouterr().err.splitlines() == [
        f"graspsim propose-masks: error: cannot read image {images / 'r01.png'}: a damaged PNG file (it ends at byte "
        "300, before its last (IEND) chunk: it was cut short)"]


def test_opencv_and_ffmpeg_log_lines_are_kept_off_stderr(tmp_path):
    """Run as the command (a fresh process: OpenCV reads its log settings when it is first imported)."""
    video = tmp_path / "junk.mp4"
    video.write_bytes(b"not a video")
    r = subprocess.run([sys.executable, "-m", "graspsim.cli", "record", "--camera", str(video), "--out",
                        str(tmp_path / "r"), "--frames", "2"], capture_output=True, text=True, env=ENV, timeout=60)
    assert r.returncode == 2 and r.stderr.splitlines() == [
        f"graspsim record: error: camera {video}: OpenCV cannot open this video file"], r.stderr
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------------------ Ctrl-C and SIGTERM
def test_importing_the_command_does_not_import_torch():
    r = subprocess.run([sys.executable, "-c", "import sys, graspsim.cli, graspsim; print('torch' in sys.modules)"],
                       capture_output=True, text=True, env=ENV, timeout=60)
    assert r.stdout.strip() == "False", r.stderr




def test_ctrl_c_while_torch_is_imported_is_one_line(tmp_path):
    """SIGINT right after the start, while the verb's modules (torch) are imported: one line, exit 130."""
    maps_of = Path("/proc/self/maps")
    if not maps_of.exists():
        pytest.skip("needs /proc to see when torch is being imported")
    # enough episodes that a signal sent late (a loaded machine may not run this poll for a while) still lands
    # before the run ends: Ctrl-C is one line and 130 at any moment, the import being the moment aimed at
    proc = subprocess.Popen([sys.executable, "-m", "graspsim.cli", "eval-sim", "--policy", str(POLICY), "--out",
                             str(tmp_path / "ev"), "--episodes", "5000"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, preexec_fn=default_stop_signals)
    maps = Path(f"/proc/{proc.pid}/maps")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if "libtorch" in maps.read_text():
                break
        except OSError:
            pass
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.splitlines() == ["graspsim eval-sim: interrupted (SIGINT)"], err
    assert not (tmp_path / "ev").exists() or not any((tmp_path / "ev").iterdir())  # no output, no staging folder


def test_ctrl_c_during_the_verbs_import_in_process(tmp_path, capsys, monkeypatch):
    cli = sys.modules[main.__module__]  # graspsim.cli.cli

    def interrupted(name):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.importlib, "import_module", interrupted)
    code = main(["eval-sim", "--policy", str(POLICY), "--out", str(tmp_path / "ev")])
    assert code == 130 and capsys.readouterr().err.splitlines() == ["graspsim eval-sim: interrupted (SIGINT)"]


def test_sigterm_while_eval_sim_writes_leaves_no_staging_folder(tmp_path, capsys, monkeypatch):
    import graspsim.dagger.evaluate as evaluate

    real_gif = evaluate.write_gif

    def gif_then_sigterm(path, *a, **k):
        real_gif(path, *a, **k)
        assert Path(path).parent.name.endswith(".staging")  # inside the staged block
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)  # the handler raises here

    monkeypatch.setattr(evaluate, "write_gif", gif_then_sigterm)
    out = tmp_path / "ev"
    code = main(["eval-sim", "--policy", str(POLICY), "--out", str(out), "--episodes", "2", "--gifs", "1",
                 "--no-progress"])
    assert code == 143 and capsys.readouterr().err.splitlines() == ["graspsim eval-sim: interrupted (SIGTERM)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_second_signal_during_the_cleanup_still_removes_the_staging_folder(tmp_path, monkeypatch):
    import graspsim.fileio as fileio

    real_rmtree = shutil.rmtree
    calls = []

    def interrupted_once(path, *a, **k):
        calls.append(path)
        if len(calls) == 1:
            raise KeyboardInterrupt  # the second stop signal (torchrun's SIGTERM after the terminal's SIGINT)
        real_rmtree(path, *a, **k)

    monkeypatch.setattr(fileio.shutil, "rmtree", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        with fileio.staged_dir(tmp_path / "o", lambda n: True) as stage:
            (stage / "half.gif").write_bytes(b"GIF")
            raise KeyboardInterrupt
    assert len(calls) == 2 and list(tmp_path.iterdir()) == []


def test_a_ctrl_c_during_the_swap_is_held_until_the_swap_is_complete(tmp_path, monkeypatch):
    import graspsim.fileio as fileio

    out = tmp_path / "o"
    out.mkdir()
    (out / "a.txt").write_text("old")
    (out / "b.txt").write_text("old")
    (out / "notes.txt").write_text("mine")
    real_replace = os.replace
    calls = []

    def replace_then_interrupt(src, dst):
        real_replace(src, dst)
        calls.append(dst)
        if len(calls) == 2:
            raise KeyboardInterrupt  # after the second move: new a.txt in, b.txt not yet

    monkeypatch.setattr(fileio.os, "replace", replace_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        with fileio.staged_dir(out, lambda n: n != "notes.txt") as stage:
            (stage / "a.txt").write_text("new")
            (stage / "b.txt").write_text("new")
            (stage / "c.txt").write_text("new")
    assert {p.name: p.read_text() for p in out.iterdir()} == {"a.txt": "new", "b.txt": "new", "c.txt": "new",
                                                               "notes.txt": "mine"}
    assert _hidden(tmp_path) == []


# ------------------------------------------------------------------------------------------ record
class RGBACamera(RedDotCamera):
    """Two good frames, then H,W,4 frames."""

    name = "rgba"

    def read(self, timeout):
        f = super().read(timeout)
        if self.k > 2:
            f.rgb = np.concatenate([f.rgb, np.full((64, 64, 1), 255, np.uint8)], axis=2)
        return f


def test_record_refuses_an_rgba_frame_from_an_adapter_and_keeps_the_earlier_ones(tmp_path, capsys):
    out = tmp_path / "r"
    code, line = _run(["record", "--camera", "test_faults_verbs:RGBACamera", "--out", str(out), "--frames", "9",
                       "--hz", "0"], capsys)
    assert code == 2 and line.startswith("graspsim record: error: camera 'rgba' (RGBACamera.read) returned a frame "
                                         "whose rgb is an array of shape (64, 64, 4) uint8; expected H,W,3 uint8 RGB"), line
    assert line.endswith("without alpha (rgb[..., :3], or rgb[..., 2::-1] for BGRA)")
    assert _tree(out) == ["frames.csv", "images", "images/frame_0000.png", "images/frame_0001.png"]


def test_record_of_rgba_files_keeps_their_colours(tmp_path, capsys):
    src = tmp_path / "src"
    rgb = np.zeros((32, 32, 3), np.uint8)
    rgb[..., 0], rgb[..., 1], rgb[..., 2] = 200, 100, 10  # red, green, blue
    bgra = np.concatenate([rgb[..., ::-1], np.full((32, 32, 1), 128, np.uint8)], axis=2)
    for i in range(2):
        write_png(src / f"f{i}.png", bgra)
    out = tmp_path / "r"
    code, _ = _run(["record", "--camera", str(src), "--out", str(out), "--frames", "2", "--hz", "0"], capsys)
    assert code == 0
    from graspsim.vision.image_set import read_image

    got = read_image(out / "images" / "frame_0000.png")
    assert got.shape == (32, 32, 3) and tuple(got[0, 0]) == (200, 100, 10)


# ------------------------------------------------------------------------------------------ issue 55
def test_an_interrupted_collect_overwrite_keeps_the_earlier_file(tmp_path, capsys, monkeypatch):
    """Item 9: Ctrl-C in a `collect --overwrite` used to replace the earlier file with the partial one; the earlier
    file stays, as after a hard kill (docs/cli.md)."""
    import graspsim.expert.collect as collect_mod
    from graspsim.dataset import describe

    out = tmp_path / "d.h5"
    small = ["--sim.image-size", "16", "--sim.no-shadows", "--num-envs", "2", "--no-progress"]
    assert main(["collect", "--out", str(out), "--episodes", "2", "--seed", "1", *small]) == 0
    before = out.read_bytes()
    real_run = collect_mod._run

    def interrupted_after_a_commit(cfg, writer, *a, **k):
        def commit_then_stop(stats):
            raise KeyboardInterrupt  # Ctrl-C right after the first commit of the new file
        return real_run(cfg, writer, *a[:3], commit_then_stop, *a[4:], **k)

    monkeypatch.setattr(collect_mod, "_run", interrupted_after_a_commit)
    capsys.readouterr()
    code = main(["collect", "--out", str(out), "--episodes", "6", "--seed", "2", "--overwrite", *small])
    err = capsys.readouterr().err
    assert code == 130 and err.strip().splitlines()[-1] == "graspsim collect: interrupted (SIGINT)", err
    assert out.read_bytes() == before and describe(out)["episodes"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.h5"]  # no staged file, no parts folder


@pytest.mark.parametrize("argv, message", [
    (["collect", "--out", "{t}/d.h5", "--episodes", "99999999999999999999"],
     "CollectConfig.episodes must be an int in 1..10000000"),
    (["collect", "--out", "{t}/d.h5", "--threads", "1000"], "RuntimeConfig.threads must be an int in 0..256"),
    (["record", "--camera", "deploy_fakes:RedDotCamera", "--out", "{t}/r", "--hz", "1e6"],
     "RecordConfig.hz must be at most 1000 Hz"),
    (["collect", "--out", "{t}/d.h5", "--sim.randomization.slip-rate", "0.05", "0.0"],
     "RandomizationConfig.slip_rate must be a (low, high) pair of finite numbers with low <= high; got (0.05, 0.0)"),
])
def test_counts_rates_and_ranges_are_refused_with_sane_bounds(tmp_path, capsys, argv, message):
    """Item 13 and the clean-but-poor list: huge counts and rates are capped; a reversed range's message gives real
    bounds, not -inf...inf."""
    code, line = _run([a.replace("{t}", str(tmp_path)) for a in argv], capsys)
    assert code == 2 and message in line and "inf" not in line, line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("verb", ["collect", "deploy"])
def test_a_world_size_that_is_no_number_is_one_line(tmp_path, capsys, monkeypatch, verb):
    """Item 14: WORLD_SIZE=abc used to end in a traceback."""
    monkeypatch.setenv("WORLD_SIZE", "abc")
    code, line = _run([verb, "--out", str(tmp_path / "o.h5")], capsys)
    assert code == 2 and line == (f"graspsim {verb}: error: environment variable WORLD_SIZE='abc' is not an integer "
                                  "(set by torchrun)"), line


def test_a_reader_that_goes_away_does_not_turn_an_error_or_a_ctrl_c_into_success(tmp_path):
    """Item 10: `graspsim deploy ... 2>&1 | head -1` used to exit 0 after an error or a Ctrl-C (the BrokenPipeError of
    the last line was taken for "the reader left, all is well"). Two runs side by side: the reader closes the pipe
    after the first line; the exit code is still the run's."""
    cases = {"PipeErrorCamera": 2, "PipeInterruptCamera": 130}
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    procs = {}
    for cam in cases:
        procs[cam] = subprocess.Popen(
            [sys.executable, "-m", "graspsim.cli", "deploy", "--vision", str(VISION), "--policy", str(POLICY),
             "--camera", f"test_faults_verbs:{cam}", "--robot", "dry-run", "--out", str(tmp_path / cam), "--hz",
             "50", "--time-limit", "60", "--warmup", "1", "--no-progress"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, preexec_fn=default_stop_signals)
    for cam, proc in procs.items():
        seen = []
        while not seen or b"camera hiccup" not in seen[-1]:  # (overrun warnings may come first)
            seen.append(proc.stderr.readline())
            assert seen[-1], seen
        proc.stderr.close()  # the reader goes away (head -1) before the run's last line
    for cam, proc in procs.items():
        assert proc.wait(timeout=120) == cases[cam], cam
        assert json.loads((tmp_path / cam / "summary.json").read_text())["ended"] in ("error", "interrupted")


class PipeErrorCamera(RedDotCamera):
    """Logs a line, waits (for the reader to leave), then fails."""

    name = "pipe-error"

    def read(self, timeout):
        if self.k == 2:
            import logging

            logging.getLogger("fake").warning("camera hiccup")
            time.sleep(1.5)
            raise OSError("camera unplugged")
        return super().read(timeout)


class PipeInterruptCamera(RedDotCamera):
    """Logs a line, waits (for the reader to leave), then Ctrl-C arrives."""

    name = "pipe-interrupt"

    def read(self, timeout):
        if self.k == 2:
            import logging

            from graspsim.interrupts import Stopped

            logging.getLogger("fake").warning("camera hiccup")
            time.sleep(1.5)
            raise Stopped(signal.SIGINT)
        return super().read(timeout)


def _damaged_copy(good: Path, root: Path, name: str, damage) -> Path:
    path = root / f"{name}.h5"
    shutil.copy(good, path)
    with h5py.File(path, "r+") as f:
        damage(f["data/demo_1"])
    return path


def _fewer_actions(g) -> None:
    a = g["actions"][()]
    del g["actions"]
    g["actions"] = a[:5]


def _nan_actions(g) -> None:
    a = g["actions"][()]
    a[2, 0] = np.nan
    g["actions"][...] = a


def _float_rgb(g) -> None:
    rgb = g["obs/rgb"][()].astype(np.float64)
    del g["obs/rgb"]
    g["obs/rgb"] = rgb


@pytest.mark.parametrize("name, damage, problem", [
    ("no_rgb", lambda g: g["obs"].__delitem__("rgb"), "demo_1: no obs/rgb (the wrist frames)"),
    ("fewer_actions", _fewer_actions, "demo_1: 5 actions for 8 steps"),
    ("nan_actions", _nan_actions, "demo_1: 1 NaN or infinite action values"),
    ("float_rgb", _float_rgb, "demo_1: obs/rgb is float64 (8, 32, 32, 3); expected T,H,W,3 uint8"),
])
def test_inspect_flags_files_that_export_and_training_would_refuse(tmp_path, capsys, caplog, episodes, name, damage,
                                                                    problem):
    """Item 12: inspect used to call these files healthy (export-dataset refuses them); a float64 obs/rgb ended in a
    traceback when drawn (item 14)."""
    path = _damaged_copy(episodes["good"], tmp_path, name, damage)
    code, _ = _run(["inspect", str(path), "--no-media"], capsys)
    assert code == 0 and f"{path}: {problem}" in caplog.text
    from graspsim.expert.inspect import health

    assert [p[:len(problem)] for p in health(path)] == [problem] and health(episodes["good"]) == []
    if name == "float_rgb":  # drawing it: one line, no traceback
        code, line = _run(["inspect", str(path), "--demo", "1", "--out", str(tmp_path / "media")], capsys)
        assert code == 2 and line == ("graspsim inspect: error: obs/rgb must be T,H,W,3 uint8 to be drawn; got "
                                      "float64 (8, 32, 32, 3)"), line
        assert not (tmp_path / "media").exists() or list((tmp_path / "media").iterdir()) == []


@pytest.mark.parametrize("how", ["grey", "inverted", "fine"])
def test_eval_real_warns_about_grey_frames_and_inverted_masks(tmp_path, capsys, caplog, how):
    """Item 12: eval-real used to report IoU 0.000 without a word on grey frames or inverted masks (calibrate refuses
    both; eval-real scores them, warns and records it in metrics.json)."""
    root = _labelled(tmp_path / "s", grey=how == "grey", inverted=how == "inverted")
    out = tmp_path / "ev"
    code, _ = _run(["eval-real", "--vision", str(VISION), "--images", str(root / "images"), "--masks",
                    str(root / "masks"), "--out", str(out), "--no-progress"], capsys)
    assert code == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["grey_images"] == (6 if how == "grey" else 0)
    assert m["masks_look_inverted"] is (how == "inverted")
    assert ("6 of the 6 images" in caplog.text and "have no colour" in caplog.text) is (how == "grey")
    assert ("look inverted" in caplog.text) is (how == "inverted")


def test_a_stop_signal_python_discards_in_a_finalizer_is_delivered_again():
    """Item 3 (the `graspsim pipeline` case): a SIGTERM whose exception was raised inside a weakref callback used to
    be discarded ("Exception ignored ... _Stopped") and the run went on for minutes, then exited 0."""
    import weakref

    from graspsim import interrupts

    assert interrupts.install()
    try:
        class Thing:
            pass

        def callback(_):
            os.kill(os.getpid(), signal.SIGTERM)
            t = time.monotonic()
            while time.monotonic() - t < 0.05:  # the handler runs here, inside the callback
                pass

        thing = Thing()
        ref = weakref.ref(thing, callback)  # noqa: F841
        t0 = time.monotonic()
        with pytest.raises(interrupts.Stopped) as e:
            del thing
            while time.monotonic() - t0 < 5:  # ordinary work: the signal must land here
                sum(range(100))
        assert e.value.signum == signal.SIGTERM and time.monotonic() - t0 < 1.0
    finally:
        interrupts.uninstall()


def test_a_loose_shield_holds_the_first_signal_and_yields_to_the_second():
    """``shielded(firm=False)`` (the deploy loop's send): the first signal waits for the block's end, a second one
    interrupts it, unless a firm block encloses it."""
    from graspsim import interrupts

    def signal_and_wait(sig) -> None:
        os.kill(os.getpid(), sig)
        time.sleep(0.05)  # the handler runs here

    with stop_signals_at_default():  # under `cmd &` or nohup SIGINT starts ignored, and install() leaves it so
        assert interrupts.install()
        try:
            with pytest.raises(interrupts.Stopped) as e:
                with interrupts.shielded("a test's send", firm=False):
                    signal_and_wait(signal.SIGTERM)
                    assert interrupts.requested() == signal.SIGTERM  # held: no exception yet
                    signal_and_wait(signal.SIGINT)
                    raise AssertionError("the second signal did not interrupt the block")
            assert e.value.signum == signal.SIGTERM and interrupts.taken() == signal.SIGTERM
            with interrupts.shielded("a test's stop"):
                with interrupts.shielded("a test's send", firm=False):
                    signal_and_wait(signal.SIGTERM)
                    signal_and_wait(signal.SIGINT)  # held: the firm block outside decides
            assert interrupts.drain_held() == [signal.SIGINT] and interrupts.taken() == signal.SIGTERM
        finally:
            interrupts.uninstall()


def test_every_verb_loop_checks_the_stop_flag(tmp_path, capsys):
    """Item 3: a stop signal whose exception never reached the verb (held, or discarded) still ends eval-sim at its
    next step: the rollout driver checks the flag (as the training loops, record and deploy do)."""
    from graspsim import interrupts

    assert interrupts.install()
    try:
        with interrupts.shielded("a test's block"):  # the handler records the signal and does not raise
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
        assert interrupts.requested() == signal.SIGTERM
        code = main(["eval-sim", "--policy", str(POLICY), "--out", str(tmp_path / "ev"), "--episodes", "2",
                     "--no-progress"])
    finally:
        interrupts.uninstall()
    assert code == 143 and capsys.readouterr().err.strip().splitlines() == ["graspsim eval-sim: interrupted (SIGTERM)"]
    assert list(tmp_path.iterdir()) == []
