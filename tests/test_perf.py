"""Importing the library changes no process-global state; the allocator tuning is an explicit call of the app layer.

The one thing a library import may still do is add ``graspsim/WristGrasp-v0`` to gymnasium's registry (what every
gymnasium environment package does), so that registry is not compared.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import graspsim.perf as perf
from graspsim.cli import main

LIBRARY = ("graspsim", "graspsim.vision", "graspsim.expert", "graspsim.dagger", "graspsim.robot")
"""Every library package by its import path (the folders vision/, expert/, dagger/, robot/ install under graspsim)."""

_PROBE = textwrap.dedent("""
    import ctypes, importlib, logging, os, pkgutil, sys, warnings
    import numpy, torch, gymnasium, h5py, cv2, tyro  # third-party imports may do what they like; ours may not

    loaded = []
    class Recorder(ctypes.CDLL):
        def __init__(self, name, *args, **kwargs):
            loaded.append(str(name))
            super().__init__(name, *args, **kwargs)
    ctypes.CDLL = Recorder

    def snapshot():
        return {"threads": torch.get_num_threads(), "dtype": str(torch.get_default_dtype()),
                "rng": torch.random.get_rng_state().sum().item(), "np_rng": numpy.random.get_state()[1].sum().item(),
                "np_err": numpy.geterr(), "root_level": logging.getLogger().level,
                "root_handlers": len(logging.getLogger().handlers), "warnings": len(warnings.filters),
                "environ": dict(os.environ), "recursion": sys.getrecursionlimit()}

    before = snapshot()
    names = []
    for top in LIBRARY:
        pkg = importlib.import_module(top)
        names.append(top)
        for info in pkgutil.walk_packages(pkg.__path__, top + "."):
            importlib.import_module(info.name)
            names.append(info.name)
    after = snapshot()
    changed = sorted(k for k in before if before[k] != after[k])
    libc = [n for n in loaded if "libc" in n]
    print("imported", len(names), "changed", changed, "libc", libc)
    assert not changed and not libc, (changed, libc)
""")


def test_importing_every_library_module_changes_no_process_state():
    p = subprocess.run([sys.executable, "-c", f"LIBRARY = {LIBRARY!r}\n{_PROBE}"], capture_output=True, text=True,
                       timeout=300, cwd=Path(__file__).resolve().parent.parent)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    assert "changed [] libc []" in p.stdout
    assert int(p.stdout.split("imported ")[1].split()[0]) > 20  # it really walked the packages


class _FakeLibc:
    def __init__(self):
        self.calls = []

    def mallopt(self, param, value):
        self.calls.append((param, value))
        return 1


@pytest.fixture
def fake_libc(monkeypatch):
    libc = _FakeLibc()
    monkeypatch.setattr(perf.ctypes, "CDLL", lambda name: libc)
    monkeypatch.setattr(perf.sys, "platform", "linux")
    monkeypatch.setattr(perf, "_done", None)  # as in a fresh process
    monkeypatch.setattr(perf, "_announced", False)
    monkeypatch.delenv(perf.ENV_SWITCH, raising=False)
    return libc


def test_tune_allocator_sets_the_three_parameters_once_and_says_so(fake_libc, caplog):
    with caplog.at_level(logging.INFO, logger="graspsim.perf"):
        said = perf.tune_allocator()
        again = perf.tune_allocator()
    assert fake_libc.calls == [(-1, 1 << 30), (-2, 64 << 20), (-3, 32 << 20)]  # trim, top pad, mmap threshold
    assert said == again and said.startswith("tuned glibc malloc: trim threshold 1 GiB")
    assert [r.getMessage() for r in caplog.records] == [said]  # one line, not one per call


def test_tune_allocator_leaves_the_allocator_alone_when_switched_off(fake_libc, monkeypatch):
    monkeypatch.setenv(perf.ENV_SWITCH, "0")
    assert "left alone" in perf.tune_allocator()
    assert fake_libc.calls == []


def test_the_command_tunes_the_allocator_and_says_so_after_the_verb(fake_libc, tmp_path, caplog):
    out = tmp_path / "scenes.png"
    with caplog.at_level(logging.INFO):
        assert main(["show", "--out", str(out), "--num", "1", "--scale", "1", "--sim.image-size", "16"]) == 0
    assert out.is_file() and len(fake_libc.calls) == 3
    said = [r for r in caplog.records if r.name == "graspsim.perf"]
    assert len(said) == 1 and said[0].getMessage().startswith("tuned glibc malloc")
    assert caplog.records[-1] is said[0]  # the last line: a refused input's error stays the first


def test_a_refused_input_is_not_preceded_by_the_tuning_line(fake_libc, tmp_path, caplog, capsys):
    (tmp_path / "file.png").mkdir()  # --out names a folder
    with caplog.at_level(logging.INFO):
        assert main(["show", "--out", str(tmp_path / "file.png")]) == 2
    assert capsys.readouterr().err.startswith("graspsim show: error: ")
    assert len(fake_libc.calls) == 3  # tuned, then the verb refused its output path
    assert not [r for r in caplog.records if r.name == "graspsim.perf"]
