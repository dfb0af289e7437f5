"""Issue 14 item 3: `vflflare bench` runs algorithms and baselines on a grid and writes the leaderboard
(Markdown, CSV, plots); a tiny configuration, as CI runs it. NVFlare's vertical XGBoost (its own recipe,
simulator) grows the trees central XGBoost grows at the same settings; the simulator mode gives the
in-process numbers."""

from __future__ import annotations

import csv
import json

import pytest

from vflflare import cli
from vflflare.bench import baselines

QUICK = ["--set", "split_epochs=3", "--set", "ssl_epochs=3"]


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    methods = [
        "vanilla",
        "one-shot",
        "vertical XGBoost (NVFlare)",
        "central XGBoost",
        "central LR",
        "label party alone (XGBoost, aligned rows)",
        "label party alone (XGBoost, all its labels)",
    ]
    leaderboard = out / "LEADERBOARD.md"
    with pytest.MonkeyPatch.context() as patch:
        # NVFlare's vertical XGBoost costs about a second a round on CI: the central XGBoost chooses from 8
        patch.setattr(baselines, "MAX_ROUNDS", 8)
        code = _bench(methods, out, leaderboard)
    assert code == 0
    records = [json.loads(line) for line in (out / "run" / "results.jsonl").read_text().splitlines()]
    return out, {r["method"]: r for r in records}, leaderboard.read_text()


def _bench(methods, out, leaderboard):
    return cli.main(
        [
            "bench",
            "--datasets",
            "breast_cancer",
            "--overlaps",
            "150",
            "--seeds",
            "0",
            "--methods",
            *methods,
            *QUICK,
            "--out",
            str(out / "run"),
            "--leaderboard",
            str(leaderboard),
        ]
    )


def test_the_leaderboard_has_every_method_and_its_files(bench):
    out, records, table = bench
    assert len(records) == 7
    for method in records:
        assert f"| {method} | " in table
    with (out / "run" / "leaderboard.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 7
    png = out / "run" / "leaderboard_breast_cancer.png"
    assert png.stat().st_size > 10_000
    # one-shot: 2 up + 1 down per site; the label-owning site-1 also relays site-2's (3 up + 3 down)
    assert records["one-shot"]["comms_per_site"] == 6
    assert records["central XGBoost"]["mb_per_site"] is None  # not federated: no traffic column


def test_every_method_scores_well_on_the_easy_table(bench):
    _, records, _ = bench
    for method, record in records.items():
        assert record["metrics"]["test_auc"] >= 0.9, (method, record["metrics"])
    alone = records["label party alone (XGBoost, all its labels)"]["training"]["train_rows"]
    assert alone > records["label party alone (XGBoost, aligned rows)"]["training"]["train_rows"] == 120


def test_vertical_xgboost_grows_the_central_trees(bench):
    """Without encryption, vertical XGBoost is lossless: same depth and rounds, same test AUC."""
    _, records, _ = bench
    vertical, central = records["vertical XGBoost (NVFlare)"], records["central XGBoost"]
    assert vertical["training"]["depth"] == central["training"]["depth"]
    assert vertical["training"]["rounds"] == central["training"]["rounds"]
    assert vertical["metrics"]["test_auc"] == pytest.approx(central["metrics"]["test_auc"], abs=1e-4)


@pytest.mark.simulator
def test_the_simulator_mode_gives_the_in_process_numbers(bench, tmp_path):
    _, records, _ = bench
    assert (
        cli.main(
            [
                "bench",
                "--datasets",
                "breast_cancer",
                "--overlaps",
                "150",
                "--seeds",
                "0",
                "--methods",
                "vanilla",
                "--set",
                "split_epochs=3",
                "--sim",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    sim = json.loads((tmp_path / "results.jsonl").read_text().splitlines()[0])
    assert sim["sim"] and sim["metrics"] == pytest.approx(records["vanilla"]["metrics"], abs=1e-6)
    assert sim["comms_per_site"] == records["vanilla"]["comms_per_site"]


def test_a_setting_no_method_has_is_an_error(tmp_path):
    with pytest.raises(ValueError, match=r"no method of this bench has the settings \['ssl_epochs'\]"):
        cli.main(
            [
                "--debug",
                "bench",
                "--datasets",
                "breast_cancer",
                "--methods",
                "vanilla",
                "--set",
                "ssl_epochs=3",
                "--out",
                str(tmp_path),
            ]
        )


def test_difference_pairs_runs_seed_by_seed():
    from vflflare.bench.report import difference

    def record(seed: int, auc: float) -> dict:
        return {"dataset": "d", "overlap": 500, "seed": seed, "method": "vanilla", "metrics": {"test_auc": auc}}

    base = [record(0, 0.70), record(1, 0.72), record(2, 0.74)]
    changed = [record(0, 0.71), record(1, 0.70), record(2, 0.78)]
    assert "| vanilla | +0.010 (2/3) |" in difference(changed, base)


def test_an_ensemble_averages_its_members_scores():
    from vflflare.bench.grid import ensemble_metric

    truth = {"a": 0, "b": 1, "c": 1}
    sure, wrong = {"a": [0.2], "b": [0.8]}, {"a": [0.9], "b": [0.1], "c": [0.9]}  # AUC 1 and 0 on a, b
    assert ensemble_metric([sure, wrong], truth, 2) == ("auc", 0.0)  # means 0.55 vs 0.45: the wrong one wins
    assert ensemble_metric([sure, sure], truth, 2) == ("auc", 1.0)  # c, unscored by one member, is left out
    three = [{"a": [0.5, 0.3, 0.2]}, {"a": [0.1, 0.1, 0.8]}]  # mean (0.3, 0.2, 0.5): class 2, wrong for a
    assert ensemble_metric(three, {"a": 0}, 3) == ("accuracy", 0.0)


def test_bench_ensemble_runs_members_and_sums_their_traffic(tmp_path):
    code = cli.main(
        [
            "bench",
            "--datasets",
            "breast_cancer",
            "--overlaps",
            "150",
            "--seeds",
            "0",
            "--methods",
            "one-shot",
            "--ensemble",
            "2",
            "--set",
            "ssl_epochs=3",
            "--out",
            str(tmp_path / "run"),
        ]
    )
    assert code == 0
    record = json.loads((tmp_path / "run" / "results.jsonl").read_text())
    assert len(record["members"]) == 2 and record["members"][0] != record["members"][1]  # two job seeds
    assert record["comms_per_site"] == 12  # twice one-shot's 6
    assert record["metrics"]["test_auc"] >= 0.9


def test_every_record_says_how_it_was_made(bench):
    """Issue 26: a committed record is enough to rerun it and to tell it from another machine's."""
    _, records, _ = bench
    one_shot, central = records["one-shot"], records["central XGBoost"]
    assert one_shot["settings"] == {"split_epochs": 3, "ssl_epochs": 3} and one_shot["ensemble"] == 1
    assert one_shot["job"] == {"algorithm": "oneshot", "ssl_epochs": 3}  # the settings this method has
    assert central["job"] == {} and central["job_seeds"] == [0] and one_shot["sites"] == 2
    assert len(one_shot["git"]["commit"]) == 40 and isinstance(one_shot["git"]["dirty"], bool)
    assert {"python", "torch", "nvflare", "xgboost", "platform", "cpus"} <= set(one_shot["env"])


def test_a_rerun_with_other_settings_is_an_error_naming_them(bench):
    out, records, _ = bench
    settings = (out / "run" / "bench.json").read_text()
    with pytest.raises(ValueError) as error:  # refused before any run: the folder keeps its settings
        cli.main(
            [
                "--debug",
                "bench",
                "--datasets",
                "breast_cancer",
                "--overlaps",
                "150",
                "--seeds",
                "0",
                "--methods",
                "one-shot",
                "--set",
                "ssl_epochs=4",
                "--ensemble",
                "2",
                "--out",
                str(out / "run"),
            ]
        )
    assert str(error.value) == (
        f"{out / 'run' / 'bench.json'}: this folder holds runs made with other settings, and a rerun would mix "
        "them under one table: --ensemble: 1 there, 2 now; --set split_epochs: 3 there, unset now; "
        "--set ssl_epochs: 3 there, 4 now. Use another --out, or the folder's settings."
    )
    assert (out / "run" / "bench.json").read_text() == settings
    assert len((out / "run" / "results.jsonl").read_text().splitlines()) == len(records)


def test_a_folder_with_runs_and_no_settings_is_refused(tmp_path):
    (tmp_path / "results.jsonl").write_text('{"dataset": "breast_cancer"}\n')
    with pytest.raises(ValueError, match="holds runs but no bench.json: their settings are unknown"):
        cli.main(["--debug", "bench", "--datasets", "breast_cancer", "--methods", "central LR", "--out", str(tmp_path)])


def test_report_rebuilds_the_tables_from_results_alone(bench, tmp_path, capsys):
    out, _, table = bench
    capsys.readouterr()
    assert cli.main(["bench", "report", str(out / "run"), "--out", str(tmp_path / "report.md")]) == 0
    assert (tmp_path / "report.md").read_text() == table
    assert capsys.readouterr().out == table + "\n"
    assert table.startswith(
        "### breast_cancer: test AUC, median over seeds 0 (per seed); --set split_epochs=3, --set ssl_epochs=3\n"
    )


def test_old_records_without_settings_still_read():
    from vflflare.bench.report import markdown

    old = {
        "dataset": "d",
        "overlap": 500,
        "seed": 0,
        "method": "vanilla",
        "metrics": {"test_auc": 0.7},
        "mb_per_site": 1.0,
        "comms_per_site": 10,
        "wall_s": 1.0,
        "sim": False,
        "env": {"python": "3.11.7", "torch": "2.13.0+cpu", "machine": "x86_64"},
    }
    assert markdown([old]) == (
        "### d: test AUC, median over seeds 0 (per seed); settings not recorded\n\n"
        "| method | N_o = 500 | MB per site | communications per site |\n|---|---|---|---|\n"
        "| vanilla | 0.700 (0.700) | 1.00-1.00 | 10-10 |\n\n"
        "Commit not recorded. Environment: python 3.11.7, torch 2.13.0+cpu; x86_64.\n"
    )


def test_tree_baselines_get_the_ensemble_and_each_member_its_own_validation_rows(tmp_path):
    """Issue 26 item 3: under --ensemble the trees are treated as the VFL methods are: a member per job seed,
    trained and tuned (TUNED_GRID) on that seed's training and validation rows, test scores averaged."""
    import numpy as np
    from sklearn.metrics import roc_auc_score

    from vflflare.bench.baselines import TUNED_GRID, AlignedSplit, central, fit_xgboost
    from vflflare.bench.grid import BenchSpec

    tuned = "central XGBoost, tuned"
    code = cli.main(
        [
            "bench",
            "--datasets",
            "breast_cancer",
            "--overlaps",
            "150",
            "--seeds",
            "0",
            "--methods",
            tuned,
            "--ensemble",
            "2",
            "--out",
            str(tmp_path / "run"),
        ]
    )
    assert code == 0
    record = json.loads((tmp_path / "run" / "results.jsonl").read_text())
    assert record["job_seeds"] == [0, 1000]
    assert BenchSpec(ensemble=2).job_seeds("vertical XGBoost (NVFlare)", 0) == [0]  # one simulator run
    root = next((tmp_path / "run" / "splits").iterdir())
    members = {}
    for job_seed in (0, 1000):
        split = AlignedSplit.load(root, ["site-1", "site-2"], "site-1", job_seed, 0.2)
        members[job_seed] = (split, central(split, fit_xgboost, job_seed, grid=TUNED_GRID))
    assert set(members[0][0].val_ids) != set(members[1000][0].val_ids)  # each member its own validation rows
    assert record["training"]["members"] == [
        {k: m[k] for k in ("depth", "learning_rate", "min_child_weight", "rounds")} for _, m in members.values()
    ]
    split = members[0][0]
    mean = np.mean(
        [[dict(zip(s.test_ids, m["test_scores"]))[i] for i in split.test_ids] for s, m in members.values()], axis=0
    )
    assert record["metrics"]["test_auc"] == pytest.approx(
        roc_auc_score(split.y(split.test_ids, "test"), mean), abs=1e-12
    )


def test_paired_comparison_reads_per_seed_differences_and_a_bootstrap_interval():
    from vflflare.bench.report import bootstrap_interval, paired

    def record(method: str, seed: int, auc: float) -> dict:
        return {"dataset": "d", "overlap": 500, "seed": seed, "method": method, "metrics": {"test_auc": auc}}

    ahead = [record("VFLHLP", s, 0.75 + 0.01 * s) for s in range(5)] + [
        record("trees", s, 0.74 + 0.01 * s) for s in range(5)
    ]
    text = paired(ahead, "VFLHLP", "trees")
    assert (
        "| 500 | 0, 1, 2, 3, 4 | +0.010, +0.010, +0.010, +0.010, +0.010 | +0.010 | 5/5 | +0.010 [+0.010, +0.010] "
        "| VFLHLP beats |" in text
    )
    mixed = [record("VFLHLP", s, 0.75 + d) for s, d in enumerate((0.02, -0.03, 0.01, -0.01, 0.0))] + [
        record("trees", s, 0.75) for s in range(5)
    ]
    assert "| 2/5 |" in paired(mixed, "VFLHLP", "trees") and "VFLHLP matches" in paired(mixed, "VFLHLP", "trees")
    low, high = bootstrap_interval([0.02, -0.03, 0.01, -0.01, 0.0])
    assert -0.03 < low < -0.002 < 0.0 < high < 0.02 and bootstrap_interval([0.02, -0.03, 0.01]) == bootstrap_interval(
        [0.02, -0.03, 0.01]
    )


def test_a_suite_runs_into_a_scratch_folder_unless_told(tmp_path, monkeypatch):
    """Issue 39 item 1: `vflflare bench run SUITE` never writes the committed records unless asked."""
    from vflflare.bench import suite

    monkeypatch.setattr(suite, "SCRATCH", tmp_path / "scratch")
    args = ["bench", "run", "leaderboard", "--datasets", "breast_cancer", "--methods", "central LR"]
    assert cli.main([*args, "--seeds", "0", "--set", "overlaps=[150]", "--set", "workers=1"]) == 0
    records = [
        json.loads(line)
        for line in (tmp_path / "scratch/leaderboard/leaderboard/grid_breast_cancer/results.jsonl")
        .read_text()
        .splitlines()
    ]
    assert [(r["method"], r["overlap"], r["seed"]) for r in records] == [("central LR", 150, 0)]


def test_a_suite_refuses_settings_and_methods_it_does_not_have():
    from vflflare.bench.suite import suites

    with pytest.raises(ValueError, match=r"unknown methods \['nope'\] or settings \['epochs'\]"):
        suites()["leaderboard"].chosen(methods=["nope"], settings={"epochs": 1})


def test_every_suite_is_listed_and_its_committed_records_are_there(capsys):
    """Issue 39 item 1: `vflflare bench run --list` names every suite module's spec; a suite's committed
    records (where it has its own) stay readable at the path the spec names."""
    from vflflare.bench import suites as modules
    from vflflare.bench.paths import COMMITTED
    from vflflare.bench.suite import suites

    assert cli.main(["bench", "run", "--list"]) == 0
    listed = capsys.readouterr().out
    known = suites()
    assert set(known) >= set(modules.load())  # each suite module holds a suite of its own name
    for name, spec in known.items():
        assert listed.count(f"\n{name}: ") + listed.startswith(f"{name}: ") == 1, name
        if spec.records:
            assert (COMMITTED / spec.records).exists(), (name, spec.records)


def test_wan_moved_separates_what_the_link_added_from_the_base_run():
    """WAN_REPORT's per-connection → per-site table: on a link other than the base, what the link added is each
    run's wall less its own base run's, so a slower machine (base +2 s) does not read as a slower link."""
    from vflflare.bench.suites.wan import moved

    def run(link, job_s):
        return {"method": "vanilla", "link": link, "job_s": job_s}

    before = [run("0/1000", 8.0), run("20/100", 25.0)]
    after = [run("0/1000", 10.0), run("20/100", 26.0), {**run("20/100", 99.0), "jitter_ms": 2.0}]
    lines = moved(before, after).splitlines()
    assert lines[0] == "| method | 0 ms, 1000 Mbit/s | 20 ms, 100 Mbit/s |"
    assert lines[2] == "| vanilla | 8.0 → 10.0 (+2.0) | 25.0 → 26.0 (+1.0); link 17.0 → 16.0 |"
    assert moved(before, []) == "| pending |\n|---|"
    # a link rerun on a second, slower machine with its own base run: set against that one
    second = {"env": {"platform": "B"}}
    after = [*after, {**run("0/1000", 13.0), **second}, {**run("20/1000", 30.0), **second}]
    before.append(run("20/1000", 24.0))
    assert moved(before, after).splitlines()[2] == (
        "| vanilla | 8.0 → 10.0 (+2.0) | 24.0 → 30.0 (+6.0); link 16.0 → 17.0 | 25.0 → 26.0 (+1.0); link 17.0 → 16.0 |"
    )
