"""A hardware-free SO-101 for tests: six Feetech STS3215 servos simulated at the level of the Feetech SDK
(``scservo_sdk``: port, packet handler, group sync read and write), whose goal positions drive the MuJoCo SO-101 and
whose present positions are read back from it, plus the MuJoCo wrist camera.

LeRobot's ``SO101Follower`` and ``FeetechMotorsBus`` run unchanged on top of it: connect and its handshake (ping,
model numbers, firmware), the calibration check against the motors' registers, ``configure``, the degrees and 0-100
conversions, sign-magnitude encoding, ``max_relative_target`` and the sync reads and writes. Each sync write of
``Goal_Position`` advances the physics by one control period (the servos then hold their targets).

Two worlds can stand behind the bus: :class:`TwinWorld` (one fixed-size red target on a grey table, for the unit and
fault tests) and :class:`BackendWorld` (the MuJoCo backend's own randomized scenes, ``MujocoGraspEnv(num_envs=1)``
as ``deploy --robot mujoco`` runs it: the scene of each episode seed, its success rule and failure codes).

Faults to inject (attributes of :class:`TwinArm`): ``fail_reads`` (a sync read that times out), ``refuse_writes``
(the bus refuses a write), ``stuck`` (a servo whose output no longer moves: a joint name or ``gripper``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import threading
from pathlib import Path

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402

from graspsim.mujoco.model import CAMERA, HIDDEN_GROUP, arm_spec  # noqa: E402

from graspsim.robot.cameras import Camera, CameraError, Frame  # noqa: E402

MOTORS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
MODEL_NUMBER = 777  # sts3215
RES = 4095
COMM_SUCCESS, COMM_TX_FAIL, COMM_RX_TIMEOUT = 0, -1001, -3001
ADDR = {"Present_Position": 56, "Goal_Position": 42, "Homing_Offset": 31, "Min_Position_Limit": 9,
        "Max_Position_Limit": 11, "Model_Number": 3, "Firmware_Major_Version": 0, "Firmware_Minor_Version": 1,
        "Torque_Enable": 40}
TWINS: dict[str, "TwinArm"] = {}
"""Port name -> the twin arm on it (the fake SDK classes look their arm up here)."""


class _GLThread:
    """One thread that does all MuJoCo rendering: an EGL context is current in the thread that made it, and the
    robot loop reads cameras from a worker thread of its own."""

    def __init__(self):
        self.jobs: queue.Queue = queue.Queue()
        threading.Thread(target=self._run, name="so101-twin-gl", daemon=True).start()

    def _run(self) -> None:
        while True:
            fn, out, done = self.jobs.get()
            try:
                out.append((True, fn()))
            except BaseException as e:  # handed back to the caller
                out.append((False, e))
            done.set()

    def call(self, fn):
        out: list = []
        done = threading.Event()
        self.jobs.put((fn, out, done))
        done.wait()
        ok, value = out[0]
        if not ok:
            raise value
        return value


GL = _GLThread()


def _encode_sign(value: int, bit: int) -> int:
    return (abs(value) | (1 << bit)) if value < 0 else value


KINDS = (("cube", mujoco.mjtGeom.mjGEOM_BOX, (0.0125, 0.0125, 0.0125)),
         ("cylinder", mujoco.mjtGeom.mjGEOM_CYLINDER, (0.012, 0.012, 0.015)),
         ("sphere", mujoco.mjtGeom.mjGEOM_SPHERE, (0.014, 0.014, 0.014)))
"""(name, MuJoCo shape, half extents x, y, z in m) of the targets: a 2.5 cm cube, an upright cylinder 2.4 cm across
and 3 cm tall, a 2.8 cm sphere."""
PARK = {"cube": (0.45, -0.35), "cylinder": (0.45, 0.0), "sphere": (0.45, 0.35)}
"""Where the kinds not in a scene wait on the table (m), far outside the wrist camera's view."""


class TwinWorld:
    """The MuJoCo SO-101 on a table with one target (a cube, cylinder or sphere), physics stepped by the servos."""

    def __init__(self, image: int = 64):
        spec = arm_spec()
        wb = spec.worldbody
        table = wb.add_geom()
        table.name = "table"
        table.type = mujoco.mjtGeom.mjGEOM_BOX
        table.size = [0.6, 0.6, 0.01]
        table.pos = [0.0, 0.0, -0.01]
        table.rgba = [0.55, 0.55, 0.55, 1.0]
        light = wb.add_light()
        light.type = mujoco.mjtLightType.mjLIGHT_DIRECTIONAL
        light.dir = [0.0, 0.0, -1.0]
        light.pos = [0.0, 0.0, 1.0]
        for kind, shape, half in KINDS:  # one body per kind; the unused ones wait off to the side
            body = wb.add_body()
            body.name = kind
            body.pos = list(PARK[kind]) + [half[2]]
            body.add_freejoint()
            g = body.add_geom()
            g.name = kind
            g.type = shape
            g.size = list(half) if shape == mujoco.mjtGeom.mjGEOM_BOX else (
                [half[0], half[2], 0.0] if shape == mujoco.mjtGeom.mjGEOM_CYLINDER else [half[0], 0.0, 0.0])
            g.mass = 0.02
            g.friction = [0.8, 0.005, 0.0005]
            g.condim = 4
            g.rgba = [0.9, 0.1, 0.1, 1.0]
        spec.visual.headlight.active = 1
        spec.visual.quality.shadowsize = 0
        spec.visual.quality.offsamples = 0
        spec.visual.map.znear = 0.005
        self.model = spec.compile()
        self.data = mujoco.MjData(self.model)
        m = self.model
        self.qadr = np.array([m.jnt_qposadr[m.joint(n).id] for n in MOTORS])
        self.act = np.array([m.actuator(n).id for n in MOTORS])
        self.lo = m.jnt_range[[m.joint(n).id for n in MOTORS], 0].copy()
        self.hi = m.jnt_range[[m.joint(n).id for n in MOTORS], 1].copy()
        self.adr = {k: int(m.jnt_qposadr[m.body(k).jntadr[0]]) for k, _, _ in KINDS}
        self.dof = {k: int(m.jnt_dofadr[m.body(k).jntadr[0]]) for k, _, _ in KINDS}
        self.half = {k: h for k, _, h in KINDS}
        self.kind = "cube"
        self.substeps = int(round(0.1 / m.opt.timestep))
        self.image = image
        self._renderer: mujoco.Renderer | None = None  # created, used and closed in the GL thread only
        self.scene_opt = mujoco.MjvOption()
        self.scene_opt.geomgroup[HIDDEN_GROUP] = 0
        rest = np.array([0.0, -1.7, 1.6, 1.2, 0.0, 0.0])  # folded like LeRobot's rest pose, jaw closed
        self.data.qpos[self.qadr] = rest
        self.data.ctrl[self.act] = rest
        self.place("cube", 0.0, 0.0, 0.0)
        mujoco.mj_forward(m, self.data)
        self.episode = -1
        self.history: list[str] = []
        """The kind of every scene so far."""

    def _put(self, kind: str, x: float, y: float, yaw: float) -> None:
        a, d = self.adr[kind], self.dof[kind]
        self.data.qpos[a:a + 3] = [x, y, self.half[kind][2] + 1e-4]
        self.data.qpos[a + 3:a + 7] = [math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]
        self.data.qvel[d:d + 6] = 0.0

    def place(self, kind: str, x: float, y: float, yaw: float) -> None:
        """``kind`` on the table at (x, y) turned by ``yaw``; the other kinds back to their parking places."""
        for k, _, _ in KINDS:
            if k != kind:
                self._put(k, *PARK[k], 0.0)
        self._put(kind, x, y, yaw)
        self.kind, self.yaw = kind, yaw
        self.z0 = self.half[kind][2]

    def reset(self, seed: int) -> None:
        """A new scene from ``seed``: a cube, an upright cylinder or a sphere within 6 cm of the workspace centre
        (each axis), turned up to 45 degrees."""
        rng = np.random.default_rng(seed)
        kind = KINDS[int(rng.integers(len(KINDS)))][0]
        x, y = rng.uniform(-0.06, 0.06, 2)
        self.place(kind, float(x), float(y), float(rng.uniform(-math.pi / 4, math.pi / 4)))
        mujoco.mj_forward(self.model, self.data)
        self.episode += 1
        self.history.append(kind)

    def target_pos(self) -> np.ndarray:
        a = self.adr[self.kind]
        return self.data.qpos[a:a + 3].copy()

    def lifted(self) -> bool:
        return bool(self.target_pos()[2] > self.z0 + 0.02)

    def step(self) -> None:
        for _ in range(self.substeps):
            mujoco.mj_step(self.model, self.data)

    def present(self, i: int) -> float:
        """Measured angle (rad) of motor ``i`` (:data:`MOTORS` order)."""
        return float(self.data.qpos[self.qadr[i]])

    def drive(self, goals: dict[int, float]) -> None:
        """New servo targets ``{motor index: angle (rad)}`` (the others keep theirs), then one control period."""
        for i, angle in goals.items():
            self.data.ctrl[self.act[i]] = min(max(angle, self.lo[i]), self.hi[i])
        self.step()

    def _render(self) -> np.ndarray:
        if self._renderer is None:
            self._renderer = mujoco.Renderer(self.model, self.image, self.image)
        self._renderer.update_scene(self.data, camera=CAMERA, scene_option=self.scene_opt)
        return self._renderer.render().copy()

    def render(self) -> np.ndarray:
        """64 x 64 RGB of the wrist camera (rendered in the one GL thread, whichever thread asks)."""
        return GL.call(self._render)

    frame = render
    """What the twin cameras show (H,W,3 uint8)."""

    def close(self) -> None:
        """Free the renderer in the thread whose GL context it uses."""
        if self._renderer is not None:
            GL.call(self._renderer.close)
            self._renderer = None

    def target_mask(self, rgb: np.ndarray) -> np.ndarray:
        """H,W bool: the red cube's pixels in ``rgb`` (a colour test: the rest of the scene is grey)."""
        r, g, b = (rgb[..., i].astype(int) for i in range(3))
        return (r > 90) & (r > 2 * g + 20) & (r > 2 * b + 20)


class TwinArm:
    """The servo registers of one SO-101 on port ``port``, driving ``world``. The calibration puts each joint's
    middle at the model's zero (the SO-101 "new calibration" model) and its range at the model's range."""

    def __init__(self, world: TwinWorld, port: str, calibration_dir: Path, arm_id: str = "twin"):
        self.world, self.port = world, port
        self.regs: dict[int, dict[int, int]] = {}
        self.cal: dict[str, dict] = {}
        for i, name in enumerate(MOTORS):
            mid = 2047
            half = int(round(math.degrees(world.hi[i] - world.lo[i]) / 2 * RES / 360))
            if name == "wrist_roll":
                lo, hi = 0, RES
            elif name == "gripper":
                lo, hi = 1000, 1000 + 2 * half
            else:
                lo, hi = mid - half, mid + half
            homing = -37 * (i + 1)  # any offset: what matters is that file and registers agree
            self.cal[name] = {"id": i + 1, "drive_mode": 0, "homing_offset": homing, "range_min": lo, "range_max": hi}
            self.regs[i + 1] = {ADDR["Model_Number"]: MODEL_NUMBER, ADDR["Firmware_Major_Version"]: 3,
                                ADDR["Firmware_Minor_Version"]: 10, ADDR["Homing_Offset"]: _encode_sign(homing, 11),
                                ADDR["Min_Position_Limit"]: lo, ADDR["Max_Position_Limit"]: hi}
        calibration_dir.mkdir(parents=True, exist_ok=True)
        (calibration_dir / f"{arm_id}.json").write_text(json.dumps(self.cal, indent=4))
        self.fail_reads = False
        self.refuse_writes = False
        self.stuck: str | None = None
        self.writes = 0
        self.reads = 0
        TWINS[port] = self

    # ---------------------------------------------------------------- joint angle <-> ticks
    def _raw_of(self, i: int, angle: float) -> int:
        c = self.cal[MOTORS[i]]
        if MOTORS[i] == "gripper":
            frac = (angle - self.world.lo[i]) / (self.world.hi[i] - self.world.lo[i])
            return int(round(c["range_min"] + frac * (c["range_max"] - c["range_min"])))
        mid = (c["range_min"] + c["range_max"]) / 2
        return int(round(mid + math.degrees(angle) * RES / 360))

    def _angle_of(self, i: int, raw: int) -> float:
        c = self.cal[MOTORS[i]]
        if MOTORS[i] == "gripper":
            frac = (raw - c["range_min"]) / (c["range_max"] - c["range_min"])
            return float(self.world.lo[i] + frac * (self.world.hi[i] - self.world.lo[i]))
        mid = (c["range_min"] + c["range_max"]) / 2
        return math.radians((raw - mid) * 360 / RES)

    def read(self, motor_id: int, addr: int) -> int:
        if addr == ADDR["Present_Position"]:
            i = motor_id - 1
            return self._raw_of(i, self.world.present(i))
        return self.regs[motor_id].get(addr, 0)

    def write(self, motor_id: int, addr: int, value: int) -> None:
        self.regs[motor_id][addr] = value

    def goals(self, values: dict[int, int]) -> None:
        """A sync write of Goal_Position: new servo targets, then one control period of physics."""
        goals = {motor_id - 1: self._angle_of(motor_id - 1, raw) for motor_id, raw in values.items()
                 if self.stuck != MOTORS[motor_id - 1]}
        self.writes += 1
        self.world.drive(goals)


# -------------------------------------------------------------------------------- the fake Feetech SDK
def _value(data: list[int]) -> int:
    return sum(int(b) << (8 * k) for k, b in enumerate(data))


class FakePortHandler:
    def __init__(self, port_name: str):
        self.port_name = port_name
        self.is_open = False
        self.is_using = False
        self.baudrate = 1_000_000

    @property
    def arm(self) -> TwinArm:
        return TWINS[self.port_name]

    def openPort(self):  # noqa: N802 (the SDK's names)
        self.is_open = self.port_name in TWINS
        return self.is_open

    def closePort(self):  # noqa: N802
        self.is_open = False

    def clearPort(self):  # noqa: N802
        pass

    def setBaudRate(self, baudrate):  # noqa: N802
        self.baudrate = baudrate
        return True

    def getBaudRate(self):  # noqa: N802
        return self.baudrate

    def setPacketTimeoutMillis(self, msec):  # noqa: N802
        pass

    def getCurrentTime(self):  # noqa: N802
        return 0.0


class FakePacketHandler:
    def __init__(self, protocol_version=0):
        self.protocol_version = protocol_version

    def getTxRxResult(self, result):  # noqa: N802
        return {COMM_SUCCESS: "[TxRxResult] Communication success!",
                COMM_TX_FAIL: "[TxRxResult] Failed transmit instruction packet!",
                COMM_RX_TIMEOUT: "[TxRxResult] There is no status packet!"}.get(result, f"[TxRxResult] {result}")

    def getRxPacketError(self, error):  # noqa: N802
        return f"[RxPacketError] {error}"

    def ping(self, port, motor_id):
        return MODEL_NUMBER, COMM_SUCCESS, 0

    def _read(self, port, motor_id, addr):
        arm = port.arm
        if arm.fail_reads:
            return 0, COMM_RX_TIMEOUT, 0
        return arm.read(motor_id, addr), COMM_SUCCESS, 0

    read1ByteTxRx = read2ByteTxRx = read4ByteTxRx = _read  # noqa: N815

    def writeTxRx(self, port, motor_id, addr, length, data):  # noqa: N802
        if port.arm.refuse_writes:
            return COMM_TX_FAIL, 0
        port.arm.write(motor_id, addr, _value(data))
        return COMM_SUCCESS, 0


class FakeSyncRead:
    def __init__(self, port, ph, start_address, data_length):
        self.port, self.start_address, self.data_length = port, start_address, data_length
        self.ids: list[int] = []
        self.data: dict[int, int] = {}

    def clearParam(self):  # noqa: N802
        self.ids = []

    def addParam(self, motor_id):  # noqa: N802
        self.ids.append(motor_id)
        return True

    def txRxPacket(self):  # noqa: N802
        arm = self.port.arm
        if arm.fail_reads:
            return COMM_RX_TIMEOUT
        arm.reads += 1
        self.data = {i: arm.read(i, self.start_address) for i in self.ids}
        return COMM_SUCCESS

    def getData(self, motor_id, address, data_length):  # noqa: N802
        return self.data[motor_id]


class FakeSyncWrite:
    def __init__(self, port, ph, start_address, data_length):
        self.port, self.start_address, self.data_length = port, start_address, data_length
        self.params: dict[int, list[int]] = {}

    def clearParam(self):  # noqa: N802
        self.params = {}

    def addParam(self, motor_id, data):  # noqa: N802
        self.params[motor_id] = list(data)
        return True

    def txPacket(self):  # noqa: N802
        arm = self.port.arm
        if arm.refuse_writes:
            return COMM_TX_FAIL
        values = {i: _value(d) for i, d in self.params.items()}
        if self.start_address == ADDR["Goal_Position"]:
            arm.goals(values)
        else:
            for i, v in values.items():
                arm.write(i, self.start_address, v)
        return COMM_SUCCESS


FAKE_SDK = {"PortHandler": FakePortHandler, "PacketHandler": FakePacketHandler, "GroupSyncRead": FakeSyncRead,
            "GroupSyncWrite": FakeSyncWrite}
"""The Feetech SDK's classes the twin replaces (``scservo_sdk`` attribute -> the twin's)."""


def patch_sdk(monkeypatch) -> None:
    """Replace the Feetech SDK's port, packet handler and group sync classes by the twin's (pytest monkeypatch)."""
    import scservo_sdk

    for name, fake in FAKE_SDK.items():
        monkeypatch.setattr(scservo_sdk, name, fake)


@contextlib.contextmanager
def patched_sdk():
    """:func:`patch_sdk` outside pytest (benchmarks): the SDK's own classes come back on exit."""
    import scservo_sdk

    saved = {name: getattr(scservo_sdk, name) for name in FAKE_SDK}
    try:
        for name, fake in FAKE_SDK.items():
            setattr(scservo_sdk, name, fake)
        yield
    finally:
        for name, cls in saved.items():
            setattr(scservo_sdk, name, cls)


# -------------------------------------------------------------------------------- camera and controller
class TwinCamera(Camera):
    """The MuJoCo wrist camera of ``world`` as our Camera; ``unplug_after`` reads, it fails as an unplugged USB
    camera does."""

    name = "twin-wrist"

    def __init__(self, world: TwinWorld, unplug_after: int | None = None):
        self.world, self.unplug_after, self.k = world, unplug_after, 0

    def read(self, timeout: float) -> Frame:
        import time

        if self.unplug_after is not None and self.k >= self.unplug_after:
            raise CameraError(f"{self.name}: the camera was unplugged (no device)")
        self.k += 1
        return Frame(self.world.frame(), time.monotonic(), self.k - 1)


def lerobot_twin_camera(world: TwinWorld, unplug_after: int | None = None):
    """The MuJoCo wrist camera of ``world`` as a LeRobot camera (a ``lerobot.cameras.Camera``: connect, async_read
    with a capture ``latest_timestamp``, disconnect). After ``unplug_after`` frames its reads fail as LeRobot's OpenCV
    camera does when the device is gone (its reader thread has stopped)."""
    import time

    from lerobot.cameras import Camera as LeRobotCameraBase
    from lerobot.cameras.opencv import OpenCVCameraConfig

    class MujocoWristCamera(LeRobotCameraBase):
        def __init__(self):
            super().__init__(OpenCVCameraConfig(index_or_path=0, width=world.image, height=world.image, fps=10))
            self.connected = False
            self.k = 0
            self.latest_timestamp = None

        @property
        def is_connected(self) -> bool:
            return self.connected

        @staticmethod
        def find_cameras():
            return []

        def connect(self, warmup: bool = True) -> None:
            self.connected = True

        def read(self):
            return self.async_read()

        def async_read(self, timeout_ms: float = 200):
            if unplug_after is not None and self.k >= unplug_after:
                raise RuntimeError(f"{self} read thread is not running.")
            self.k += 1
            self.latest_timestamp = time.perf_counter()
            return world.frame()

        def disconnect(self) -> None:
            self.connected = False

        def __str__(self) -> str:
            return "MujocoWristCamera(twin)"

    return MujocoWristCamera()


def wrap_quarter(a: float) -> float:
    """``a`` (rad) wrapped to [-pi/4, pi/4): a cube looks the same every quarter turn."""
    return (a + math.pi / 4) % (math.pi / 2) - math.pi / 4


class StandInNets:
    """What :class:`graspsim.robot.controller.Controller` reads of its nets, for the scripted stand-ins below (a wrist
    net at the simulator's limits, no fingertip senses)."""

    runtime = "scripted"
    image_size = 64
    max_speed = 0.1
    wrist = True
    max_yaw_rate = 1.5
    fingertip = None
    precision = "fp32"
    mirror_tta = False


class ScriptedNets(StandInNets):
    """Stands in for the vision and control nets of :class:`graspsim.robot.controller.Controller`: the mask is a
    colour test on the wrist frame, the action a scripted grasp that reads the twin's true cube pose and the arm's
    grasp point (privileged, like the simulator's expert): centre over the cube and turn to its faces, go down, close,
    lift. It sees the arm only through the world, never through the adapter."""

    def __init__(self, world: TwinWorld, kin, lift_to: float = 0.06):
        self.world, self.kin, self.lift_to = world, kin, lift_to
        self.episode = -1
        self.closed_ticks = 0

    def mask(self, rgb: np.ndarray) -> np.ndarray:
        return self.world.target_mask(rgb[0].transpose(1, 2, 0))[None]

    def action(self, mask: np.ndarray, gripper: np.ndarray) -> np.ndarray:
        w = self.world
        if w.episode != self.episode:
            self.episode, self.closed_ticks = w.episode, 0
        q = w.data.qpos[w.qadr[:5]]
        pos, yaw = self.kin.grasp_pose(q)
        cube = w.target_pos()
        err = cube[:2] - pos[:2]
        dyaw = wrap_quarter(w.yaw - yaw) if w.kind == "cube" else 0.0
        grasp_z = max(w.half[w.kind][2], 0.0125)
        v = np.zeros(3)
        wz = float(np.clip(3.0 * dyaw, -1.5, 1.5))
        grip = -1.0
        if self.closed_ticks > 0 or (np.linalg.norm(err) < 0.004 and abs(dyaw) < 0.06 and pos[2] < grasp_z + 0.004):
            grip = 1.0
            self.closed_ticks += 1
            wz = 0.0
            if self.closed_ticks > 4:
                v[2] = 0.1 if pos[2] < self.lift_to else 0.0
        else:
            v[:2] = np.clip(4.0 * err, -0.1, 0.1)
            aligned = np.linalg.norm(err) < 0.006 and abs(dyaw) < 0.1
            # hover 3 cm above the grasp height: higher, the far edge of the square is out of the straight-down reach
            v[2] = np.clip(4.0 * ((grasp_z - 0.002 if aligned else grasp_z + 0.03) - pos[2]), -0.1, 0.1)
        return np.array([[*v, wz, grip]], np.float32)


def twin_robot(cfg, world: TwinWorld, **kw):
    """A :class:`graspsim.robot.so101.So101Robot` on the twin, LeRobot's follower built from ``cfg`` as for a real
    arm, whose episodes start on a new scene of ``world`` and which can tell success (the cube lifted 2 cm)."""
    from graspsim.robot.robots import Outcome
    from graspsim.robot.so101 import So101Robot

    class TwinSo101(So101Robot):
        name = "so101-twin"

        def start_episode(self, seed: int) -> None:
            world.reset(seed)
            super().start_episode(seed)

        def outcome(self) -> Outcome:
            up = world.lifted()
            return Outcome(done=up, success=up, reason="success" if up else "")

    return TwinSo101(cfg, sleep=lambda s: None, **kw)


# -------------------------------------------------------------------------------- the MuJoCo backend's own scenes
CLOSE_MARGIN = 0.05
"""A jaw goal this far (rad) below the open jaw counts as closing (the grasp bookkeeping's close command): the bus
sees joint goals, not the nets' grip command."""


def _sim_world():
    from graspsim.robot.robots import SimWorld

    return SimWorld


class BackendWorld(_sim_world()):
    """The world of ``deploy --camera mujoco --robot mujoco`` (a :class:`graspsim.robot.robots.SimWorld` on
    ``MujocoGraspEnv(cfg, num_envs=1)``) driven through servo targets instead of Cartesian commands: ``reset(seed)``
    builds the backend's scene of that episode seed (kind, size, pose, colour, table, light, lens, distractors) with
    the arm at the backend's start pose; each Goal_Position write (:meth:`drive`) sets the servo targets and runs one
    control period of the env's physics and bookkeeping (:meth:`graspsim.mujoco.MujocoGraspEnv.drive_joints`), so
    success and the failure codes are the backend's own. :meth:`frame` is the env's wrist image (64 x 64, the
    scene's blur and noise added) as the backend's camera shows it."""

    def __init__(self, cfg):
        super().__init__("mujoco", cfg)
        env = self.env
        m = env.model
        self.scene = env.scenes[0]
        self.qadr = np.array([*self.scene.arm_q, self.scene.jaw_q])
        jids = [m.joint(n).id for n in MOTORS]
        self.lo, self.hi = m.jnt_range[jids, 0].copy(), m.jnt_range[jids, 1].copy()
        self.image = cfg.image_size
        self.open_jaw = float(env.iks[0].open_jaw)
        self.goal = np.array([self.present(i) for i in range(len(MOTORS))])
        self.start_q = self.goal[:5].copy()
        self.failure = ""
        self.unstable = False
        """MuJoCo diverged in this episode (and reset its data: the arm jumped to the model's zero pose)."""
        # the scene the env was built with, until the first reset (deploy checks the points before any episode)
        self.fingertip = self.scene_fingertip()
        self.episode = -1
        self.history: list[str] = []
        """The target kind of every scene so far."""
        self.seeds: list[int] = []

    def reset(self, seed: int) -> None:
        from graspsim.state import KIND_NAMES

        super().reset(seed)
        self.unstable = False
        self.goal = np.array([self.present(i) for i in range(len(MOTORS))])
        self.start_q = self.goal[:5].copy()
        self.failure = ""
        self.episode += 1
        self.history.append({"box": "cube"}.get(k := KIND_NAMES[int(self.env.state.target_kind[0])], k))
        self.seeds.append(int(seed))

    def present(self, i: int) -> float:
        return float(self.scene.d.qpos[self.qadr[i]])

    def drive(self, goals: dict[int, float]) -> None:
        """New servo targets ``{motor index: angle (rad)}`` (the others keep theirs), then one control period."""
        from graspsim.physics import FAILURE_NAMES

        for i, angle in goals.items():
            self.goal[i] = min(max(angle, self.lo[i]), self.hi[i])
        close = self.goal[5] < self.open_jaw - CLOSE_MARGIN
        with self.env.rendering(False):
            _, _, done, info = self.env.drive_joints(self.goal[None, :5], self.goal[5:], np.array([close]))
        self.success = bool(info["success"][0])
        self.failure = FAILURE_NAMES[int(info["failure"][0])]
        self.unstable = self.scene.unstable

    def frame(self) -> np.ndarray:
        return self.render()[0]

    def mask(self) -> np.ndarray:
        return self.render()[1]


def twin_config(sim, port, calibration_dir, **kw):
    """:class:`graspsim.robot.so101.So101Config` for the twin arm with the workspace of ``sim`` (the square and the
    height the nets were trained in, as a user would set --so101.workspace and --so101.max-height)."""
    from graspsim.mujoco.model import so101_geometry
    from graspsim.robot.so101 import So101Config

    below = float(so101_geometry().tcp_below_grasp)
    return So101Config(port=str(port), id="twin", calibration_dir=calibration_dir, workspace=float(sim.workspace),
                       max_height=float(sim.max_height) + below, **kw)


def backend_twin_robot(cfg, world: BackendWorld, **kw):
    """A :class:`graspsim.robot.so101.So101Robot` on the twin over ``world``'s backend scenes. Each episode starts on
    the backend's scene of its seed, from the backend's start pose (the adapter's homing move runs, with that pose as
    its home); the fingertip points are the scene's (as the backend's simulated robot reports them); the episode ends
    as the backend's does: success, or ``max_steps`` commands, with the backend's failure code; or as ``unstable``
    when MuJoCo's physics diverged (the backend's ``diverged``)."""
    from graspsim.robot.robots import Outcome
    from graspsim.robot.so101 import So101Robot

    class BackendSo101(So101Robot):
        name = "so101-twin"

        def start_episode(self, seed: int) -> None:
            world.reset(seed)
            super().start_episode(seed)
            self.sends = 0

        def home_pose(self) -> np.ndarray:
            return world.start_q.copy()

        def fingertip(self):
            return world.fingertip

        def send(self, command):
            sent = super().send(command)
            self.sends += 1
            return sent

        def outcome(self) -> Outcome:
            # a diverged simulation ends the episode as a failure before the jump of its reset reaches the adapter
            # (which would stop the arm and end the run: a joint far from its target)
            done = world.success or world.unstable or self.sends >= world.cfg.max_steps
            reason = "success" if world.success else ("unstable" if world.unstable else world.failure)
            return Outcome(done=done, success=world.success, reason=reason if done else "")

    return BackendSo101(cfg, sleep=lambda s: None, **kw)


class PrivilegedScript(StandInNets):
    """Stands in for the nets on a :class:`BackendWorld` (or any SimWorld on the MuJoCo backend with ``episode``):
    the mask is the scene's exact target mask, the action the backend's own scripted grasp
    (:class:`graspsim.mujoco.scripted.ScriptedGrasp`) on the true state, restarted with every episode."""

    def __init__(self, world):
        from graspsim.mujoco.scripted import ScriptedGrasp

        self.world = world
        self.script = ScriptedGrasp.for_env(world.env)
        self.episode = -1

    def mask(self, rgb: np.ndarray) -> np.ndarray:
        return self.world.render()[1][None]

    def action(self, mask: np.ndarray, gripper: np.ndarray) -> np.ndarray:
        if self.world.episode != self.episode:
            self.episode = self.world.episode
            self.script.reset()
        return self.script(self.world.env.privileged()).numpy().astype(np.float32)


def driver_vs_backend(sim, vision, policy, episodes: int, out, seed: int = 0, scripted: bool = False,
                      log_progress=None) -> dict:
    """Issue 54's comparison: ``episodes`` episodes of the full ``deploy`` loop (``hz=0``) through LeRobot's
    ``SO101Follower`` on the simulated bus over :class:`BackendWorld`, then the same nets on the MuJoCo backend alone
    (``deploy --camera mujoco --robot mujoco``), on the same episode seeds (the ``test`` stream of ``seed``).
    ``scripted``: :class:`PrivilegedScript` in place of the nets (``vision`` and ``policy`` then only fill the config).
    Returns ``{"driver": summary, "backend": summary, "kinds": {seed: kind}, "seconds": {...}}`` (the deploy
    summaries; their ``per_episode`` lists have each episode's ``seed``, ``success`` and ``end``). A fault that ends
    the driver's run (the arm stopped) leaves its summary's ``error`` set and fewer episodes in it. Needs LeRobot
    0.4.4 and the MuJoCo backend; the Feetech SDK is patched only while the driver runs."""
    import time
    from pathlib import Path

    from graspsim.mujoco.ik import So101Kinematics
    from graspsim.robot.cameras import SimCamera
    from graspsim.robot.controller import Controller
    from graspsim.robot.deploy import DeployConfig, deploy
    from graspsim.robot.lerobot_camera import LeRobotCamera
    from graspsim.robot.loop import DeployError
    from graspsim.robot.robots import SimRobot

    out = Path(out)
    common = dict(vision=vision, policy=policy, hz=0.0, episodes=episodes, seed=seed, sim=sim, overwrite=True,
                  time_limit=sim.max_steps / sim.control_hz)
    if log_progress is not None:
        log_progress("through LeRobot's driver on the simulated bus ...")
    t0 = time.perf_counter()
    world = BackendWorld(sim)
    port = out / "ttyTWIN0"
    out.mkdir(parents=True, exist_ok=True)
    port.write_text("")
    robot = None
    try:
        with patched_sdk():
            TwinArm(world, str(port), out / "calibration")
            robot = backend_twin_robot(twin_config(sim, port, out / "calibration"), world,
                                       kinematics=So101Kinematics(), max_speed=sim.max_speed,
                                       max_yaw_rate=sim.max_yaw_rate, max_wrist_yaw=sim.max_wrist_yaw,
                                       finger_speed=sim.finger_speed, open_gap=sim.open_width)
            ctl = Controller(PrivilegedScript(world)) if scripted else None
            try:
                driver = deploy(DeployConfig(camera="lerobot:twin", robot="dry-run", out=out / "driver", **common),
                                camera=LeRobotCamera(lerobot_twin_camera(world), name="lerobot:mujoco-wrist"),
                                robot=robot, controller=ctl)
            except DeployError:  # a fault stopped the arm and ended the run: its summary says where
                driver = json.loads((out / "driver" / "summary.json").read_text())
    finally:
        if robot is not None:
            robot.close()
        TWINS.pop(str(port), None)
        world.close()
    kinds = dict(zip(world.seeds, world.history))
    t1 = time.perf_counter()
    if log_progress is not None:
        log_progress("the MuJoCo backend alone ...")
    backend_cfg = DeployConfig(camera="mujoco", robot="mujoco", out=out / "backend", **common)
    if scripted:  # the script reads the true state: the backend's world is built here
        alone = BackendWorld(sim)
        try:
            backend = deploy(backend_cfg, camera=SimCamera(alone), robot=SimRobot(alone),
                             controller=Controller(PrivilegedScript(alone)))
        finally:
            alone.close()
    else:
        backend = deploy(backend_cfg)
    t2 = time.perf_counter()
    return {"driver": driver, "backend": backend, "kinds": kinds, "seconds": {"driver": t1 - t0, "backend": t2 - t1}}


def tally(summary: dict, kinds: dict) -> dict:
    """``{kind: (successes, episodes)}`` and ``{"all": ...}`` of a deploy summary, with failure ends counted:
    ``{"per_kind": ..., "ends": {kind: {end: n}}}``."""
    per_kind: dict[str, list[int]] = {}
    ends: dict[str, dict[str, int]] = {}
    for ep in summary["per_episode"]:
        kind = kinds.get(ep["seed"], "?")
        for k in (kind, "all"):
            ok = per_kind.setdefault(k, [0, 0])
            ok[0] += bool(ep["success"])
            ok[1] += 1
            if not ep["success"]:
                e = ends.setdefault(k, {})
                e[ep["end"]] = e.get(ep["end"], 0) + 1
    return {"per_kind": {k: tuple(v) for k, v in per_kind.items()}, "ends": ends}
