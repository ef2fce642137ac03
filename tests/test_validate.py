"""Helpers defined once: config checks (graspsim.validate), key names (graspsim.keys), the progress bar, parameter counts."""

from __future__ import annotations

import math
import re

import pytest
import torch

from graspsim import validate as v
from graspsim.keys import OBS_KEYS, PRIVILEGED_KEYS


@pytest.mark.parametrize("check, good, bad, words", [
    (v.positive_int, [1, 7], [0, -1, 1.0, True, "3", None], "must be a positive int"),
    (v.non_negative_int, [0, 5], [-1, 0.0, False, None], "must be a non-negative int"),
    (v.finite_positive, [1e-9, 2, 3.5], [0, -1.0, math.inf, math.nan, True, "1"], "must be a finite positive number"),
    (v.finite_non_negative, [0, 0.0, 2.5], [-1e-9, math.inf, math.nan, False, None], "must be a finite non-negative number"),
    (v.probability, [0, 0.5, 1, 1.0], [-0.1, 1.01, math.nan, True, "0.5"], r"must be in \[0, 1\]"),
    (v.boolean, [True, False], [0, 1, "true", None], "must be true or false"),
])
def test_checkers_accept_good_and_name_owner_field_and_value_of_bad(check, good, bad, words):
    for x in good:
        check("Cfg", "field", x)
    for x in bad:
        with pytest.raises(ValueError, match=rf"^Cfg\.field {words}; got {re.escape(repr(x))}$"):
            check("Cfg", "field", x)


def test_bounded_checks_and_bare_names():
    v.int_in("Cfg", "n", 16, 16, 512)
    with pytest.raises(ValueError, match=r"^Cfg\.n must be an int in 16\.\.512; got 8$"):
        v.int_in("Cfg", "n", 8, 16, 512)
    v.value_range("Cfg", "r", (0.1, 0.2), 0.0, 1.0)
    for bad in ((0.3, 0.2), (0.1,), (0.0, math.inf), (-0.1, 0.5)):
        with pytest.raises(ValueError, match=r"^Cfg\.r must be a \(low, high\) pair"):
            v.value_range("Cfg", "r", bad, 0.0, 1.0)
    with pytest.raises(ValueError, match=r"^num_envs must be a positive int; got 0$"):  # a function argument
        v.positive_int("", "num_envs", 0)
    with pytest.raises(ValueError, match=r"\(m/s\); got -1"):
        v.finite_positive("Cfg", "max_speed", -1, unit="m/s")


def test_configs_use_the_shared_messages():
    from graspsim import SimConfig
    from graspsim.runtime import RuntimeConfig
    from graspsim.vision.train_config import TrainVisionConfig

    with pytest.raises(ValueError, match=r"^SimConfig\.max_steps must be a positive int; got 0$"):
        SimConfig(max_steps=0)
    with pytest.raises(ValueError, match=r"^TrainVisionConfig\.patches_per_frame must be a positive int; got 0$"):
        TrainVisionConfig(out="x", patches_per_frame=0)
    with pytest.raises(ValueError, match=r"^RuntimeConfig\.threads must be an int in 0\.\.256; got -1$"):
        TrainVisionConfig(out="x", runtime=RuntimeConfig(threads=-1))


def test_observation_keys_are_what_the_env_returns():
    from graspsim import GraspEnv, SimConfig

    env = GraspEnv(SimConfig(image_size=16, max_steps=4), num_envs=2, seed=0)
    assert tuple(env.reset()) == OBS_KEYS
    assert set(PRIVILEGED_KEYS) <= set(env.privileged())



@pytest.mark.parametrize("enabled", [False, True])
def test_progress_bar_runs_with_fields(enabled):
    from graspsim.progress import progress_bar

    with progress_bar("label", enabled, fields=("{task.fields[info]}",)) as bar:
        task = bar.add_task("work", total=3, info="")
        bar.update(task, advance=2, info="two done")
    assert bar.tasks[0].completed == 2


def test_one_parameter_count():
    from graspsim.dagger.model import count_parameters as control_count
    from graspsim.torch_util import count_parameters
    from graspsim.vision.model import count_parameters as vision_count

    net = torch.nn.Linear(3, 2)
    assert count_parameters(net) == control_count(net) == vision_count(net) == 8
