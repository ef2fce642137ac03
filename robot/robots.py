"""Robot adapters of the robot loop (``graspsim deploy``): one small interface between the loop and an arm.

An adapter is any object with these methods (subclass :class:`Robot`, ``from graspsim.robot.robots import Robot``,
or write the methods yourself):

============================== =====================================================================================
``start_episode(seed)``         get ready for an episode (home pose, gripper open); ``seed`` names the scene where
                                the robot can build one (a simulated robot does; a real arm ignores it)
``senses() -> Senses``          gripper senses (3 floats: finger gap / open gap, last close command 0/1, table
                                contact 0/1) and, if known, the fingertip position (3 floats, m, in the frame of
                                ``workspace()``)
``send(command) -> sent``       execute ``command`` (4 floats: vx, vy, vz m/s in the gripper-aligned base frame,
                                grip > 0 closes) for one control period; return what was actually sent after the
                                adapter's own clipping
``stop()``                      command zero velocity now (keep the gripper as it is); must not raise if it can help it
``outcome() -> Outcome``        whether the episode is over and, where the adapter can tell, whether it succeeded
``workspace()``                 ``(low, high)`` 3-vectors of the allowed fingertip box, or None
``fingertip()`` (optional)      for a wrist net with fingertip senses: ``(x0, y0, x1, y1)``, where the fingertip
                                centre and a point 2 cm above it appear in the camera frame (fractions of its width
                                and height), read at each episode start when ``--fingertip`` is not given; the
                                simulated robots report their scene's exact values
``close()``                     release the hardware
============================== =====================================================================================

**The wrist.** A control net trained on cubes or cylinders turns the wrist. Its adapter says so with the class
attribute ``wrist = True``; then ``senses()`` returns 5 gripper senses (the 3 above, then the sine and cosine of the
wrist's yaw angle from its start, the joint encoder) and ``send`` receives 5 floats, ``(vx, vy, vz, wz, grip)`` with
``wz`` the wrist yaw rate in rad/s (positive turns counter-clockwise seen from above), when the net turns the wrist
(4 floats when a sphere-only net drives it). ``deploy`` refuses a wrist-turning net with an adapter whose ``wrist`` is
not True, naming the adapter.

Shipped adapters: ``bullet`` (a Franka Panda in pybullet: IK, real contacts; :class:`SimRobot`), ``sim`` (the
batched torch simulator with one scene), ``dry-run`` (moves nothing, logs every command, idealised gripper
senses), ``so101`` (a real SO-101 through LeRobot's driver, :mod:`graspsim.robot.so101`). ``module:Class`` loads a
user's adapter, constructed as ``Class()``. docs/deploy.md shows how to write one.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from graspsim.config import gripper_width
from graspsim.keys import GRIPPER, MASK, RGB

from .cameras import construct
from .interfaces import ROBOT_METHODS, Outcome, Robot, Senses  # noqa: F401 (re-exported)

log = logging.getLogger(__name__)

SIM_ROBOTS = ("sim", "bullet", "mujoco")
class SimWorld:
    """One simulated scene shared by the ``sim``/``bullet``/``mujoco`` camera and robot: the robot steps it, the camera
    renders it."""

    def __init__(self, backend: str, cfg):
        from graspsim import make_env

        self.backend, self.cfg = backend, cfg
        # every episode's scene comes from its seed (reset), so the env's own generator is never drawn from
        self.env = make_env({"sim": "torch"}.get(backend, backend), cfg, 1, "cpu")
        self.senses_dim = gripper_width(cfg.wrist, False)
        """The robot's own senses (3, or 5 with the wrist); the fingertip points are :attr:`fingertip`."""
        self.gripper = np.zeros(self.senses_dim, np.float32)
        self.fingertip: list[float] | None = None
        """This episode's exact fingertip points (fractions of the image), as a calibrated arm would give them."""
        self.done, self.success, self.reason = False, False, ""

    def _take(self, obs: dict) -> None:
        self.gripper = obs[GRIPPER][0, :self.senses_dim].numpy().astype(np.float32)

    def reset(self, seed: int) -> None:
        with self.env.rendering(False):
            self._take(self.env.reset([0], [int(seed)]))
        self.fingertip = self.scene_fingertip()
        self.done, self.success, self.reason = False, False, ""

    def scene_fingertip(self) -> list[float]:
        """The current scene's fingertip points (4 fractions of the image): measured in the backend's own camera where
        it measures them (MuJoCo: :meth:`graspsim.mujoco.MujocoGraspEnv.measured_fingertip`, the values its policy
        observations carry), else the simulator's camera model (:func:`graspsim.env.fingertip_fractions`)."""
        measured = getattr(self.env, "measured_fingertip", None)
        if measured is not None:
            return measured()[0].tolist()
        from graspsim.env import fingertip_fractions

        return fingertip_fractions(self.env.state, self.cfg.image_size)[0].tolist()

    def step(self, action: np.ndarray) -> None:
        from graspsim import FAILURE_NAMES

        with self.env.rendering(False):
            obs, _, done, info = self.env.step(torch.from_numpy(np.asarray(action, np.float32)[None]))
        self._take(obs)
        self.done, self.success = bool(done[0]), bool(info["success"][0])
        self.reason = FAILURE_NAMES[int(info["failure"][0])] if self.done else ""

    def render(self) -> tuple[np.ndarray, np.ndarray]:
        """(rgb H,W,3 uint8, exact target mask H,W bool) of the current state."""
        obs = self.env.observe()
        return obs[RGB][0].permute(1, 2, 0).numpy().copy(), obs[MASK][0].numpy().copy()

    def tcp(self) -> np.ndarray:
        return self.env.privileged()["tcp_pos"][0].numpy().astype(np.float64)

    def close(self) -> None:
        if hasattr(self.env, "close"):
            self.env.close()


class SimRobot(Robot):
    """The arm of a :class:`SimWorld`: ``bullet`` (Franka Panda in pybullet) or ``sim`` (torch simulator). Each
    ``send`` advances the world by one control period; the world's own episode end (success latched, failure, or
    ``max_steps``) is the outcome. ``stop`` sends nothing: a simulated arm does not move between steps."""

    def __init__(self, world: SimWorld):
        self.world = world
        self.name = world.backend
        self.wrist = bool(world.cfg.wrist)  # the world's target kinds decide (cubes and cylinders turn it)
        self.max_speed = float(world.cfg.max_speed)
        self.max_yaw_rate = float(world.cfg.max_yaw_rate)
        self.stops = 0

    def start_episode(self, seed: int) -> None:
        self.world.reset(seed)

    def senses(self) -> Senses:
        return Senses(self.world.gripper.copy(), self.world.tcp())

    def fingertip(self) -> list[float] | None:
        """The scene's exact fingertip points (its randomised camera mount), as a calibrated arm would report them."""
        return self.world.fingertip

    def send(self, command: np.ndarray) -> np.ndarray:
        sent = np.asarray(command, np.float32).copy()
        sent[:3] = np.clip(sent[:3], -self.max_speed, self.max_speed)
        if len(sent) == 5:
            sent[3] = np.clip(sent[3], -self.max_yaw_rate, self.max_yaw_rate)
        self.world.step(sent)
        return sent

    def stop(self) -> None:
        self.stops += 1

    def outcome(self) -> Outcome:
        w = self.world
        return Outcome(w.done, w.success, w.reason)  # a simulated world can always tell: False until it succeeds

    def workspace(self) -> tuple[np.ndarray, np.ndarray]:
        c = self.world.cfg
        return np.array([-c.workspace, -c.workspace, 0.0]), np.array([c.workspace, c.workspace, c.max_height])

    def close(self) -> None:
        self.world.close()


class DryRunRobot(Robot):
    """Moves nothing: logs every command (``log``: list of (kind, floats)) and reports an ideal gripper that
    follows the close command at once (gap 0 when closed, 1 when open; no table contact). With ``wrist`` it also
    reports an ideal wrist angle, the integral of the commanded yaw rates over ``period`` s a command."""

    name = "dry-run"

    def __init__(self, wrist: bool = False, period: float = 0.1):
        self.wrist, self.period = bool(wrist), float(period)
        self.closed = False
        self.yaw = 0.0
        self.log: list[tuple[str, list[float]]] = []

    def start_episode(self, seed: int) -> None:
        self.closed = False
        self.yaw = 0.0

    def senses(self) -> Senses:
        turn = [np.sin(self.yaw), np.cos(self.yaw)] if self.wrist else []
        return Senses(np.array([0.0 if self.closed else 1.0, float(self.closed), 0.0, *turn], np.float32))

    def send(self, command: np.ndarray) -> np.ndarray:
        sent = np.asarray(command, np.float32).copy()
        self.closed = bool(sent[-1] > 0)
        if len(sent) == 5:
            self.yaw += float(sent[3]) * self.period
        self.log.append(("send", sent.tolist()))
        log.debug("dry-run send %s", sent.tolist())
        return sent

    def stop(self) -> None:
        self.log.append(("stop", [0.0, 0.0, 0.0, 1.0 if self.closed else -1.0]))


def open_robot(name: str, world: SimWorld | None = None, wrist: bool = False, period: float = 0.1, so101=None,
               sim=None):
    """The adapter ``name`` (``bullet``, ``sim``, ``dry-run``, ``so101`` or ``module:Class``); ``world`` is required
    for the simulated robots; ``wrist`` and ``period`` (s) configure ``dry-run``; ``so101`` (a
    :class:`graspsim.robot.so101.So101Config`), ``period`` and ``sim`` (the SimConfig whose speed limits the nets were
    trained with) configure ``so101``. ValueError naming ``name`` when it is unknown or its class lacks a method."""
    name = str(name).strip()
    if name == "so101":
        from .so101 import So101Config, So101Robot

        kw = {} if sim is None else {"max_speed": float(sim.max_speed), "max_yaw_rate": float(sim.max_yaw_rate),
                                     "max_wrist_yaw": float(sim.max_wrist_yaw), "finger_speed": float(sim.finger_speed),
                                     "open_gap": float(sim.open_width)}
        return So101Robot(so101 if so101 is not None else So101Config(), period=period, **kw)
    if name in SIM_ROBOTS:
        if world is None or world.backend != name:
            raise ValueError(f"robot {name!r} needs its simulated world")
        return SimRobot(world)
    if name == "dry-run":
        return DryRunRobot(wrist, period)
    if ":" in name:
        robot, cls = construct(name, "robot")
        missing = [m for m in ROBOT_METHODS if not callable(getattr(robot, m, None))]
        if missing:
            raise ValueError(f"robot {name!r}: {cls.__name__} lacks {', '.join(missing)} (see docs/deploy.md)")
        if not isinstance(getattr(robot, "name", None), str):
            robot.name = name
        return robot
    raise ValueError(f"unknown robot {name!r}; expected 'bullet', 'sim', 'dry-run', 'so101' or module:Class")


__all__ = ["DryRunRobot", "Outcome", "Robot", "SIM_ROBOTS", "Senses", "SimRobot", "SimWorld", "open_robot"]
