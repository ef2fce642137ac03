"""Deploy soak and fault test (issues 38 and 55): many deploy runs back to back, each ended by a fault injected at a
random tick (adapter faults, stop signals, a second signal while the robot is being stopped), the last one by a
SIGTERM. For every run: the first robot call after the fault is ``stop()``, ``summary.json``
is written, ``ticks.csv`` holds every tick whose command was sent (none lost, none twice), and at the end the
process's resident memory (RSS) has not grown.

``test_deploy_soak_slow`` (``-m slow``): the torch simulator as camera and robot with the shipped nets at ``--hz 0``,
at least 30,000 ticks (an hour at the usual 10 Hz). ``test_deploy_soak_short`` (default run): the same faults and
checks over about 2,000 ticks with light stand-ins (a synthetic camera, the dry-run robot, scripted nets), so it
takes seconds.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import deploy_fakes
from child_signals import stop_signals_at_default
from graspsim.robot.cameras import Frame
from graspsim.robot.controller import Controller, SafetyConfig
from graspsim.robot.deploy import DeployConfig, DeployError, deploy
from graspsim.robot.robots import DryRunRobot, Senses

ROOT = Path(__file__).resolve().parents[1]
VISION = ROOT / "vision" / "assets" / "segnet.pt"
POLICY = ROOT / "tests" / "assets" / "policy_format0.pt"

FAULTS = {
    # kind: (where it is injected, a piece of the error message)
    "camera_stall": ("camera", "did not return within 0.55 s"),
    "camera_raises": ("camera", "raised OSError: soak: camera unplugged"),
    "camera_none": ("camera", "(FaultyCamera.read) returned None"),
    "camera_nan_time": ("camera", "returned a frame time of nan"),
    "send_raises": ("send", "(FaultyRobot.send) raised ConnectionError: soak: arm went away"),
    "send_two_values": ("send", "(FaultyRobot.send) returned an array of shape (2,)"),
    "send_system_exit": ("send", "(FaultyRobot.send) raised SystemExit: 3"),
    "senses_nan": ("senses", "(FaultyRobot.senses) returned gripper senses"),
    "outcome_none": ("outcome", "(FaultyRobot.outcome) returned None"),
    "send_generator_exit": ("send", "(FaultyRobot.send) raised GeneratorExit"),
    "senses_millimetres": ("senses", "the gap 80 is outside"),
    "sigquit": ("send", ""),
    "sigusr1": ("send", ""),
    "sigxcpu": ("send", ""),  # (not SIGALRM: pytest-timeout has its own handler for it, which deploy leaves alone)
    "double": ("send", ""),  # SIGTERM, then SIGUSR2 while stop() runs
    "sigterm": ("send", ""),
}
SIGNAL_FAULTS = {"sigquit": "SIGQUIT", "sigusr1": "SIGUSR1", "sigxcpu": "SIGXCPU", "double": "SIGTERM",
                 "sigterm": "SIGTERM"}
"""The faults that are stop signals, and the signal that ends the run."""
FRAME_TIMEOUT = 0.05
"""--frame-timeout of the soak runs (s): a stalled camera is given up after 0.05 + 0.5 s."""


class Plan:
    """The fault of the current run: its kind, the number of sent commands after which it strikes, and the robot
    calls in order (``start``, ``senses``, ``send``, ``stop``, with ``fault`` where it struck)."""

    def __init__(self):
        self.arm("", 0)

    def arm(self, kind: str, at: int) -> None:
        self.kind, self.at, self.sends = kind, at, 0
        self.events: list[str] = []
        self.release = threading.Event()

    def due(self, where: str) -> bool:
        if self.kind and FAULTS[self.kind][0] == where and self.sends >= self.at and "fault" not in self.events:
            self.events.append("fault")
            return True
        return False


class FaultyCamera:
    """Wraps a camera; injects the plan's camera faults."""

    name = "soak-camera"

    def __init__(self, inner, plan: Plan):
        self.inner, self.plan = inner, plan

    def read(self, timeout):
        p = self.plan
        if p.due("camera"):
            if p.kind == "camera_stall":
                p.release.wait(60.0)  # released after the run; then it gives nothing (the world is no longer ours)
                return None
            if p.kind == "camera_raises":
                raise OSError("soak: camera unplugged")
            if p.kind == "camera_none":
                return None
            f = self.inner.read(timeout)
            return Frame(f.rgb, float("nan"), f.index)
        return self.inner.read(timeout)


class FaultyRobot:
    """Wraps a robot adapter; logs its calls into the plan and injects the plan's robot faults."""

    name = "soak-robot"

    def __init__(self, inner, plan: Plan):
        self.inner, self.plan = inner, plan

    def start_episode(self, seed):
        self.plan.events.append("start")
        self.inner.start_episode(seed)

    def senses(self):
        p = self.plan
        if p.due("senses"):
            gap = 80.0 if p.kind == "senses_millimetres" else np.nan
            return Senses(np.array([gap, 0.0, 0.0], np.float32))
        p.events.append("senses")
        return self.inner.senses()

    def send(self, command):
        p = self.plan
        if p.due("send"):
            if p.kind == "send_raises":
                raise ConnectionError("soak: arm went away")
            if p.kind == "send_two_values":
                return np.zeros(2, np.float32)
            if p.kind == "send_system_exit":
                raise SystemExit(3)
            if p.kind == "send_generator_exit":
                raise GeneratorExit
            # a stop signal: the handler raises in this thread, here or soon after
            os.kill(os.getpid(), getattr(signal, SIGNAL_FAULTS[p.kind]))
        sent = self.inner.send(command)
        p.events.append("send")
        p.sends += 1
        return sent

    def stop(self):
        p = self.plan
        if p.kind == "double" and "fault" in p.events and "stop" not in p.events[p.events.index("fault"):]:
            os.kill(os.getpid(), signal.SIGUSR2)  # a second signal while the robot is being stopped
            time.sleep(0.02)  # its handler runs here; the stop goes on
        p.events.append("stop")
        self.inner.stop()

    def outcome(self):
        if self.plan.due("outcome"):
            return None
        return self.inner.outcome()

    def workspace(self):
        return self.inner.workspace()


class ScriptedNets:
    """Stand-in nets for the short soak: a fixed target pixel, small random actions (seeded)."""

    runtime, image_size, max_speed, precision, mirror_tta = "scripted", 16, 0.1, "fp32", False

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def mask(self, rgb):
        m = np.zeros((1, 16, 16), bool)
        m[0, 8, 8] = True
        return m

    def action(self, mask, gripper):
        return self.rng.uniform(-1, 1, (1, 4)).astype(np.float32)


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _check_run(out: Path, plan: Plan, kind: str, raised: BaseException) -> int:
    """The checks of one run ended by ``kind``; returns its ticks."""
    ev = plan.events
    if "fault" not in ev:  # ended before the fault: say how (e.g. a real watchdog stall on a loaded machine)
        s = json.loads((out / "summary.json").read_text())
        raise AssertionError(f"{kind}: the run ended before its fault: {raised}; capture ms "
                             f"{s['latency_ms']['capture']}, load average {s['load_average']}, events {ev[-10:]}")
    after = ev[ev.index("fault") + 1:]
    if kind in SIGNAL_FAULTS:  # a signal inside send(): the command under way goes out (and gets its row), then
        assert after[:1] == ["send"], (kind, ev[-10:])  # the stop, before anything else
        after = after[1:]
    assert after and after[0] == "stop", (kind, ev[-10:])  # stop() before anything else
    assert "send" not in after  # and no command after the fault
    s = json.loads((out / "summary.json").read_text())
    if kind in SIGNAL_FAULTS:
        assert isinstance(raised, KeyboardInterrupt) and s["ended"] == "interrupted"
        assert s["signal"] == SIGNAL_FAULTS[kind], (kind, s["signal"])
        assert s["signals_while_stopping"] == (["SIGUSR2"] if kind == "double" else []), kind
    else:
        assert isinstance(raised, DeployError) and FAULTS[kind][1] in str(raised), (kind, str(raised))
        assert s["ended"] == "error" and FAULTS[kind][1] in s["error"]
    with open(out / "ticks.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == ev.count("send") == s["ticks"], (kind, len(rows), ev.count("send"), s["ticks"])
    by_episode: dict[str, list[int]] = {}
    for r in rows:
        by_episode.setdefault(r["episode"], []).append(int(r["tick"]))
    for ticks in by_episode.values():  # no tick lost or written twice
        assert ticks == list(range(len(ticks)))
    return len(rows)


def _soak(tmp_path: Path, make, min_ticks: int, run_ticks: tuple[int, int], seed: int) -> dict:
    """Deploy runs until ``min_ticks`` ticks were run, each ended by the next fault of a shuffled cycle at a random
    number of sent commands in ``run_ticks``, then one ended by SIGTERM. ``make(plan)`` -> (cfg kwargs, camera,
    robot, controller, cleanup)."""
    from graspsim import interrupts

    rng = np.random.default_rng(seed)
    kinds = [k for k in FAULTS if k != "sigterm"]
    plan = Plan()
    kw, camera, robot, controller, cleanup = make(plan)
    total, runs, seen, rss = 0, 0, set(), []
    with stop_signals_at_default():  # a run started in the background inherits SIGQUIT ignored
        interrupts.install()  # stop signals raise in the main thread, as under the graspsim command
        try:
            order: list[str] = []
            while total < min_ticks or not seen >= set(kinds):
                if not order:
                    order = list(rng.permutation(kinds))
                kind = str(order.pop())
                total += _one_run(tmp_path / f"run{runs}", plan, kind, int(rng.integers(*run_ticks)), kw, camera, robot,
                                  controller)
                seen.add(kind)
                runs += 1
                if runs == 1:
                    rss.append(_rss_mb())  # after the first run: the nets, the world and the caches are warm
            total += _one_run(tmp_path / "last", plan, "sigterm", int(rng.integers(*run_ticks)), kw, camera, robot,
                              controller)
            rss.append(_rss_mb())
        finally:
            interrupts.uninstall()
            cleanup()
    return {"ticks": total, "runs": runs + 1, "rss_mb": rss}


def _one_run(out: Path, plan: Plan, kind: str, at: int, kw: dict, camera, robot, controller) -> int:
    plan.arm(kind, at)
    cfg = DeployConfig(vision=VISION, policy=POLICY, out=out, hz=0.0, episodes=1000, frame_timeout=FRAME_TIMEOUT,
                       warmup=0, progress=False, **kw)
    try:
        deploy(cfg, camera=camera, robot=robot, controller=controller)
        raised: BaseException | None = None
    except (DeployError, KeyboardInterrupt) as e:
        raised = e
    finally:
        plan.release.set()  # a stalled read returns (None) and its worker thread ends
    assert raised is not None, f"{kind}: the run ended without the fault"
    ticks = _check_run(out, plan, kind, raised)
    for p in out.iterdir():  # keep the disk flat too
        p.unlink()
    return ticks


def _report(result: dict, record_property) -> None:
    start, end = result["rss_mb"]
    print(f"\ndeploy soak: {result['ticks']} ticks in {result['runs']} runs; RSS {start:.1f} MB after the first run, "
          f"{end:.1f} MB at the end")
    record_property("soak_ticks", result["ticks"])
    record_property("rss_mb_start_end", (round(start, 1), round(end, 1)))


def test_deploy_soak_short(tmp_path, record_property):
    def make(plan):
        controller = Controller(ScriptedNets(0), SafetyConfig())
        kw = dict(camera="deploy_fakes:RedDotCamera", robot="dry-run", time_limit=0.5)  # 0.5 s = 10 ticks at --hz 0
        return kw, FaultyCamera(deploy_fakes.RedDotCamera(), plan), FaultyRobot(DryRunRobot(), plan), controller, \
            (lambda: None)

    result = _soak(tmp_path, make, min_ticks=2000, run_ticks=(20, 400), seed=1)
    _report(result, record_property)
    assert result["ticks"] >= 2000
    start, end = result["rss_mb"]
    assert end - start < 32, result["rss_mb"]


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_deploy_soak_slow(tmp_path, record_property):
    from graspsim import SimConfig
    from graspsim.robot.cameras import SimCamera
    from graspsim.robot.robots import SimRobot, SimWorld

    def make(plan):
        sim = SimConfig()
        world = SimWorld("sim", sim)
        controller = Controller.from_checkpoints(VISION, POLICY, precision="auto", device="cpu")
        kw = dict(camera="sim", robot="sim", time_limit=12.0, sim=sim)
        return kw, FaultyCamera(SimCamera(world), plan), FaultyRobot(SimRobot(world), plan), controller, world.close

    result = _soak(tmp_path, make, min_ticks=30_000, run_ticks=(200, 4000), seed=2)
    _report(result, record_property)
    assert result["ticks"] >= 30_000
    start, end = result["rss_mb"]
    assert end - start < 64, result["rss_mb"]
