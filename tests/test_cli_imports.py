"""`vflflare simulate` (and the other commands that run no algorithm) start without importing the plug-ins:
their imports (torch, scikit-learn, MONAI) took 5 s per command before the simulator even started."""

import subprocess
import sys

import pytest

PROBE = """
import sys
from vflflare import cli
try:
    cli.main([{command!r}, "--help"])
except SystemExit:
    pass
print(sorted(m for m in ("torch", "sklearn", "monai", "xgboost") if m in sys.modules))
"""


@pytest.mark.parametrize("command", ["simulate", "split", "check-data", "he-keys"])
def test_light_commands_import_no_plug_in(command):
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(command=command)], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip().splitlines()[-1] == "[]", out


def test_a_job_process_imports_no_monai_for_tables_and_no_pandas():
    """pandas (0.3-0.4 s per process) serves the embedded default and `vflflare split` only."""
    probe = (
        "import sys, vflflare.flare.executor, vflflare.flare.controller; "
        "print(sorted(m for m in ('monai', 'pandas', 'sklearn') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_the_controller_module_imports_nvflare_only():
    """NVFlare reports the server app started only once it has built the job's components, and the simulator
    starts the sites only then: the coordinator's torch and plug-in imports wait for start_controller."""
    probe = (
        "import sys, vflflare.flare.controller; "
        "print(sorted(m for m in ('torch', 'numpy', 'vflflare.registry') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
