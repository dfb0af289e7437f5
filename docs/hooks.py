"""MkDocs hooks for vflflare's documentation site (mkdocs.yml):

- the pages written next to the code (README.md as the home page, benchmarks/*.md, poc/, provisioning/,
  examples/, ARCHITECTURE.md) join the site where they are, so one copy of each exists and links between
  them resolve; their links into docs/ are rewritten to the site's pages;
- docs/settings.md's `<!-- settings -->` becomes the table of every setting of every algorithm, read from
  the config dataclasses (vflflare.settings_reference), so the reference cannot fall behind the code.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

OUTSIDE = (
    "README.md",
    "ARCHITECTURE.md",
    "benchmarks/*.md",
    "benchmarks/*.png",
    "poc/README.md",
    "provisioning/README.md",
    "examples/README.md",
    "examples/*/README.md",
)


def on_files(files, config):
    root = Path(config.config_file_path).parent
    for pattern in OUTSIDE:
        for path in sorted(root.glob(pattern)):
            files.append(File(str(path.relative_to(root)), str(root), config.site_dir, config.use_directory_urls))
    return files


DOCS_LINK = re.compile(r"\]\(((?:\.\./)*)docs/")


def on_page_markdown(markdown, page, config, files):
    if not page.file.abs_src_path.startswith(config.docs_dir):  # a page from beside the code
        return DOCS_LINK.sub(r"](\1", markdown)  # its links into docs/ point at the site's pages
    if "<!-- settings -->" not in markdown:
        return markdown
    from vflflare.registry import algorithms, get_algorithm
    from vflflare.settings_reference import markdown as settings_table

    sections = [f"## `{name}`\n\n{settings_table(get_algorithm(name).Config)}\n" for name in sorted(algorithms())]
    return markdown.replace("<!-- settings -->", "\n".join(sections))
