"""The web console's committed bundle matches its sources (no Node.js needed): rebuild with
`./dev console-build` after changing console/, never edit console_dist/ by hand."""

from __future__ import annotations

import re
from pathlib import Path

from entrypoints.gateways.console_manifest import DIST, SOURCES, built_files, manifest, source_files, sources_digest

MAX_FILE = 1024 * 1024  # bytes: no tracked file over 1 MB


def test_the_bundle_was_built_from_the_sources_as_they_are() -> None:
    recorded = manifest()
    assert recorded["sources"] == sources_digest(), (
        "console/ changed since the bundle was built: run ./dev console-build and commit entrypoints/gateways/console_dist")
    assert recorded["files"] == built_files(), "a built file differs from the one the manifest records: rebuild, do not edit"


def test_the_digest_covers_the_sources_and_not_the_component_tests(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "package.json").write_text("{}")
    (tmp_path / "src" / "App.tsx").write_text("export const a = 1;")
    (tmp_path / "src" / "App.test.tsx").write_text("test")
    before = sources_digest(tmp_path)
    (tmp_path / "src" / "App.test.tsx").write_text("another test")
    assert sources_digest(tmp_path) == before
    (tmp_path / "src" / "App.tsx").write_text("export const a = 2;")
    assert sources_digest(tmp_path) != before
    assert [p.name for p in source_files(tmp_path)] == ["package.json", "App.tsx"]
    assert any(path.name == "package-lock.json" for path in source_files(SOURCES))


def test_every_built_file_is_small_and_the_page_loads_nothing_from_another_host() -> None:
    for name in built_files():
        assert (DIST / name).stat().st_size < MAX_FILE, name
    page = (DIST / "index.html").read_text()
    assert not re.search(r"""(src|href)=["'](https?:)?//""", page)
    assert "<script>" not in page  # no inline script: the Content-Security-Policy allows 'self' only
