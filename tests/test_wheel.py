"""A non-editable install works: build a wheel, install it into a fresh virtual environment and run the command
from a folder outside the checkout (``-m install``, ~1 min; CI runs it after the default suite).

The fresh environment reuses this environment's third-party packages through a path line in a ``.pth`` file (so
torch is not installed again); the wheel itself goes in with ``--no-deps``. A plain path line does not process the
``.pth`` files of that folder, so this checkout's editable install stays invisible there, which the first test
checks. One fast test (not marked) keeps the package list of pyproject.toml in step with the code folders.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CODE_ROOTS = ("graspsim", "vision", "expert", "dagger", "scripts")
# what the checkout holds but a wheel is not built from
_NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "runs", "build", "dist", "*.egg-info", "__pycache__",
                                     ".pytest_cache", "tests", "benchmarks", "docs")


def _packages_on_disk() -> set[str]:
    return {".".join(p.parent.relative_to(REPO).parts) for root in CODE_ROOTS for p in (REPO / root).rglob("__init__.py")
            if "__pycache__" not in p.parts}


def test_pyproject_lists_every_code_package():
    tomllib = pytest.importorskip("tomllib")
    setup = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setup["packages"])
    missing = _packages_on_disk() - listed
    assert not missing, f"pyproject.toml [tool.setuptools] packages lacks {sorted(missing)}: a wheel would leave them out"
    assert setup["package-dir"]["graspsim_data"] == "data" and "graspsim_data" in listed
    assert (REPO / "data" / "__init__.py").is_file()


def _run(args: list, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    p = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(map(str, args))} exited {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def _setuptools_builds_it() -> bool:
    """Whether this environment's setuptools is new enough (pyproject.toml: >= 68) to build without isolation."""
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 68


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """Build the wheel from a copy of the checkout, install it into a fresh venv; the venv's paths."""
    tmp = tmp_path_factory.mktemp("wheel")
    src, dist, venv, elsewhere = tmp / "src", tmp / "dist", tmp / "venv", tmp / "elsewhere"
    shutil.copytree(REPO, src, ignore=_NOT_SOURCE)  # build in a copy so the checkout gets no build/ or egg-info
    isolation = ["--no-build-isolation"] if _setuptools_builds_it() else []  # no download of setuptools
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "--wheel-dir", dist, src], cwd=tmp)
    wheels = list(dist.glob("graspsim-*.whl"))
    assert len(wheels) == 1, wheels
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp)
    py = venv / "bin" / "python"
    site = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp).stdout.strip())
    outer = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))  # this env's torch, numpy, ...
    (site / "outer_env.pth").write_text("".join(f"{p}\n" for p in outer))
    _run([sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index", wheels[0]], cwd=tmp)
    elsewhere.mkdir()
    return {"wheel": wheels[0], "venv": venv, "python": py, "graspsim": venv / "bin" / "graspsim", "site": site,
            "cwd": elsewhere}


@pytest.mark.install
def test_wheel_holds_the_code_and_the_shipped_data(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    for pkg in _packages_on_disk():
        folder = REPO.joinpath(*pkg.split("."))
        for f in folder.glob("*.py"):
            assert f"{pkg.replace('.', '/')}/{f.name}" in names, f"{f.relative_to(REPO)} is not in the wheel"
    for path in ("graspsim_data/backgrounds/SOURCES.md", "graspsim_data/transfer/val/meta.csv",
                 "graspsim_data/transfer/test/masks/frame_01023.png", "graspsim_data/sample_real/images/frame_000.png",
                 "graspsim/assets/textures/wood.png", "vision/assets/segnet.pt"):
        assert path in names, f"{path} is not in the wheel"
    for split in ("train", "val", "test"):
        on_disk = sorted(p.name for p in (REPO / "data" / "backgrounds" / split).iterdir())
        assert sorted(n.rsplit("/", 1)[1] for n in names if n.startswith(f"graspsim_data/backgrounds/{split}/")) == on_disk
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "data/")) or "__pycache__" in n]


@pytest.mark.install
def test_the_fresh_venv_imports_the_installed_package(installed):
    code = ("import graspsim, vision, scripts.cli, graspsim_data, vision.backgrounds as b\n"
            "for m in (graspsim, vision, scripts.cli, graspsim_data): print(m.__file__)\n"
            "print(b.DEFAULT_BACKGROUNDS)")
    lines = _run([installed["python"], "-c", code], cwd=installed["cwd"]).stdout.split()
    assert len(lines) == 5
    for line in lines:
        assert Path(line).is_relative_to(installed["site"]), f"{line} is not in the fresh venv {installed['site']}"
        assert not Path(line).is_relative_to(REPO)


@pytest.mark.install
def test_show_runs_from_the_wheel(installed):
    out = installed["cwd"] / "scenes.png"
    _run([installed["graspsim"], "show", "--out", out, "--num", "2", "--scale", "1", "--sim.image-size", "32"],
         cwd=installed["cwd"])
    assert out.stat().st_size > 0


@pytest.mark.install
def test_tiny_train_vision_uses_the_installed_backgrounds_and_transfer_sets(installed):
    out = installed["cwd"] / "tv"
    p = _run([installed["graspsim"], "train-vision", "--out", out, "--steps", "1", "--batch-size", "2", "--n-val", "4",
              "--n-test", "4", "--val-every", "1", "--ckpt-every", "1", "--patch", "0", "--no-mirror-tta",
              "--no-progress", "--model.base-channels", "4", "--model.max-channels", "8", "--model.depth", "2",
              "--threads", "1"], cwd=installed["cwd"])
    assert (out / "checkpoint.pt").is_file()
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(metrics["train_backgrounds"]) == len(list((REPO / "data" / "backgrounds" / "train").iterdir()))
    assert metrics["transfer_val"]["num_images"] == 1024 and metrics["transfer_test"]["num_images"] == 1024
    assert str(installed["site"] / "graspsim_data" / "backgrounds" / "train") in p.stderr  # logged source folder


@pytest.mark.install
def test_eval_real_on_the_installed_sample_set(installed):
    py, cwd = installed["python"], installed["cwd"]
    sample = Path(_run([py, "-m", "vision.sample_set", "--where"], cwd=cwd).stdout.strip())
    assert sample == installed["site"] / "graspsim_data" / "sample_real"
    net = installed["site"] / "vision" / "assets" / "segnet.pt"  # the shipped net, installed as package data
    out = cwd / "eval"
    _run([installed["graspsim"], "eval-real", "--images", sample / "images", "--masks", sample / "masks", "--vision",
          net, "--out", out, "--precision", "fp32"], cwd=cwd)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["num_images"] == 16 and (out / "report.html").is_file()
