"""Issue 40: the joining suite's tables (LEADERBOARD.md, "Does joining pay"): a cell says "pays" or "loses"
only where every seed's interval agrees, and a run not done shows as "-". Pure table logic: no run."""

from __future__ import annotations

from vflflare.bench.suites import joining


def record(method: str, overlap: int, seed: int, gain: float, low: float, high: float, blend: float) -> dict:
    alone = 0.75
    return {
        "dataset": "credit_default",
        "overlap": overlap,
        "seed": seed,
        "method": method,
        "federated": alone + gain,
        "alone": {
            "model": "trees",
            "rows": 100,
            "candidates": {"trees": {"val_auc": 0.7, "test_auc": alone}, "neural": {"val_auc": 0.6, "test_auc": 0.7}},
            "test_auc": alone,
        },
        "gain": gain,
        "interval": [gain + low, gain + high],
        "blend": {"federated_share": 0.5, "test_auc": blend},
    }


def test_a_verdict_needs_every_seed_and_its_interval():
    assert joining.verdict([[0.01, 0.03]] * 3) == "pays"
    assert joining.verdict([[-0.03, -0.01]] * 3) == "loses"
    assert joining.verdict([[0.01, 0.03], [0.01, 0.03], [-0.01, 0.03]]) == ""
    assert joining.verdict([[0.01, 0.03]] * 2) == ""  # a seed missing: no verdict


def test_the_tables_mark_the_verdicts_and_the_missing_runs():
    records = [record("vanilla", 500, s, 0.02, -0.01, 0.01, 0.77) for s in joining.SEEDS]
    records += [record("FedBCD", 500, s, g, -0.01, 0.01, 0.74) for s, g in zip(joining.SEEDS, (-0.05, -0.04, 0.005))]
    gain = joining.gain_table(records, "credit_default").splitlines()
    assert gain[2] == "| **label party alone**: test AUC | 0.750 (0.750, 0.750, 0.750) | - | - |"
    vanilla = next(line for line in gain if line.startswith("| vanilla |"))
    assert vanilla == "| vanilla | +0.020 (+0.020↑, +0.020↑, +0.020↑) **pays** | - | - |"
    fedbcd = next(line for line in gain if line.startswith("| FedBCD |"))
    assert fedbcd == "| FedBCD | -0.040 (-0.050↓, -0.040↓, +0.005) | - | - |"
    assert next(line for line in gain if line.startswith("| FedHSSL |")) == "| FedHSSL | - | - | - |"
    blend = joining.blend_table(records, "credit_default").splitlines()
    assert blend[-1] == "| **runs whose blend is below alone** | 3 of 6 (worst -0.010) | - | - |"
