"""Same seed and data, same numbers (issue 10, item 7): metrics to 1e-6 and identical communication
(counts, payload and wire bytes) when run twice in process; another seed moves them. The simulator
gives the in-process numbers exactly: tests/test_simulator_jobs.py checks it for one-shot (label
party at the server) and few-shot with fine-tuning (label party at a site)."""

from __future__ import annotations

import pytest

from vflflare.protocol.inprocess import run_inprocess
from vflflare.registry import make_config

SITES = ["site-1", "site-2"]
SETTINGS = {"algorithm": "fewshot", "ssl_epochs": 2, "classifier_epochs": 20, "label_owner": "site-2"}


def fingerprint(results: dict) -> tuple[dict, dict]:
    """Metrics, and per site uploads, downloads, payload and wire bytes."""
    assert "error" not in results, results.get("error")
    return results["metrics"], results["communication"]["per_site"]


def assert_same(a: dict, b: dict) -> None:
    (metrics_a, comm_a), (metrics_b, comm_b) = fingerprint(a), fingerprint(b)
    assert metrics_a.keys() == metrics_b.keys()
    for name in metrics_a:
        assert metrics_a[name] == pytest.approx(metrics_b[name], abs=1e-6), name
    assert comm_a == comm_b


def test_in_process_runs_repeat_exactly():
    first = run_inprocess(make_config(SETTINGS), SITES, None)
    assert_same(first, run_inprocess(make_config(SETTINGS), SITES, None))
    other = run_inprocess(make_config({**SETTINGS, "seed": 1}), SITES, None)
    assert other["metrics"] != first["metrics"]
