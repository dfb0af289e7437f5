"""The parts of an NVFlare engine that vflflare's filters and site config read, for tests that call them
without a running job: a workspace whose startup kit and site config folders are given."""

from __future__ import annotations

from pathlib import Path


class FakeWorkspace:
    def __init__(self, startup: str | Path | None = None, site_config: str | Path | None = None) -> None:
        self.startup, self.site_config = str(startup), str(site_config)

    def get_startup_kit_dir(self) -> str:
        return self.startup

    def get_site_config_dir(self) -> str:
        return self.site_config


class FakeEngine:
    def __init__(self, startup: str | Path | None = None, site_config: str | Path | None = None) -> None:
        self.workspace = FakeWorkspace(startup, site_config)

    def get_workspace(self) -> FakeWorkspace:
        return self.workspace


class FakeContext:
    """Just enough of an FLContext for `site_config` readers: its engine."""

    def __init__(self, site_config: str | Path) -> None:
        self.engine = FakeEngine(site_config=site_config)

    def get_engine(self) -> FakeEngine:
        return self.engine
