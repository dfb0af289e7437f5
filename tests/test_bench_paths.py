"""Issue 41 item 6: benchmark scripts that run anywhere. Every suite reads its data folder from `--data-dir` or
VFLFLARE_DATA_DIR only (an error naming both when it needs one and has neither), and writes to `--out` or a
scratch folder, never to the committed records unless `--committed` is given."""

from __future__ import annotations

import ast
import dataclasses
import re

import pytest

from vflflare import cli
from vflflare.bench.paths import BENCHMARKS, COMMITTED, DATA_DIR_ENV, REPO, DataDirError, resolve_data_dir
from vflflare.bench.suite import SUITES, resolve_run, suites

BENCH = REPO / "custom" / "vflflare" / "bench"
SCANNED = sorted([*BENCH.glob("*.py"), *BENCH.glob("suites/*.py"), *BENCH.glob("probes/*.py")]) + sorted(
    p for p in (REPO / "scripts").glob("*.py")
)
# a string that names a data folder of some checkout or machine: ../anything, an absolute path of two or more parts
# outside /tmp, or a shared/data folder however it is joined
DATA_PATH = re.compile(r"(^|/)\.\./|^/(?!tmp/|proc/)[\w.-]+/|(^|/)shared/data\b")  # /proc: the kernel, not data
# what writes a file, and the module constants that point into the committed records or the reports
WRITERS = {"append_jsonl", "write_text", "write_bytes", "savefig", "to_csv", "mkdir", "copy", "copyfile", "rmtree"}
COMMITTED_NAMES = {"COMMITTED", "BENCHMARKS", "RESULTS", "CREDIT_RESULTS", "MNIST_RESULTS", "PLOT", "MNIST_PLOT"}


def docstring_nodes(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


@pytest.mark.parametrize("path", SCANNED, ids=lambda p: str(p.relative_to(REPO)))
def test_no_bench_module_hard_codes_a_data_path(path):
    """No string outside docstrings names a data folder, no shared/data is joined from parts, and only paths.py
    reads VFLFLARE_DATA_DIR."""
    source = path.read_text()
    tree = ast.parse(source)
    skip = docstring_nodes(tree)
    strings = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    bad = [n.value for n in strings if id(n) not in skip and DATA_PATH.search(n.value)]
    assert not bad, f"{path.name}: hard-coded paths {bad}: take the data folder the runner is given"
    joined = [
        ast.unparse(n)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Call, ast.BinOp))
        and {"shared", "data"} <= {c.value for c in ast.walk(n) if isinstance(c, ast.Constant)}
    ]
    assert not joined, f"{path.name}: a shared/data folder joined from parts: {joined}"
    if path.name != "paths.py":
        assert DATA_DIR_ENV not in source.replace(f"${DATA_DIR_ENV}", ""), (
            f"{path.name} reads {DATA_DIR_ENV} itself: use paths.resolve_data_dir"
        )


@pytest.mark.parametrize("path", sorted(BENCH.glob("suites/*.py")), ids=lambda p: p.name)
def test_no_suite_writes_to_the_committed_records_directly(path):
    """A suite writes where its runner is told (`out`): a write whose target names the committed records or the
    reports' folder (COMMITTED, BENCHMARKS and the constants built from them) is a write nobody asked for."""
    tree = ast.parse(path.read_text())
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if func in WRITERS:
            target = node.func.value if isinstance(node.func, ast.Attribute) and func != "copy" else None
            parts = ([target] if target is not None else []) + list(node.args[:2])
            if any(names_in(part) & COMMITTED_NAMES for part in parts):
                bad.append(ast.unparse(node))
    assert not bad, f"{path.name} writes to committed paths: {bad}"


@pytest.fixture
def no_data_env(monkeypatch):
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)


def test_the_data_folder_comes_from_data_dir_or_the_environment(tmp_path, monkeypatch, no_data_env):
    with pytest.raises(DataDirError) as error:
        resolve_data_dir(None)
    message = str(error.value)
    assert "--data-dir" in message and DATA_DIR_ENV in message, message
    assert resolve_data_dir(None, required=False) is None
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    assert resolve_data_dir(None) == tmp_path.resolve()
    given = tmp_path / "given"
    given.mkdir()
    assert resolve_data_dir(given) == given.resolve()  # --data-dir wins over the environment
    with pytest.raises(DataDirError, match=rf"{tmp_path / 'absent'} \(--data-dir\) is not a folder"):
        resolve_data_dir(tmp_path / "absent")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "gone"))
    with pytest.raises(DataDirError, match=rf"\({DATA_DIR_ENV}\) is not a folder"):
        resolve_data_dir(None)


def test_every_suite_resolves_its_data_folder_and_its_records_path(tmp_path, monkeypatch, no_data_env):
    """For every suite as `vflflare bench run NAME` resolves it: without --data-dir and VFLFLARE_DATA_DIR it
    either stops (it needs data) or gets None (built-in datasets only), never a guessed folder; with either it
    gets that folder; it writes to its scratch path or --out, never under benchmarks/ unless --committed."""
    for name, spec in suites().items():
        try:
            folder = resolve_run(spec)[1]
        except DataDirError as error:
            assert "--data-dir" in str(error) and DATA_DIR_ENV in str(error)
        else:
            assert folder is None, (name, folder)
        assert not spec.scratch().resolve().is_relative_to(REPO), (name, spec.scratch())
        monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
        assert resolve_run(spec)[1] in (tmp_path.resolve(), None)
        assert resolve_run(spec, data_dir=tmp_path)[1] == tmp_path.resolve()
        assert resolve_run(spec, out=tmp_path / "r.jsonl")[0] == tmp_path / "r.jsonl"
        if spec.records:
            assert resolve_run(spec, committed=True)[0].is_relative_to(COMMITTED)
        monkeypatch.delenv(DATA_DIR_ENV)


def test_bench_run_stops_before_running_when_no_data_folder_is_named(tmp_path, monkeypatch, capsys, no_data_env):
    """The command line: `vflflare bench run wan` with neither --data-dir nor VFLFLARE_DATA_DIR runs nothing and
    says what to give; with --data-dir the runner gets it and a scratch records path."""
    ran = []
    spec = suites()["wan"]
    monkeypatch.setitem(SUITES, "wan", dataclasses.replace(spec, runner=lambda *args: ran.append(args)))
    monkeypatch.setattr("vflflare.bench.suite.SCRATCH", tmp_path / "scratch")
    assert cli.main(["bench", "run", "wan", "--methods", "oneshot"]) == 1
    err = capsys.readouterr().err
    assert "--data-dir" in err and DATA_DIR_ENV in err and not ran, err
    assert cli.main(["bench", "run", "wan", "--methods", "oneshot", "--data-dir", str(tmp_path)]) == 0
    ((_, out, folder),) = ran
    assert folder == tmp_path.resolve() and out == tmp_path / "scratch" / "wan" / "wan.jsonl"
    assert not out.is_relative_to(BENCHMARKS)


def test_the_grid_needs_a_data_folder_only_for_datasets_read_from_files(no_data_env):
    from vflflare.bench.grid import BenchSpec

    BenchSpec(datasets=["breast_cancer"]).check()
    with pytest.raises(DataDirError, match="--data-dir"):
        BenchSpec(datasets=["credit_default"]).check()
