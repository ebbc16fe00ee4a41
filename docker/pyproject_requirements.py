"""Print the project's runtime requirements (and chosen extras) from pyproject.toml, one per line.

Used by the Dockerfiles to install the dependencies in their own layer, before the source is copied,
so editing code does not reinstall them. Standard library only (runs on a bare python image).

    python pyproject_requirements.py pyproject.toml [EXTRA ...] > requirements.txt

noida-db (the embedded broker behind ``pulsar-txn standalone`` / ``demo`` and the test suite) ships an
x86_64 Linux wheel only, so it gets a ``platform_machine`` marker: on arm64 images it is skipped and
only ``standalone`` / ``demo`` are unavailable; ``coordinator`` and the client never need it.
"""

from __future__ import annotations

import re
import sys
import tomllib

# requirement name (normalised) -> environment marker it is installed under
_MARKERS = {"noida-db": 'platform_machine == "x86_64"'}


def _name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise SystemExit(f"cannot read a package name from {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def requirements(pyproject: str, extras: list[str]) -> list[str]:
    with open(pyproject, "rb") as f:
        project = tomllib.load(f)["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise SystemExit(f"unknown extra(s) {unknown}; pyproject.toml has {sorted(optional)}")
    out: list[str] = []
    for req in [*project.get("dependencies", []), *(r for e in extras for r in optional[e])]:
        marker = _MARKERS.get(_name(req))
        if marker is not None:
            spec, _, existing = req.partition(";")
            both = f"({existing.strip()}) and ({marker})" if existing else marker
            req = f"{spec.strip()} ; {both}"
        out.append(req)
    return out


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    print("\n".join(requirements(sys.argv[1], sys.argv[2:])))
