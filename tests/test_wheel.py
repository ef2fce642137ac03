"""A non-editable install works: build a wheel, install it into a fresh virtual environment and run the command
from a folder outside the checkout (``-m install``, ~1 min; CI runs it after the default suite).

The fresh environment reuses this environment's third-party packages through a path line in a ``.pth`` file (so
torch is not installed again); the wheel itself goes in with ``--no-deps``. A plain path line does not process the
``.pth`` files of that folder, so this checkout's editable install stays invisible there, which the first test
checks. One fast test (not marked) keeps the package list of pyproject.toml in step with the code folders.

One import root: the wheel puts ``graspsim`` alone at the top level of site-packages (the card's folders vision/,
expert/, dagger/, scripts/ and data/ become ``graspsim.vision``, ``graspsim.expert``, ``graspsim.dagger``,
``graspsim.cli`` and ``graspsim.data``), so it installs beside a distribution that owns a top-level ``dagger`` (or
``vision``, ``scripts``) without either overwriting the other.
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
PACKAGE_OF_FOLDER = {"graspsim": "graspsim", "vision": "graspsim.vision", "expert": "graspsim.expert",
                     "dagger": "graspsim.dagger", "robot": "graspsim.robot", "scripts": "graspsim.cli", "data": "graspsim.data"}
"""The repository's code folders and the package each installs as (pyproject.toml's package-dir)."""
# what the checkout holds but a wheel is not built from
_NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "runs", "build", "dist", "*.egg-info", "__pycache__",
                                     ".pytest_cache", "tests", "benchmarks", "docs")


def _packages_on_disk() -> dict[str, Path]:
    """Installed package name -> its folder in the checkout, for every folder with an ``__init__.py``."""
    found = {}
    for folder, package in PACKAGE_OF_FOLDER.items():
        for p in (REPO / folder).rglob("__init__.py"):
            if "__pycache__" not in p.parts:
                found[".".join([package, *p.parent.relative_to(REPO / folder).parts])] = p.parent
    return found


def test_pyproject_lists_every_code_package_under_one_root():
    tomllib = pytest.importorskip("tomllib")
    setup = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setup["packages"])
    missing = set(_packages_on_disk()) - listed
    assert not missing, f"pyproject.toml [tool.setuptools] packages lacks {sorted(missing)}: a wheel would leave them out"
    assert {p.split(".")[0] for p in listed} == {"graspsim"}, f"more than one import root: {sorted(listed)}"
    for folder, package in PACKAGE_OF_FOLDER.items():
        if folder != package:
            assert setup["package-dir"][package] == folder
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"graspsim": "graspsim.cli:main"}


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
    for pkg, folder in _packages_on_disk().items():
        for f in folder.glob("*.py"):
            assert f"{pkg.replace('.', '/')}/{f.name}" in names, f"{f.relative_to(REPO)} is not in the wheel"
    for path in ("graspsim/data/backgrounds/SOURCES.md", "graspsim/data/transfer/val/meta.csv",
                 "graspsim/data/transfer/test/masks/frame_01023.png", "graspsim/data/sample_real/images/frame_000.png",
                 "graspsim/assets/textures/wood.png", "graspsim/vision/assets/segnet.pt",
                 "graspsim/vision/assets/segnet_so101.pt", "graspsim/dagger/assets/policy_so101.pt"):
        assert path in names, f"{path} is not in the wheel"
    kept = [n for n in names if n.startswith("graspsim/vision/assets/candidates/")]
    assert not kept, f"nets kept for a later rule are not package data: {kept}"
    for split in ("train", "val", "test"):
        on_disk = sorted(p.name for p in (REPO / "data" / "backgrounds" / split).iterdir())
        assert sorted(n.rsplit("/", 1)[1] for n in names if n.startswith(f"graspsim/data/backgrounds/{split}/")) == on_disk
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"graspsim"}, f"the wheel puts more than graspsim at the top level: {sorted(top)}"
    assert not [n for n in names if "__pycache__" in n]


@pytest.mark.install
def test_the_fresh_venv_imports_the_installed_package(installed):
    code = ("import graspsim, graspsim.vision, graspsim.cli, graspsim.data, graspsim.vision.backgrounds as b\n"
            "for m in (graspsim, graspsim.vision, graspsim.cli, graspsim.data): print(m.__file__)\n"
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
              "--no-progress", "--model.crop", "0", "--model.no-context", "--model.base-channels", "4",
              "--model.max-channels", "8", "--model.depth", "2",
              "--threads", "1"], cwd=installed["cwd"])
    assert (out / "checkpoint.pt").is_file()
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(metrics["train_backgrounds"]) == len(list((REPO / "data" / "backgrounds" / "train").iterdir()))
    assert metrics["transfer_val"]["num_images"] == 1024 and metrics["transfer_test"]["num_images"] == 1024
    assert str(installed["site"] / "graspsim" / "data" / "backgrounds" / "train") in p.stderr  # logged source folder


@pytest.mark.install
def test_eval_real_on_the_installed_sample_set(installed):
    cwd = installed["cwd"]
    sample = Path(_run([installed["graspsim"], "sample-set", "--where"], cwd=cwd).stdout.strip())
    assert sample == installed["site"] / "graspsim" / "data" / "sample_real"
    net = installed["site"] / "graspsim" / "vision" / "assets" / "segnet.pt"  # the shipped net, installed as package data
    out = cwd / "eval"
    _run([installed["graspsim"], "eval-real", "--images", sample / "images", "--masks", sample / "masks", "--vision",
          net, "--out", out, "--precision", "fp32"], cwd=cwd)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["num_images"] == 16 and (out / "report.html").is_file()


@pytest.mark.install
def test_every_verb_runs_from_the_wheel(installed):
    """Every verb of the installed command answers --help (its module and its config import from the wheel), and
    ``python -m graspsim.cli`` is the same command."""
    from graspsim.cli.cli import VERBS

    for verb in VERBS:
        p = _run([installed["graspsim"], verb, "--help"], cwd=installed["cwd"])
        assert "usage" in p.stdout.lower(), verb
    p = _run([installed["python"], "-m", "graspsim.cli", "--help"], cwd=installed["cwd"])
    assert all(verb in p.stdout for verb in VERBS)


@pytest.mark.install
def test_beside_a_distribution_that_owns_a_top_level_dagger(installed, tmp_path):
    """A package that owns the top-level names ``dagger``, ``vision`` and ``scripts`` installs beside the wheel; each
    keeps its own files, and graspsim's verbs still run."""
    other = tmp_path / "other"
    for name in ("dagger", "vision", "scripts"):
        (other / name).mkdir(parents=True)
        (other / name / "__init__.py").write_text(f"WHO = 'other-{name}'\n")
    (other / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = '
                                          '"setuptools.build_meta"\n[project]\nname = "other-dagger"\nversion = "1.0"\n'
                                          '[tool.setuptools]\npackages = ["dagger", "vision", "scripts"]\n')
    isolation = ["--no-build-isolation"] if _setuptools_builds_it() else []
    _run([sys.executable, "-m", "pip", "--python", installed["python"], "install", "--no-deps", "--no-index", *isolation,
          other], cwd=tmp_path)
    code = ("import dagger, vision, scripts, graspsim.robot.controller, graspsim.vision.infer\n"
            "print(dagger.WHO, vision.WHO, scripts.WHO)")
    assert _run([installed["python"], "-c", code], cwd=installed["cwd"]).stdout.split() == [
        "other-dagger", "other-vision", "other-scripts"]
    _run([installed["graspsim"], "eval-sim", "--help"], cwd=installed["cwd"])
