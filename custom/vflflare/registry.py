"""Algorithm plug-ins by name: a leaf that plug-ins register into, so that every layer may look one up.

A plug-in module decorates its `Algorithm` subclass with `@register`. The built-in ones are imported by
module name on the first lookup, as a job's own `plugins: [module]` are: nothing here imports a plug-in's
code, so that the protocol below the plug-ins never depends on them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from vflflare.config import ConfigError, JobConfig

if TYPE_CHECKING:
    from vflflare.algorithms.plugin import Algorithm

BUILT_IN = (
    "vflflare.algorithms.vanilla",  # vanilla, fedbcd
    "vflflare.algorithms.oneshot",
    "vflflare.algorithms.fewshot",
    "vflflare.algorithms.ssvfl",  # ssvfl_i, ssvfl_c
    "vflflare.algorithms.fedhssl",
    "vflflare.algorithms.vflhlp",
    "vflflare.algorithms.cfl",
    "vflflare.algorithms.secure_sum",
    "vflflare.algorithms.vertical_inference",
)

_ALGORITHMS: dict[str, type[Algorithm]] = {}
_built_in_loaded = False


def register(plugin: type[Algorithm]) -> type[Algorithm]:
    """Add a plug-in under its `name` (a class decorator)."""
    known = _ALGORITHMS.get(plugin.name)
    if known is not None and known is not plugin:
        raise ValueError(f"algorithm '{plugin.name}' is already registered by {known.__module__}.{known.__qualname__}")
    _ALGORITHMS[plugin.name] = plugin
    return plugin


def algorithms() -> dict[str, type[Algorithm]]:
    """Every registered plug-in by name, the built-in ones included."""
    global _built_in_loaded
    if not _built_in_loaded:
        for module in BUILT_IN:  # a module that fails to import raises here again on the next lookup
            importlib.import_module(module)
        _built_in_loaded = True
    return _ALGORITHMS


def load_plugins(modules: list[str]) -> None:
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise ConfigError(f"plugins: cannot import '{module}': {error}") from error


def get_algorithm(name: str, plugins: list[str] = ()) -> type[Algorithm]:
    load_plugins(list(plugins))
    known = algorithms()
    if name not in known:
        raise ConfigError(f"unknown algorithm '{name}'; registered: {sorted(known)}")
    return known[name]


def make_config(values: dict[str, Any] | None = None, **overrides: Any) -> JobConfig:
    """The validated config of a job: `values` (and keyword overrides) against the config class of the
    algorithm they name (default: one-shot)."""
    values = {**(values or {}), **overrides}
    plugin = get_algorithm(values.get("algorithm", JobConfig.algorithm), values.get("plugins", []))
    return plugin.Config.from_dict({**values, "algorithm": plugin.name})
