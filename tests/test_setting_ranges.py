"""Every numeric setting has a range, declared once (Settings.bounds, checked by Settings.validate): counts
cannot go negative or to zero where they must run, floats must be finite, and the defenses' strengths stay
below where they overflow or stop doing anything (issue 38, "Bad input still let through")."""

from __future__ import annotations

import dataclasses
import math
import typing

import pytest

from vflflare import cli
from vflflare.config import ConfigError, setting_bounds
from vflflare.registry import algorithms

BUILT_IN = sorted(name for name, plugin in algorithms().items() if plugin.__module__.startswith("vflflare."))
REQUIRED = {"secure_sum": {"he": True}, "vflhlp": {"label_owner": "site-1"}}


def config(algorithm: str, **values):
    return algorithms()[algorithm].Config.from_dict({"algorithm": algorithm, **REQUIRED.get(algorithm, {}), **values})


def numeric_fields(algorithm: str) -> dict[str, type]:
    cls = algorithms()[algorithm].Config
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if hints[f.name] in (int, float)}


@pytest.mark.parametrize("algorithm", BUILT_IN)
def test_every_count_setting_declares_its_range_and_the_defaults_pass(algorithm):
    cls = algorithms()[algorithm].Config
    declared = {}
    for klass in cls.__mro__:
        declared.update({k: v for k, v in klass.__dict__.get("bounds", {}).items() if k not in declared})
    ints = [name for name, kind in numeric_fields(algorithm).items() if kind is int]
    assert not [name for name in ints if name not in declared], "int settings without a declared range"
    cfg = config(algorithm)  # every default passes
    for name, (low, high) in setting_bounds(cls).items():
        value = getattr(cfg, name)
        assert (low is None or value >= low) and (high is None or value <= high), name


@pytest.mark.parametrize("algorithm", BUILT_IN)
def test_a_count_below_its_range_names_the_algorithm_and_key(algorithm):
    cls = algorithms()[algorithm].Config
    for name, kind in numeric_fields(algorithm).items():
        low = setting_bounds(cls).get(name, (None, None))[0]
        if kind is not int or low is None:
            continue
        with pytest.raises(ConfigError, match=rf"^algorithm '{algorithm}': {name} must be >= {low}, got {low - 1}$"):
            config(algorithm, **{name: low - 1})


@pytest.mark.parametrize(
    "values",
    [
        {"ssl_epochs": -1},
        {"ssl_epochs": 0},
        {"unlabeled_ratio": 0},
        {"classifier_epochs": 0},
        {"rep_dim": 0},
        {"num_threads": 0},
        {"seed": -1},
    ],
)
def test_counts_that_ran_silently_are_refused(values):
    ((key, value),) = values.items()
    with pytest.raises(ConfigError, match=rf"algorithm 'oneshot': {key} must be >= \d+, got {value}"):
        config("oneshot", **values)


def test_zero_is_allowed_where_it_means_skip():
    assert config("ssvfl_i", pretrain_epochs=0).pretrain_epochs == 0
    assert config("fewshot", finetune_epochs=0).finetune_epochs == 0
    assert config("fedhssl", global_iterations=0).global_iterations == 0
    assert config("oneshot", classifier_hidden=0).classifier_hidden == 0


@pytest.mark.parametrize("algorithm", BUILT_IN)
@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_every_float_setting_must_be_finite(algorithm, bad):
    for name, kind in numeric_fields(algorithm).items():
        if kind is float:
            with pytest.raises(ConfigError, match=rf"^algorithm '{algorithm}': {name} must be a finite number, got"):
                config(algorithm, **{name: bad})


def test_float_lists_must_be_finite():
    with pytest.raises(ConfigError, match="algorithm 'fedhssl': finetune_lrs must hold finite numbers"):
        config("fedhssl", finetune_lrs=[0.01, math.inf])


@pytest.mark.parametrize(
    "algorithm, key",
    [
        ("oneshot", "representation_noise"),
        ("vanilla", "gradient_marvell"),
        ("oneshot", "label_dp_epsilon"),
        ("vanilla", "gradient_clip"),
    ],
)
def test_infinite_defenses_are_refused_by_name(algorithm, key):
    with pytest.raises(ConfigError, match=rf"algorithm '{algorithm}': {key} must be a finite number, got inf"):
        config(algorithm, **{key: math.inf})


@pytest.mark.parametrize(
    "key, high",
    [
        ("gradient_marvell", 100),
        ("representation_noise", 100),
        ("label_dp_epsilon", 100),
        ("gradient_dp_epsilon", 100),
        ("gradient_clip", 1e6),
        ("gradient_noise", 1000),
    ],
)
def test_defense_strengths_have_an_upper_bound(key, high):
    extra = {"gradient_clip": 1.0} if key in ("gradient_noise", "gradient_dp_epsilon") else {}
    assert getattr(config("vanilla", **extra, **{key: high}), key) == high  # the bound itself is allowed
    with pytest.raises(ConfigError, match=rf"algorithm 'vanilla': {key} must be >= 0 and <= {high}, got 1e\+300"):
        config("vanilla", **extra, **{key: 1e300})


@pytest.mark.parametrize("argv, n", [(["-n", "2", "-t", "1"], 2), (["--sites", "broker,insurer,bank", "-t", "2"], 3)])
def test_simulate_refuses_fewer_threads_than_sites(tmp_path, argv, n):
    with pytest.raises(SystemExit, match=rf"-t \d is fewer threads than the {n} simulated sites.*pass -t {n}$"):
        cli.main(["simulate", str(tmp_path / "job"), "-w", str(tmp_path / "ws"), *argv])
    assert not (tmp_path / "ws").exists()  # refused before the simulator starts
