"""The robot stack: what runs the trained nets on a camera and an arm.

Write your own adapters against the two interfaces re-exported here::

    from graspsim.robot import Camera, Frame, Robot, Senses, Outcome

* :class:`Camera` (``read(timeout) -> Frame``) and the built-in cameras, the capture watchdog (:mod:`.cameras`);
* :class:`Robot` (``start_episode``, ``senses``, ``send``, ``stop``, ``outcome``) and the built-in robots: simulated,
  pybullet, dry run (:mod:`.robots`);
* the fixed-rate tick with its value checks and safety stops (:mod:`.loop`), the ``deploy`` run (:mod:`.deploy`);
* the deployable controller, RGB and gripper senses in, a command out (:class:`Controller`, :mod:`.controller`);
* ONNX export (:mod:`.export`) and its contract, which one module writes and reads (:mod:`.onnx_contract`);
* capture of frames into an eval-real image folder, the ``record`` verb (:mod:`.capture`);
* the IK layer for joint-space arms (:mod:`.ik`: the SO-101's, shared with the MuJoCo backend) and the real SO-101 on
  LeRobot's driver (:mod:`.so101`).

The names below are imported on first use, so ``import graspsim.robot`` costs nothing until one is touched. The
verbs stay in their modules (``graspsim.robot.deploy.deploy``, ``graspsim.robot.export.export``): a package attribute
named like a submodule would hide it.
"""

from __future__ import annotations

from graspsim.lazy import lazy_names

_LAZY = {
    "Camera": "cameras", "CameraError": "cameras", "CameraTimeout": "cameras", "EndOfStream": "cameras",
    "Frame": "cameras", "open_camera": "cameras",
    "Robot": "robots", "Senses": "robots", "Outcome": "robots", "DryRunRobot": "robots", "SimRobot": "robots",
    "SimWorld": "robots", "open_robot": "robots",
    "Controller": "controller", "Decision": "controller", "SafetyConfig": "controller",
    "DeployConfig": "deploy",
    "DeployError": "loop",
    "ExportConfig": "export",
    "RecordConfig": "capture", "record": "capture",
    "CartesianIK": "ik", "So101Kinematics": "ik",
}
"""Public name -> the submodule that defines it."""

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
