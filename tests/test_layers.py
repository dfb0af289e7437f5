"""The package's layers point one way (ARCHITECTURE.md, Layers), checked by import-linter on every import
statement, those inside functions included. The plug-in layer is read from the registry, so a new built-in
algorithm is held to the contract without editing this file, and `exhaustive` makes a new top-level module or
package fail until it is given a layer."""

from __future__ import annotations

from pathlib import Path

from importlinter.cli import lint_imports

from vflflare.registry import BUILT_IN

# highest first; "a | b": a and b may not import each other ("a : b": they may; plug-ins build on each other)
LAYERS = [
    "cli",
    "bench",  # tools on top of everything below; benchmarks measure attacks too
    "attacks",
    "simulation : jobs : poc",  # running jobs: NVFlare's simulator, job folders, a local POC
    "recipes",
    "flare",  # NVFlare adapters
    "results",
    "algorithms",  # plug-ins over their blocks (second contract)
    "protocol",
    "privacy",  # defense mechanisms, CKKS, DP accounting
    "models | ssl",
    "registry",  # a leaf the plug-ins register into: every layer above may look one up
    "config",
    "data",
    "code_identity | metrics | seeding | settings_reference | staging | torch_runtime | tracking | user_paths | wire",
]


def contracts() -> str:
    plugins = sorted({module.rsplit(".", 1)[1] for module in BUILT_IN})
    layer_lines = "\n".join(f"    {layer}" for layer in LAYERS)
    return f"""[importlinter]
root_package = vflflare
exclude_type_checking_imports = True

[importlinter:contract:layers]
name = data -> models -> privacy -> protocol -> algorithms -> flare -> tools
type = layers
containers = vflflare
exhaustive = True
layers =
{layer_lines}

[importlinter:contract:plugins]
name = plug-ins -> the plug-in interface -> blocks
type = layers
containers = vflflare.algorithms
exhaustive = True
layers =
    {" : ".join(plugins)}
    plugin
    blocks
"""


def test_no_module_imports_a_layer_above_its_own(tmp_path: Path) -> None:
    config = tmp_path / "importlinter.ini"
    config.write_text(contracts())
    assert lint_imports(config_filename=str(config), no_cache=True) == 0, "see the broken contract above"
