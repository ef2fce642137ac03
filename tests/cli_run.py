"""Run the ``graspsim`` command in the test process, the way the fault suites check a verb's one error line."""

from __future__ import annotations

from graspsim.cli import main


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    """``graspsim <argv>`` in this process; returns the exit code and the one error line (asserting it is one)."""
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert code == 0 or len(lines) == 1, err
    return code, (lines[0] if lines else "")
