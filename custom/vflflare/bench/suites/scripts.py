"""The tables of the benchmark scripts not yet turned into suites, loaded from benchmarks/NAME.py by path.
Transitional (issue 39, item 1): each script that becomes a suite module takes its tables out of here,
and this module goes with the last one."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from vflflare.bench.paths import BENCHMARKS, COMMITTED, REPO
from vflflare.bench.records import read_jsonl
from vflflare.bench.tables import Builder, register


def script(name: str) -> ModuleType:
    """A benchmark script as a module (its table functions and RESULTS path), without running it."""
    for extra in (REPO / "custom", BENCHMARKS):  # the scripts import `common` and each other by name
        if str(extra) not in sys.path:
            sys.path.insert(0, str(extra))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def script_text(name: str, function: str) -> Builder:
    """`NAME.FUNCTION()`: tables a script builds from committed folders of its own choosing."""
    return lambda: getattr(script(name), function)()


def script_tables(name: str, function: str = "tables") -> Builder:
    """`python benchmarks/NAME.py --table`: the script's own tables of its committed RESULTS file."""

    def build() -> str:
        module = script(name)
        return getattr(module, function)(read_jsonl(module.RESULTS))

    return build


def fedhssl(function: str, *files: str, **kwargs) -> Builder:
    """`fedhssl.FUNCTION(records of FILES..., **kwargs)`: one FEDHSSL_REPORT table."""
    return lambda: getattr(script("fedhssl"), function)(*(read_jsonl(COMMITTED / f) for f in files), **kwargs)


FEDHSSL_TABLES = {  # name: (builder, the committed files it reads)
    "fedhssl/credit_200": (
        fedhssl("method_table", "fedhssl_g10.jsonl", setting="credit_default", labeled=200),
        ["fedhssl_g10.jsonl"],
    ),
    "fedhssl/credit_400": (
        fedhssl("method_table", "fedhssl_g10.jsonl", setting="credit_default", labeled=400),
        ["fedhssl_g10.jsonl"],
    ),
    "fedhssl/adult_200": (
        fedhssl("method_table", "fedhssl_g10.jsonl", setting="adult", labeled=200),
        ["fedhssl_g10.jsonl"],
    ),
    "fedhssl/communication": (fedhssl("communication_table", "fedhssl_g10.jsonl"), ["fedhssl_g10.jsonl"]),
    "fedhssl/grid": (
        fedhssl("grid_table", "fedhssl_g10.jsonl", cells=[("credit_default", 1000), ("adult", 400), ("adult", 1000)]),
        ["fedhssl_g10.jsonl"],
    ),
    "fedhssl/mnist": (
        fedhssl("grid_table", "fedhssl_mnist.jsonl", cells=[("mnist:2", 200), ("mnist:4", 200)]),
        ["fedhssl_mnist.jsonl"],
    ),
    "fedhssl/summary": (
        fedhssl("summary_table", "fedhssl_g10.jsonl", "fedhssl_mnist.jsonl"),
        ["fedhssl_g10.jsonl", "fedhssl_mnist.jsonl"],
    ),
    "fedhssl/iterations": (
        fedhssl("iterations_table", "fedhssl_g40.jsonl", "fedhssl_g10.jsonl"),
        ["fedhssl_g40.jsonl", "fedhssl_g10.jsonl"],
    ),
    "fedhssl/probe": (fedhssl("probe_table", "fedhssl_probe.jsonl"), ["fedhssl_probe.jsonl"]),
    **{
        f"fedhssl/privacy_{n}": (
            (
                lambda n=n: getattr(script("fedhssl_privacy"), f"table_{n}")(
                    read_jsonl(COMMITTED / "fedhssl_privacy.jsonl")
                )
            ),
            ["fedhssl_privacy.jsonl"],
        )
        for n in ("vi", "vii")
    },
}
SCRIPT_TABLES: dict[str, Builder] = {
    "collab": script_tables("collab_vs_aux", "table"),
    "label_disclosure": script_tables("label_disclosure"),
    "privacy": script_tables("privacy"),  # credit default, the adaptive suite (issue 36): privacy_adaptive.jsonl
    "privacy_mnist": lambda: script("privacy").mnist_table(read_jsonl(COMMITTED / "privacy_mnist_adaptive.jsonl")),
    **{
        f"performance/{part}": script_text("performance", f"{part}_table")
        for part in ("wire", "pipeline", "pipeline_wan", "imports", "image_views", "overhead", "fedhssl")
        if (COMMITTED / "performance" / f"{part}.jsonl").is_file()
    },
    "performance/mnist_simulator": script_text("performance", "mnist_simulator_table"),
    **({"images": script_tables("images")} if (COMMITTED / "images_cpu.jsonl").is_file() else {}),
    **{name: build for name, (build, files) in FEDHSSL_TABLES.items() if all((COMMITTED / f).is_file() for f in files)},
}
for _name, _build in SCRIPT_TABLES.items():
    register(_name, _build)
