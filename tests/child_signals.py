"""Stop signals at their default action for the tests that send them: ``preexec_fn`` for a ``graspsim`` subprocess,
and a context for a test that signals its own process. A test run started in the background of a shell without job
control or under ``nohup`` (as CI may be) inherits SIGINT and SIGQUIT, or SIGHUP, as ignored, and graspsim rightly
leaves an ignored signal alone, so without this those tests would wait in vain or see no fault."""

from __future__ import annotations

import contextlib
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


@contextlib.contextmanager
def stop_signals_at_default():
    """In this process: each ignored stop signal at its default action for the block (then ignored again), so that
    :func:`graspsim.interrupts.install` takes it as it would under a terminal."""
    ignored = [sig for sig in _SIGNALS if signal.getsignal(sig) is signal.SIG_IGN]
    for sig in ignored:
        signal.signal(sig, signal.SIG_DFL)
    try:
        yield
    finally:
        for sig in ignored:
            signal.signal(sig, signal.SIG_IGN)
