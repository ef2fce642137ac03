"""The public API: every name a package re-exports imports, is the object its submodule defines, and shadows no
submodule; importing a package stays cheap (no torch until a name is touched)."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

PACKAGES = ["graspsim", "graspsim.vision", "graspsim.expert", "graspsim.dagger", "graspsim.robot"]


def _public(package: str) -> list[tuple[str, str]]:
    return [(package, name) for name in importlib.import_module(package).__all__]


@pytest.mark.parametrize("package,name", [pn for p in PACKAGES for pn in _public(p)])
def test_every_public_name_imports_from_its_package(package, name):
    pkg = importlib.import_module(package)
    value = getattr(pkg, name)
    home = getattr(pkg, "_LAZY", {}).get(name)
    if home is not None:
        assert value is getattr(importlib.import_module(f"{package}.{home}"), name)
    assert name in dir(pkg)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_public_name_is_also_a_submodule(package):
    pkg = importlib.import_module(package)
    submodules = {m.name for m in pkgutil.iter_modules(pkg.__path__)}
    shadowing = (set(pkg.__all__) & submodules) - {"render"}  # graspsim.render: the function, kept by graspsim._Package
    assert not shadowing, f"{package} exports names of its own submodules: {sorted(shadowing)}"


def test_an_unknown_name_is_an_attribute_error():
    import graspsim.dagger

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        graspsim.dagger.Nope  # noqa: B018


def test_importing_the_packages_and_the_command_imports_no_torch():
    code = ("import sys; import " + ", ".join(PACKAGES + ["graspsim.cli"])
            + "; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr


def test_docs_architecture_lists_exactly_the_public_names():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    section = text.split("## Public API", 1)[1].split("\n## ", 1)[0]
    listed = {m.group(1): set(re.findall(r"`(\w+)`", m.group(2)))
              for m in re.finditer(r"^\| `(graspsim[\w.]*)` \| (.+) \|$", section, re.M)}
    assert set(listed) == set(PACKAGES)
    for package in PACKAGES:
        assert listed[package] == set(importlib.import_module(package).__all__), package
