"""`vflflare settings`: every setting of every algorithm, from the config dataclasses, each with its default
and the comment it is declared with; a setting added without one fails here."""

from __future__ import annotations

import pytest

from vflflare import cli
from vflflare.registry import algorithms, get_algorithm
from vflflare.settings_reference import settings

BUILT_IN = sorted(name for name, plugin in algorithms().items() if plugin.__module__.startswith("vflflare."))


@pytest.mark.parametrize("algorithm", BUILT_IN)
def test_every_setting_says_what_it_does(algorithm):
    rows = settings(get_algorithm(algorithm).Config)
    undocumented = [f"{r['block']}.{r['name']}" for r in rows if not r["meaning"]]
    assert not undocumented, f"settings without a comment where they are declared: {undocumented}"


def test_the_table_names_block_default_and_meaning(capsys):
    assert cli.main(["settings", "--algorithm", "fedbcd"]) == 0
    out = capsys.readouterr().out
    assert (
        "| `local_steps` | `5` | FedBCDConfig | Q (the one-shot paper's baseline setting) |" in out
    )  # its own default
    assert "| `gradient_marvell` | `0.0` | DefenseSettings | Marvell (Li et al. 2022)" in out
    assert "`global_iterations`" not in out  # FedHSSL's, not FedBCD's
