"""`vflflare settings`: every setting of a job, read from the config dataclasses themselves: its name, its
default, the block that defines it (the shared JobConfig, a building block such as SplitNNSettings, or the
algorithm's own), and the comment written above it in the source. One source of truth: a setting added
with a comment appears here without anything else to update."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from functools import cache
from typing import Any


@cache
def field_comments(cls: type) -> dict[str, str]:
    """Field name -> the comment lines right above it (or at the end of its line) in `cls`'s own source."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    out = {}
    for node in ast.parse(source).body[0].body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above, row = [], node.lineno - 2
        while row >= 0 and lines[row].strip().startswith("#"):
            above.insert(0, lines[row].strip().lstrip("#").strip())
            row -= 1
        trailing = lines[node.lineno - 1].partition("  # ")[2]
        text = " ".join(above + ([trailing] if trailing else []))
        out[node.target.id] = text
    return out


def defined_by(config: type, name: str) -> type:
    """The class in `config`'s MRO whose own body declares the field `name`."""
    return next(c for c in config.__mro__ if name in c.__dict__.get("__annotations__", {}))


def settings(config: type) -> list[dict[str, Any]]:
    """Every init field of a config class: name, default, defining block, comment."""
    rows = []
    for f in dataclasses.fields(config):
        if not f.init:
            continue
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        )
        owner = defined_by(config, f.name)
        rows.append(
            {
                "name": f.name,
                "default": default,
                "block": owner.__name__,
                "meaning": field_comments(owner).get(f.name, ""),
            }
        )
    return rows


def markdown(config: type) -> str:
    """A Markdown table of `settings(config)`."""
    lines = ["| setting | default | block | meaning |", "|---|---|---|---|"]
    for row in settings(config):
        default = repr(row["default"]).replace("|", "\\|")
        lines.append(f"| `{row['name']}` | `{default}` | {row['block']} | {row['meaning'].replace('|', '/')} |")
    return "\n".join(lines)
