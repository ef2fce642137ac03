"""Every env is checked against the env protocol (graspsim.protocol.GraspEnvProtocol): members by name, methods by
signature (parameter names, kinds and defaults), attributes by type on a built instance.

A new env joins with one line in ENVS: (module, class, a function building a small instance from the class); an env
whose module is not importable here (an optional backend) is skipped, not failed.
"""

from __future__ import annotations

import importlib
import inspect

import pytest
import torch

from graspsim import SimConfig
from graspsim.protocol import PROTOCOL_MEMBERS, GraspEnvProtocol


def _robot_env(cls):
    return cls(robot=object(), max_ticks=5, guard=lambda what, fn, *a: fn(*a), cfg=SimConfig())


ENVS = {
    "torch": ("graspsim.env", "GraspEnv", lambda cls: cls(SimConfig(image_size=16), num_envs=2)),
    "bullet": ("graspsim.bullet.env", "BulletGraspEnv", lambda cls: cls(SimConfig(image_size=16), num_envs=1)),
    "robot": ("graspsim.robot.loop", "RobotEnv", _robot_env),
    "mujoco": ("graspsim.mujoco.env", "MujocoGraspEnv", lambda cls: cls(SimConfig(image_size=16), num_envs=1)),
}
"""Env name -> (module, class name, build a small instance)."""

METHODS = [m for m in PROTOCOL_MEMBERS if callable(getattr(GraspEnvProtocol, m, None))]


def _env_class(name: str):
    module, cls, _ = ENVS[name]
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is not None and (module.startswith(e.name) or not e.name.startswith("graspsim")):
            pytest.skip(f"{module} is not in this tree or its engine is not installed ({e.name})")
        raise
    return getattr(mod, cls)


def signature_problems(cls) -> list[str]:
    """What keeps ``cls``'s methods from the protocol's signatures: a protocol parameter missing or of another kind,
    a protocol default the method lacks, or an extra parameter without a default (callers would not pass it)."""
    problems = []
    for name in METHODS:
        impl = getattr(cls, name, None)
        if not callable(impl):
            problems.append(f"{name}: missing")
            continue
        want = list(inspect.signature(getattr(GraspEnvProtocol, name)).parameters.values())[1:]
        have = list(inspect.signature(impl).parameters.values())[1:]
        have_by_name = {p.name: p for p in have}
        for i, p in enumerate(want):
            q = have_by_name.get(p.name)
            if q is None:
                problems.append(f"{name}: no parameter {p.name!r}")
                continue
            if q.kind is not p.kind or have.index(q) != i:
                problems.append(f"{name}: {p.name!r} is {q.kind.description} at position {have.index(q)}, "
                                f"the protocol's is {p.kind.description} at {i}")
            if p.default is not inspect.Parameter.empty and q.default != p.default:
                problems.append(f"{name}: {p.name!r} defaults to {q.default!r}, the protocol's to {p.default!r}")
        extra = [q for q in have if q.name not in {p.name for p in want}
                 and q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD) and q.default is inspect.Parameter.empty]
        problems += [f"{name}: extra parameter {q.name!r} without a default" for q in extra]
    return problems


@pytest.mark.parametrize("name", sorted(ENVS))
def test_env_satisfies_the_protocol(name):
    cls = _env_class(name)
    assert signature_problems(cls) == [], f"{cls.__qualname__} breaks the env protocol"
    env = ENVS[name][2](cls)
    try:
        assert isinstance(env, GraspEnvProtocol)
        assert isinstance(env.num_envs, int) and env.num_envs >= 1
        assert isinstance(env.device, torch.device)
        assert isinstance(env.cfg, SimConfig)
        with env.rendering(False) as inside:
            assert inside is env
    finally:
        env.close()


def test_the_check_catches_a_wrong_signature_and_a_missing_member():
    class Drifted:
        num_envs, cfg, device = 1, SimConfig(), torch.device("cpu")

        def reset(self, seeds=None, env_ids=None):  # swapped order
            return {}

        def step(self, action, extra):  # a parameter callers never pass
            return {}, None, None, {}

        def observe(self):
            return {}

        def privileged(self):
            return {}

        def rendering(self, on):
            return self

    problems = signature_problems(Drifted)
    assert any(p.startswith("reset: 'env_ids'") for p in problems), problems
    assert any(p.startswith("step: extra parameter 'extra'") for p in problems), problems
    assert "close: missing" in problems
    assert not isinstance(Drifted(), GraspEnvProtocol)
