"""LEADERBOARD.md: the default grids (`vflflare bench`), each change tried against them, and the fair
comparison with tuned trees (issue 26); every table is `vflflare bench report` of a committed folder."""

from __future__ import annotations

from vflflare.bench.grid import LABEL_ALONE_TUNED, TUNED
from vflflare.bench.paths import COMMITTED
from vflflare.bench.tables import Builder, register

LEADERBOARD = "leaderboard"
CHANGES = ("quantile", "mlp128x2", "ple", "ensemble3", "wd1e-4", "ple_ensemble3")
DATASETS = ("credit_default", "adult")
FAIR_PAIRS = (("VFLHLP", TUNED), ("VFLHLP", LABEL_ALONE_TUNED), ("SS-VFL-I", TUNED), ("VFLHLP", "central XGBoost"))


def bench_report(folder: str, against: str | None = None, pairs: tuple[tuple[str, str], ...] = ()) -> Builder:
    """`vflflare bench report benchmarks/results/FOLDER [--against ...] [--paired ...]`."""

    def build() -> str:
        from vflflare.bench.report import report_text

        return report_text(COMMITTED / folder, COMMITTED / against if against else None, list(pairs))

    return build


for _name in ("grid_credit_default", "grid_adult", "default"):
    register(f"{LEADERBOARD}/{_name}", bench_report(f"{LEADERBOARD}/{_name}"))
register(f"{LEADERBOARD}/ple_ensemble3", bench_report(f"{LEADERBOARD}/ple_ensemble3", f"{LEADERBOARD}/default"))
for _change in CHANGES:
    for _dataset in DATASETS:
        if (COMMITTED / LEADERBOARD / f"{_change}_{_dataset}").is_dir():
            register(
                f"{LEADERBOARD}/{_change}_{_dataset}",
                bench_report(f"{LEADERBOARD}/{_change}_{_dataset}", f"{LEADERBOARD}/grid_{_dataset}"),
            )
register(f"{LEADERBOARD}/fair_trees", bench_report(f"{LEADERBOARD}/fair_trees", pairs=FAIR_PAIRS))
