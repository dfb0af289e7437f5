"""The results table shows each site's counted uploads/downloads next to what its algorithm expects."""

from __future__ import annotations

import copy

from vflflare.protocol.inprocess import run_inprocess
from vflflare.registry import make_config
from vflflare.results import format_table


def site_line(table: str, site: str) -> str:
    return next(line for line in table.splitlines() if line.strip().startswith(f"site {site}"))


def test_expected_communications_in_the_table():
    results = run_inprocess(make_config(algorithm="oneshot", ssl_epochs=1), ["site-1", "site-2"], None)
    table = format_table(results)
    assert "expected by the algorithm" in table
    assert site_line(table, "site-1").split()[2:4] == ["2", "1"]
    assert site_line(table, "site-1").endswith("2/1")
    assert "MISMATCH" not in table

    broken = copy.deepcopy(results)
    broken["communication"]["per_site"]["site-2"]["uploads"] = 3
    assert site_line(format_table(broken), "site-2").endswith("2/1  MISMATCH")
