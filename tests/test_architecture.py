"""The floors of docs/architecture.md hold: no module imports a package above its own (the simulator never imports
learning code, DAgger never imports the robot stack, the library never imports the command layer).

Every import statement of every module is read with ``ast`` (also those inside functions, which run later but are
imports all the same); relative imports are resolved against the module's package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FOLDERS = {"graspsim": "graspsim", "expert": "graspsim.expert", "vision": "graspsim.vision",
           "dagger": "graspsim.dagger", "robot": "graspsim.robot", "scripts": "graspsim.cli"}
"""Folder -> the import path it installs as (pyproject.toml's package-dir; docs/architecture.md)."""

UPPER = ("graspsim.expert", "graspsim.vision", "graspsim.dagger", "graspsim.robot", "graspsim.cli")
ALLOWED = {
    "graspsim": (),
    "graspsim.expert": (),
    "graspsim.vision": (),
    "graspsim.dagger": ("graspsim.expert", "graspsim.vision"),
    "graspsim.robot": ("graspsim.vision", "graspsim.dagger"),  # as DESIGN.md: the expert only through dagger
    "graspsim.cli": UPPER,
}
"""Package -> the packages above the simulator floor it may import (itself always)."""


def _module_name(path: Path, root: Path, folder: str) -> str:
    rel = path.relative_to(root / folder).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join([FOLDERS[folder], *parts])


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found += [(node.lineno, target)]
            if node.module is None or node.level:  # from . import x: x may be a subpackage
                found += [(node.lineno, f"{target}.{a.name}") for a in node.names]
    return found


def _owner(name: str) -> str | None:
    """The package of ours an imported name belongs to (None for other projects)."""
    for pkg in UPPER:
        if name == pkg or name.startswith(pkg + "."):
            return pkg
    return "graspsim" if name == "graspsim" or name.startswith("graspsim.") else None


def upward_imports(root: Path = ROOT) -> list[str]:
    """``path:line (package) imports name`` for every import of a package above the importing module's floor."""
    bad = []
    for folder, package in FOLDERS.items():
        for path in sorted((root / folder).rglob("*.py")):
            module = _module_name(path, root, folder)
            for line, name in _imports(path, module):
                owner = _owner(name)
                if owner in (None, "graspsim", package) or owner in ALLOWED[package]:
                    continue
                bad.append(f"{path.relative_to(root)}:{line} ({package}) imports {name}")
    return bad


def test_no_module_imports_a_floor_above_its_own():
    bad = upward_imports()
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_the_check_sees_an_upward_import(tmp_path):
    """The scan catches the simulator importing learning code, spelled absolute or relative, at the top or inside a
    function, and DAgger importing the robot stack; an allowed import passes."""
    (tmp_path / "graspsim" / "bullet").mkdir(parents=True)
    (tmp_path / "graspsim" / "bullet" / "probe.py").write_text(
        "from graspsim.dagger import policy\n\n\ndef f():\n    from .. import robot\n")
    (tmp_path / "dagger").mkdir()
    (tmp_path / "dagger" / "probe.py").write_text("import graspsim.robot.deploy\nfrom graspsim.vision import infer\n")
    bad = upward_imports(tmp_path)
    imported = sorted(b.split(" imports ")[1] for b in bad)
    assert imported == ["graspsim.dagger", "graspsim.robot", "graspsim.robot.deploy"]


@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_every_folder_maps_as_pyproject_says(folder):
    text = (ROOT / "pyproject.toml").read_text()
    if folder != "graspsim":
        assert f'"{FOLDERS[folder]}" = "{folder}"' in text
