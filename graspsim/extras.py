"""Optional parts of graspsim (the ``[project.optional-dependencies]`` extras of pyproject.toml).

A verb that needs an extra calls :func:`require` while its flags are parsed (in its config's ``__post_init__``), so a
missing module is one line naming the extra and the pip command (exit 2 from the ``graspsim`` command), not a
traceback from deep inside the run:

>>> require("onnx", "deploy", "export")
"""

from __future__ import annotations

import importlib.util
import sys


class MissingExtra(ValueError):
    """An optional module is not installed; the message names the extra and how to install it."""


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, judged without importing it (a module set to None in ``sys.modules``, as
    Python does for a blocked import, counts as missing)."""
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, extra: str, verb: str) -> None:
    """Raise :class:`MissingExtra` unless ``module`` (from the extra ``extra``) is installed; ``verb`` says what
    needs it, e.g. ``"export"`` or ``"deploy --inference onnx"``."""
    if not installed(module):
        raise MissingExtra(f"{verb} needs the optional '{extra}' extra ({module} is not installed): "
                           f"pip install 'graspsim[{extra}]'")


__all__ = ["MissingExtra", "installed", "require"]
