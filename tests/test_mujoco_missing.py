"""Without the ``mujoco`` extra, every verb that needs MuJoCo stops with one line naming the extra (no traceback)."""

from __future__ import annotations

import sys

import pytest

from cli_run import run_cli
from graspsim.extras import MissingExtra


@pytest.fixture
def no_mujoco(monkeypatch):
    monkeypatch.setitem(sys.modules, "mujoco", None)  # an import of mujoco now fails, as when it is not installed


def test_require_mujoco_names_the_extra(no_mujoco):
    from graspsim.mujoco.model import require_mujoco

    with pytest.raises(MissingExtra, match=r"pip install 'graspsim\[mujoco\]'") as e:
        require_mujoco()
    assert isinstance(e.value, ImportError)  # code that guards the import with ImportError still catches it


@pytest.mark.parametrize("argv", [
    ["render-transfer", "--renderer", "mujoco", "--split", "val", "--n", "4", "--out", "{tmp}/rt"],
    ["eval-sim", "--backend", "mujoco", "--policy", "tests/assets/policy_format0.pt", "--out", "{tmp}/ev",
     "--no-progress"],
])
def test_verbs_without_mujoco_give_one_line(no_mujoco, tmp_path, capsys, argv):
    code, line = run_cli([a.replace("{tmp}", str(tmp_path)) for a in argv], capsys)
    assert code == 2
    assert "pip install 'graspsim[mujoco]'" in line
