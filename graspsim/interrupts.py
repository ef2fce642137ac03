"""Stop signals: every catchable signal whose default action ends the process becomes a Ctrl-C that cannot be lost.

The ``graspsim`` command calls :func:`install` once (process-wide state, so the app layer does it; importing this
module changes nothing). From then on each signal of :func:`stop_signals` (SIGINT, SIGTERM, SIGHUP, SIGQUIT,
SIGUSR1, SIGUSR2, SIGALRM, ... and the real-time signals) runs :func:`_on_signal`, which

1. records the signal (:func:`requested`): a flag that loops check once per step or tick (:func:`check`), so a
   stop is never lost even when its exception is;
2. raises :class:`Stopped` (a ``KeyboardInterrupt``) where the main thread is, as Ctrl-C would, unless the main
   thread is inside a :func:`shielded` block (stopping a robot, writing a summary): then the signal is held and a
   warning says so, and the block runs to its end. A block shielded with ``firm=False`` (a call into someone's
   driver that could hang, such as sending a command) holds only the first signal: a second one interrupts it.

Python discards an exception raised inside a weakref callback or a ``__del__`` ("Exception ignored in ...");
the hook that reports those (:data:`sys.unraisablehook`) is wrapped so that a discarded :class:`Stopped` is
delivered again to the main thread (:func:`_thread.interrupt_main`), where the verb's normal code runs.

A handler someone set before (``nohup`` ignores SIGHUP; a test harness may ignore SIGINT) is left alone: only
signals still at their default action are taken.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from typing import Iterator

log = logging.getLogger(__name__)

STOP_SIGNAL_NAMES = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM",
                     "SIGPROF", "SIGXCPU", "SIGXFSZ", "SIGIO", "SIGPOLL", "SIGPWR", "SIGSTKFLT")
"""Signals whose default action ends (or dumps) the process and that say nothing about a fault of the process
itself; with the real-time signals (SIGRTMIN..SIGRTMAX) they are :func:`stop_signals`. Not taken: SIGKILL and
SIGSTOP (cannot be caught), SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGSYS, SIGTRAP (the process itself is broken;
Python's faulthandler reports those), and SIGPIPE (Python ignores it: a closed pipe is a BrokenPipeError)."""


def stop_signals() -> list[signal.Signals]:
    """The signals :func:`install` takes on this platform (:data:`STOP_SIGNAL_NAMES` and the real-time ones)."""
    found = {getattr(signal, n) for n in STOP_SIGNAL_NAMES if hasattr(signal, n)}
    if hasattr(signal, "SIGRTMIN") and hasattr(signal, "SIGRTMAX"):
        found |= set(range(int(signal.SIGRTMIN), int(signal.SIGRTMAX) + 1))
    valid = signal.valid_signals() if hasattr(signal, "valid_signals") else found
    return sorted((s for s in found if s in valid), key=int)


def signal_name(signum: int) -> str:
    """``SIGTERM``, or ``SIGRTMIN+3`` for a real-time signal, or ``signal 40``."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        if hasattr(signal, "SIGRTMIN") and int(signal.SIGRTMIN) <= signum <= int(signal.SIGRTMAX):
            return f"SIGRTMIN+{signum - int(signal.SIGRTMIN)}"
        return f"signal {signum}"


class Stopped(KeyboardInterrupt):
    """A stop signal, raised where the main thread is, as Ctrl-C would be (``signum``: which signal)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = int(signum)

    def __str__(self) -> str:
        return signal_name(self.signum)


class _State:
    def __init__(self):
        self.installed = False
        self.pending: int | None = None
        """The first stop signal not yet taken by a verb (:func:`taken`)."""
        self.shield = 0
        self.firm = 0
        """Of the :attr:`shield` blocks, those that hold every signal (the others hold only the first)."""
        self.shield_what = ""
        self.held: list[int] = []
        """Signals that arrived inside a shielded block."""
        self.previous: dict[int, object] = {}
        self.previous_hook = None
        self.lost: int | None = None
        """A stop signal whose exception Python discarded, waiting to be delivered again."""


_STATE = _State()


def installed() -> bool:
    """Whether :func:`install` routes the stop signals here (else a KeyboardInterrupt is Python's own Ctrl-C or
    someone's exception)."""
    return _STATE.installed


def requested() -> int | None:
    """The stop signal that arrived and was not yet taken (:func:`taken`), else None."""
    return _STATE.pending


def check() -> None:
    """Raise :class:`Stopped` when a stop signal arrived and no verb has taken it yet (its exception was lost, e.g.
    raised inside a weakref callback). Loops call it once per step or tick; outside a shielded block."""
    if _STATE.pending is not None and _STATE.shield == 0:
        raise Stopped(_STATE.pending)


def taken() -> int | None:
    """A verb took the interruption (it is on its Ctrl-C path now): clear the flag; returns the signal (None when
    there was none, e.g. a KeyboardInterrupt raised by a library)."""
    signum, _STATE.pending, _STATE.lost = _STATE.pending, None, None
    return signum


def drain_held() -> list[int]:
    """The signals that arrived inside shielded blocks since the last call (for a run's report), oldest first."""
    out, _STATE.held = _STATE.held, []
    return out


@contextlib.contextmanager
def shielded(what: str, firm: bool = True) -> Iterator[None]:
    """Run the block to its end even when stop signals arrive meanwhile (``what``: e.g. "stopping the robot", named
    in the warning about each held signal). A signal held here stays :func:`requested`, so the next
    :func:`check` raises it. Only the main thread's handlers are held (they run there); nesting is allowed.

    ``firm=False`` holds only the first signal: a second one raises :class:`Stopped` inside the block (unless a firm
    block encloses it), so a call that hangs there can still be interrupted with a second Ctrl-C."""
    main = threading.current_thread() is threading.main_thread()
    if main:
        _STATE.shield += 1
        _STATE.firm += int(firm)
        if _STATE.shield == 1:
            _STATE.shield_what = what
    try:
        yield
    finally:
        if main:
            _STATE.shield -= 1
            _STATE.firm -= int(firm)


def _on_signal(signum: int, frame) -> None:
    first = _STATE.pending is None
    if first:
        _STATE.pending = signum
    if _STATE.shield > 0:
        if first:  # it takes effect once the block is done (the next check())
            log.info("%s arrived while %s; it takes effect once that is done", signal_name(signum),
                     _STATE.shield_what)
            return
        if _STATE.firm == 0:  # only blocks that hold the first signal: this one interrupts them
            log.warning("%s arrived while %s, after %s: interrupting it", signal_name(signum), _STATE.shield_what,
                        signal_name(_STATE.pending))
            raise Stopped(_STATE.pending)
        _STATE.held.append(signum)
        log.warning("%s arrived while %s; finishing that first (a further signal is held too; SIGKILL would leave "
                    "it unfinished)", signal_name(signum), _STATE.shield_what)
        return
    raise Stopped(signum if first else _STATE.pending)


def _unraisable(info) -> None:
    """Wraps :data:`sys.unraisablehook`: a :class:`Stopped` that Python had to discard (raised in a finalizer or a
    weakref callback) is delivered to the main thread again, from a helper thread a moment later (the handler must
    not run inside this hook, where it would be discarded too); anything else goes to the previous hook."""
    try:
        if isinstance(info.exc_value, Stopped):
            _redeliver(info.exc_value.signum)
            return
        (_STATE.previous_hook or sys.__unraisablehook__)(info)
    except Stopped as e:  # a redelivered signal that landed inside this hook: try again
        _redeliver(e.signum)


def _redeliver(signum: int) -> None:
    """Raise ``signum``'s :class:`Stopped` in the main thread again after :data:`REDELIVER_AFTER` s, unless a verb
    took the interruption meanwhile."""
    _STATE.lost = signum

    def again() -> None:
        import _thread
        import time

        time.sleep(REDELIVER_AFTER)
        if _STATE.lost is not None and _STATE.pending is not None:
            lost, _STATE.lost = _STATE.lost, None
            _thread.interrupt_main(lost)

    threading.Thread(target=again, name="graspsim-redeliver", daemon=True).start()


REDELIVER_AFTER = 0.02
"""Seconds after which a discarded stop signal is delivered again (the discarding callback has returned by then)."""


def install() -> bool:
    """Take the stop signals (see the module docstring); only from the main thread (where Python runs handlers).
    Returns whether it did; undo with :func:`uninstall`. Calling it twice is harmless."""
    if threading.current_thread() is not threading.main_thread() or _STATE.installed:
        return False
    previous = {}
    for sig in stop_signals():
        try:
            current = signal.getsignal(sig)
        except (OSError, ValueError):
            continue
        if current not in (signal.SIG_DFL, signal.default_int_handler):
            continue  # ignored (nohup) or someone's own handler: theirs
        try:
            previous[sig] = signal.signal(sig, _on_signal)
        except (OSError, ValueError, RuntimeError):
            continue
    _STATE.previous = previous
    _STATE.previous_hook = sys.unraisablehook
    sys.unraisablehook = _unraisable
    _STATE.installed = True
    _STATE.pending, _STATE.held, _STATE.shield = None, [], 0
    return True


def uninstall() -> None:
    """Put back the handlers and the hook :func:`install` replaced."""
    if not _STATE.installed:
        return
    for sig, handler in _STATE.previous.items():
        with contextlib.suppress(OSError, ValueError, TypeError):
            signal.signal(sig, handler)
    if sys.unraisablehook is _unraisable:
        sys.unraisablehook = _STATE.previous_hook or sys.__unraisablehook__
    _STATE.previous, _STATE.previous_hook, _STATE.installed = {}, None, False
    _STATE.pending, _STATE.held, _STATE.shield = None, [], 0


__all__ = ["STOP_SIGNAL_NAMES", "Stopped", "check", "drain_held", "install", "installed", "requested", "shielded",
           "signal_name", "stop_signals", "taken", "uninstall"]
