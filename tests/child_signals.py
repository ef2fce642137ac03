"""``preexec_fn`` for the tests that signal a ``graspsim`` subprocess: the child starts with every stop signal at its
default action. A test run started in the background or under ``nohup`` (as CI may be) passes SIGINT or SIGHUP on as
ignored, and graspsim rightly leaves an ignored signal alone, so without this those tests would wait in vain."""

from __future__ import annotations

import signal

from graspsim.interrupts import stop_signals

_SIGNALS = stop_signals()


def default_stop_signals() -> None:
    """In the child, before it runs Python: each stop signal back to its default action."""
    for sig in _SIGNALS:
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
