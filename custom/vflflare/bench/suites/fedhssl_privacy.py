"""FedHSSL's privacy evaluation (He et al., Section VI, Tables VI and VII), on credit default.

Party 1 (site-1) owns the labels and is the active party; party 2 (site-2) is the adversary. It runs the
model-completion (MC) attack (attacks/model_completion.py): a logistic-regression inference head on its
own trained bottom model, fitted on AUX_ROWS = 80 auxiliary labeled rows (the first 80 aligned labeled
rows: it knows their IDs, and we give it their labels), then scored on the test rows.

- Pretraining (Table VI): the attack on party 2's model right after pretraining. A_SimSiam is the attack
  on plain local SimSiam (the FedLocalSSL variant): the adversary's prior. A_FedHSSL is the attack after
  FedHSSL-SimSiam pretraining, without ISO and with ISO on party 1's z_c and PMA contribution
  (lambda_p in {1, 5, 25}); the main task metric is that run's after finetuning on 200 labeled rows.
- Finetuning (Table VII): party 1 adds ISO to the gradients it sends party 2 (lambda_f in {1, 5, 25}) while
  finetuning FedSplitNN, FedLocalSSL and FedHSSL; the attack runs on party 2's finetuned model.
  CAP (Eq. 8) = mean over lambda_f of test AUC x (1 - MC accuracy).

Same setting as the fedhssl suite: 40 % aligned, 200 labeled training rows + 50 validation rows.

    vflflare bench run fedhssl_privacy --committed --set job='{"global_iterations": 10}'
    vflflare bench tables                        # FEDHSSL_REPORT.md section 5 from the committed records
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from vflflare.attacks.model_completion import AUX_ROWS, cap, model_completion_attack
from vflflare.bench.inprocess import limit_threads, run_vfl
from vflflare.bench.paths import COMMITTED
from vflflare.bench.provenance import environment_record
from vflflare.bench.records import append_jsonl, read_jsonl, refuse_mixed_settings
from vflflare.bench.splits import prepare_split
from vflflare.bench.suite import Suite, suite
from vflflare.bench.suites.fedhssl import ALIGNED_SHARE, labeled_fraction
from vflflare.bench.tables import register
from vflflare.data.sources import load_source
from vflflare.protocol.site_runtime import SiteRuntime
from vflflare.registry import make_config

RESULTS = COMMITTED / "fedhssl_privacy.jsonl"  # compact records: numbers and settings
SPLITS = Path("/tmp/vflflare-bench/fedhssl-splits")
SITES, ACTIVE, ADVERSARY = ["site-1", "site-2"], "site-1", "site-2"
LABELED = 200
STRENGTHS = [1.0, 5.0, 25.0]
VARIANTS = {"FedSplitNN": "fedsplitnn", "FedLocalSimSiam": "fedlocalssl", "FedHSSL-SimSiam": "fedhssl"}


class AttackedRuntime(SiteRuntime):
    """The adversary's runtime: keeps its representations of the auxiliary and test rows when
    finetuning starts (the end of pretraining). Nothing leaves the site for this: the adversary reads its
    own model."""

    pretrained: dict[str, np.ndarray] | None = None

    def handle(self, task: str, payload: dict[str, Any]) -> dict[str, Any]:
        if task == "split" and self.pretrained is None and self.site == ADVERSARY:
            self.pretrained = self.party.representations(["aligned", "test"])
        return super().handle(task, payload)


def attack(reps: dict[str, np.ndarray], labels: dict[str, np.ndarray], seed: int) -> dict[str, float]:
    return model_completion_attack(
        reps["aligned"][:AUX_ROWS], labels["aligned"][:AUX_ROWS], reps["test"], labels["test"], seed
    )


def run_one(
    method: str, lambda_p: float, lambda_f: float, seed: int, overrides: dict, data_dir: Path, splits: Path
) -> dict[str, Any]:
    n_rows = len(load_source("credit_default", data_dir)[2])
    overlap = int(round(ALIGNED_SHARE * n_rows))
    root = prepare_split(data_dir, overlap, seed, splits, "credit_default", len(SITES), label_owner=ACTIVE)
    cfg = make_config(
        {
            **overrides,
            "algorithm": "fedhssl",
            "variant": VARIANTS[method],
            "seed": seed,
            "label_owner": ACTIVE,
            "labeled_fraction": labeled_fraction(LABELED, overlap),
            "iso_pretrain": lambda_p,
            "iso_gradients": lambda_f,
        }
    )
    start = time.perf_counter()
    result, runtimes = run_vfl(cfg, root, AttackedRuntime, SITES)
    if "error" in result:
        raise RuntimeError(f"{method} seed {seed}: {result['error']}")
    label = runtimes[ACTIVE].label
    labels = {part: label.part_labels(part).numpy() for part in ("aligned", "test")}
    adversary = runtimes[ADVERSARY]
    final = adversary.party.representations(["aligned", "test"])
    return {
        "method": method,
        "lambda_p": lambda_p,
        "lambda_f": lambda_f,
        "seed": seed,
        "overrides": overrides,
        "metrics": result["metrics"],
        "rows": result["rows"],
        "mc_pretrained": attack(adversary.pretrained, labels, seed) if VARIANTS[method] != "fedsplitnn" else None,
        "mc_finetuned": attack(final, labels, seed),
        "majority": float(max(np.mean(labels["test"]), 1 - np.mean(labels["test"]))),
        "wall_s": round(time.perf_counter() - start, 1),
        "env": environment_record(),
    }


def plan() -> list[tuple[str, float, float]]:
    runs = [("FedLocalSimSiam", 0.0, 0.0), ("FedHSSL-SimSiam", 0.0, 0.0), ("FedSplitNN", 0.0, 0.0)]
    runs += [("FedHSSL-SimSiam", lp, 0.0) for lp in STRENGTHS]
    runs += [(m, 0.0, lf) for m in VARIANTS for lf in STRENGTHS]
    return runs


def tables(records: list[dict]) -> str:
    failed = [r for r in records if "error" in r]
    records = [r for r in records if "error" not in r]
    by: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        by[(r["method"], r["lambda_p"], r["lambda_f"])].append(r)

    def value(r: dict, key: str) -> float:
        if key == "auc":
            return r["metrics"]["test_auc"]
        stage, _, measure = key.partition(":")
        return r[stage][measure]

    def med(rs: list[dict], key: str) -> str:
        values = [value(r, key) for r in rs]
        return f"{np.median(values):.3f} ({', '.join(f'{v:.3f}' for v in values)})" if values else "-"

    seeds = sorted({r["seed"] for r in records})
    out = [
        f"Seeds {seeds}; medians (per seed). MC = label recovery accuracy of the model-completion attack "
        f"({AUX_ROWS} auxiliary rows); majority-class rate {np.median([r['majority'] for r in records]):.3f}.",
        "",
        "Pretraining attack (Table VI):",
        "",
        "| model attacked | lambda_p | MC accuracy | MC AUC | main task test AUC |",
        "|---|---|---|---|---|",
        f"| A_SimSiam (local SimSiam) | - | {med(by[('FedLocalSimSiam', 0.0, 0.0)], 'mc_pretrained:accuracy')} | "
        f"{med(by[('FedLocalSimSiam', 0.0, 0.0)], 'mc_pretrained:auc')} | "
        f"{med(by[('FedLocalSimSiam', 0.0, 0.0)], 'auc')} |",
    ]
    for lp in [0.0, *STRENGTHS]:
        rs = by[("FedHSSL-SimSiam", lp, 0.0)]
        out.append(
            f"| A_FedHSSL | {lp:g} | {med(rs, 'mc_pretrained:accuracy')} | {med(rs, 'mc_pretrained:auc')} | "
            f"{med(rs, 'auc')} |"
        )
    out += [
        "",
        "Finetuning attack with ISO on party 1's gradients (Table VII):",
        "",
        "| method | lambda_f | test AUC | MC accuracy | MC AUC |",
        "|---|---|---|---|---|",
    ]
    caps = []
    for method in VARIANTS:
        for lf in [0.0, *STRENGTHS]:
            rs = by[(method, 0.0, lf)]
            out.append(
                f"| {method} | {lf:g} | {med(rs, 'auc')} | {med(rs, 'mc_finetuned:accuracy')} | "
                f"{med(rs, 'mc_finetuned:auc')} |"
            )
        per_seed = []
        for seed in seeds:
            pairs = [next((r for r in by[(method, 0.0, lf)] if r["seed"] == seed), None) for lf in STRENGTHS]
            if all(pairs):
                per_seed.append(
                    cap([r["metrics"]["test_auc"] for r in pairs], [r["mc_finetuned"]["accuracy"] for r in pairs])
                )
        caps.append(
            f"| {method} | "
            + (f"{np.median(per_seed):.3f} ({', '.join(f'{c:.3f}' for c in per_seed)})" if per_seed else "-")
            + " |"
        )
    out += [
        "",
        "CAP over lambda_f in {1, 5, 25} (Eq. 8, higher is better):",
        "",
        "| method | CAP |",
        "|---|---|",
        *caps,
    ]
    out += (
        ["", "Runs that ended with an error:"]
        + [
            f"- seed {r['seed']} {r['method']} lambda_p {r['lambda_p']:g} lambda_f {r['lambda_f']:g}: "
            f"{r['error'][-200:]}"
            for r in failed
        ]
        if failed
        else []
    )
    return "\n".join(out)


def _runs(records: list[dict]) -> dict[tuple, list[dict]]:
    by: dict[tuple, list[dict]] = defaultdict(list)
    for r in sorted(records, key=lambda r: r["seed"]):
        by[(r["method"], r["lambda_p"], r["lambda_f"])].append(r)
    return by


def _per_seed(values: list[float]) -> str:
    return f"{np.median(values):.3f} ({', '.join(f'{v:.3f}' for v in values)})"


def table_vi(records: list[dict]) -> str:
    """FEDHSSL_REPORT section 5, the paper's Table VI: model completion on the adversary's pretrained model,
    against ISO lambda_p on party 1's pretraining uploads; a strength whose every run diverged says so."""
    by = _runs(records)
    out = ["| model attacked | lambda_p | MC accuracy | MC AUC | main task test AUC |", "|---|---|---|---|---|"]
    for label, key in [
        ("A_SimSiam (local SimSiam, the prior)", ("FedLocalSimSiam", 0.0, 0.0)),
        *(("A_FedHSSL", ("FedHSSL-SimSiam", lp, 0.0)) for lp in [0.0, *STRENGTHS]),
    ]:
        ok = [r for r in by[key] if "error" not in r]
        lp = "-" if key[0] == "FedLocalSimSiam" else f"{key[1]:g}"
        if not ok:
            out.append(f"| {label} | {lp} | every seed diverged | | |")
            continue
        out.append(
            f"| {label} | {lp} | {_per_seed([r['mc_pretrained']['accuracy'] for r in ok])} | "
            f"{_per_seed([r['mc_pretrained']['auc'] for r in ok])} | "
            f"{np.median([r['metrics']['test_auc'] for r in ok]):.3f} |"
        )
    return "\n".join(out)


def table_vii(records: list[dict]) -> str:
    """Section 5, the paper's Table VII: per lambda_f on party 1's gradients, test AUC, then MC accuracy /
    MC AUC on the adversary's finetuned model (medians); CAP (Eq. 8) over lambda_f in STRENGTHS per seed."""
    by = _runs(records)
    methods = list(VARIANTS)
    out = ["| lambda_f | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for lf in [0.0, *STRENGTHS]:
        cells = []
        for m in methods:
            ok = [r for r in by[(m, 0.0, lf)] if "error" not in r]
            cells.append(
                f"{np.median([r['metrics']['test_auc'] for r in ok]):.3f}, "
                f"{np.median([r['mc_finetuned']['accuracy'] for r in ok]):.3f} / "
                f"{np.median([r['mc_finetuned']['auc'] for r in ok]):.3f}"
                if ok
                else "diverged"
            )
        out.append(f"| {lf:g} | " + " | ".join(cells) + " |")
    caps = []
    for m in methods:
        per_seed = []
        for seed in sorted({r["seed"] for r in records}):
            runs = [
                next((r for r in by[(m, 0.0, lf)] if r["seed"] == seed and "error" not in r), None) for lf in STRENGTHS
            ]
            if all(runs):
                per_seed.append(
                    cap([r["metrics"]["test_auc"] for r in runs], [r["mc_finetuned"]["accuracy"] for r in runs])
                )
        caps.append(_per_seed(per_seed) if per_seed else "-")
    out.append(
        f"| **CAP** (Eq. 8, lambda_f in {{{', '.join(f'{v:g}' for v in STRENGTHS)}}}) | " + " | ".join(caps) + " |"
    )
    return "\n".join(out)


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    """Every (seed, method, lambda_p, lambda_f) of the plan for the spec's methods not yet in `out`; a run the
    noise made diverge is recorded with its error."""
    limit_threads()
    overrides = dict(spec.settings["job"])
    refuse_mixed_settings(out, overrides)
    done = {(r["method"], r["lambda_p"], r["lambda_f"], r["seed"]) for r in read_jsonl(out)}
    for seed in spec.seeds:
        for method, lp, lf in plan():
            if method not in spec.methods or (method, lp, lf, seed) in done:
                continue
            try:
                record = run_one(method, lp, lf, seed, overrides, data_dir, SPLITS)
            except (RuntimeError, FloatingPointError) as error:  # a run the noise made diverge: its site ended the job
                append_jsonl(
                    out,
                    {
                        "method": method,
                        "lambda_p": lp,
                        "lambda_f": lf,
                        "seed": seed,
                        "overrides": overrides,
                        "error": str(error),
                        "env": environment_record(),
                    },
                )
                print(f"seed {seed} {method} lambda_p {lp:g} lambda_f {lf:g}: failed: {error}", flush=True)
                continue
            append_jsonl(out, record)
            print(
                f"seed {seed} {method} lambda_p {lp:g} lambda_f {lf:g}: test AUC "
                f"{record['metrics']['test_auc']:.4f}, "
                f"MC pretrained {record['mc_pretrained']}, finetuned {record['mc_finetuned']}, "
                f"{record['wall_s']} s",
                flush=True,
            )
    print(tables(read_jsonl(out)))


register("fedhssl/privacy_vi", lambda: table_vi(read_jsonl(RESULTS)))
register("fedhssl/privacy_vii", lambda: table_vii(read_jsonl(RESULTS)))

suite(
    Suite(
        name="fedhssl_privacy",
        about="FedHSSL's privacy evaluation: model completion against ISO, the paper's Tables VI and VII "
        "(FEDHSSL_REPORT.md)",
        runner=run,
        datasets=("credit_default",),
        methods=tuple(VARIANTS),
        seeds=(0, 1, 2),
        settings={"job": {}},  # config overrides (all runs); a file holds runs of one setting
        records="fedhssl_privacy.jsonl",
    )
)
