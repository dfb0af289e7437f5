"""Algorithm plug-ins by name. Adding an algorithm: a module with an `Algorithm` subclass, plus one
line here (or `register(...)` from a module named in the job's `plugins` setting)."""

from __future__ import annotations

import importlib
from typing import Any

from vflflare.algorithms.cfl import CFL
from vflflare.algorithms.fedhssl import FedHSSL
from vflflare.algorithms.fewshot import FewShotVFL
from vflflare.algorithms.oneshot import OneShotVFL
from vflflare.algorithms.plugin import Algorithm
from vflflare.algorithms.secure_sum import SecureSumCheck
from vflflare.algorithms.ssvfl import SSVFLC, SSVFLI
from vflflare.algorithms.vanilla import FedBCD, VanillaVFL
from vflflare.algorithms.vertical_inference import VerticalInference
from vflflare.algorithms.vflhlp import VFLHLP
from vflflare.config import ConfigError, JobConfig

ALGORITHMS: dict[str, type[Algorithm]] = {}


def register(plugin: type[Algorithm]) -> type[Algorithm]:
    """Add a plug-in under its `name` (usable as a class decorator)."""
    known = ALGORITHMS.get(plugin.name)
    if known is not None and known is not plugin:
        raise ValueError(f"algorithm '{plugin.name}' is already registered by {known.__module__}.{known.__qualname__}")
    ALGORITHMS[plugin.name] = plugin
    return plugin


for _plugin in (
    VanillaVFL,
    FedBCD,
    OneShotVFL,
    FewShotVFL,
    SSVFLI,
    SSVFLC,
    FedHSSL,
    VFLHLP,
    CFL,
    SecureSumCheck,
    VerticalInference,
):
    register(_plugin)


def load_plugins(modules: list[str]) -> None:
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise ConfigError(f"plugins: cannot import '{module}': {error}") from error


def get_algorithm(name: str, plugins: list[str] = ()) -> type[Algorithm]:
    load_plugins(list(plugins))
    if name not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm '{name}'; registered: {sorted(ALGORITHMS)}")
    return ALGORITHMS[name]


def make_config(values: dict[str, Any] | None = None, **overrides: Any) -> JobConfig:
    """The validated config of a job: `values` (and keyword overrides) against the config class of the
    algorithm they name (default: one-shot)."""
    values = {**(values or {}), **overrides}
    plugin = get_algorithm(values.get("algorithm", JobConfig.algorithm), values.get("plugins", []))
    return plugin.Config.from_dict({**values, "algorithm": plugin.name})
