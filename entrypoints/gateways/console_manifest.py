"""The web console's built bundle and the sources it was built from: `console_dist/manifest.json`
records a digest of `console/`'s sources and of each built file, so a test (no Node.js needed)
fails when the sources changed and the bundle was not rebuilt (`./dev console-build`), or
a built file was edited by hand. Run as a module, it writes the manifest after a build."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import orjson

DIST = Path(__file__).resolve().parent / "console_dist"
SOURCES = Path(__file__).resolve().parents[2] / "console"
MANIFEST = "manifest.json"
# What the bundle is built from; component tests (*.test.ts[x]) are not part of it.
SOURCE_FILES = ("package.json", "package-lock.json", "index.html", "vite.config.ts", "tsconfig.json")
SOURCE_DIRS = ("src", "public")


def source_files(root: Path = SOURCES) -> list[Path]:
    found = [root / name for name in SOURCE_FILES if (root / name).is_file()]
    for folder in SOURCE_DIRS:
        found += [path for path in (root / folder).rglob("*") if path.is_file() and ".test." not in path.name]
    return sorted(found)


def sources_digest(root: Path = SOURCES) -> str:
    """One SHA-256 over each source's path (relative, '/'-separated) and content."""
    digest = hashlib.sha256()
    for path in source_files(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def built_files(dist: Path = DIST) -> dict[str, str]:
    """Each built file (the manifest aside) and its SHA-256."""
    return {path.relative_to(dist).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(dist.rglob("*")) if path.is_file() and path.name != MANIFEST}


def manifest(dist: Path = DIST) -> dict[str, object]:
    return dict(orjson.loads((dist / MANIFEST).read_bytes()))


def write_manifest(dist: Path = DIST, root: Path = SOURCES) -> dict[str, object]:
    written: dict[str, object] = {"sources": sources_digest(root), "files": built_files(dist)}
    (dist / MANIFEST).write_bytes(orjson.dumps(written, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    return written


if __name__ == "__main__":
    written = write_manifest()
    print(f"console bundle: {len(written['files'])} files, sources {str(written['sources'])[:12]}", file=sys.stderr)  # type: ignore[arg-type]
