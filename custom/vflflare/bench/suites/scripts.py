"""The tables of the benchmark scripts not yet turned into suites, loaded from benchmarks/NAME.py by path.
Transitional (issue 39, item 1): each script that becomes a suite module takes its tables out of here,
and this module goes with the last one. Left: the attack benchmarks (label_disclosure, privacy,
fedhssl_privacy), which run vflflare.attacks, a layer bench may not import, and collab_vs_aux with its
NVFlare job package benchmarks/collab_split."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from vflflare.bench.paths import BENCHMARKS, COMMITTED
from vflflare.bench.records import read_jsonl
from vflflare.bench.tables import Builder, register


def script(name: str) -> ModuleType:
    """A benchmark script as a module (its table functions and RESULTS path), without running it."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def script_tables(name: str, function: str = "tables") -> Builder:
    """`python benchmarks/NAME.py --table`: the script's own tables of its committed RESULTS file."""

    def build() -> str:
        module = script(name)
        return getattr(module, function)(read_jsonl(module.RESULTS))

    return build


FEDHSSL_PRIVACY = "fedhssl_privacy.jsonl"
SCRIPT_TABLES: dict[str, Builder] = {
    "collab": script_tables("collab_vs_aux", "table"),
    "label_disclosure": script_tables("label_disclosure"),
    "privacy": script_tables("privacy"),  # credit default, the adaptive suite (issue 36): privacy_adaptive.jsonl
    "privacy_mnist": lambda: script("privacy").mnist_table(read_jsonl(COMMITTED / "privacy_mnist_adaptive.jsonl")),
    **{
        f"fedhssl/privacy_{n}": (
            lambda n=n: getattr(script("fedhssl_privacy"), f"table_{n}")(read_jsonl(COMMITTED / FEDHSSL_PRIVACY))
        )
        for n in ("vi", "vii")
    },
}
for _name, _build in SCRIPT_TABLES.items():
    register(_name, _build)
