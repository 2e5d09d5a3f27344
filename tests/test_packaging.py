"""Packaging: pyproject.toml gives the ranges the library accepts, constraints.txt the exact versions that
./build.sh installs, and the two agree (pure Python, no install)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version and not re.search(r"[<>=!~;,\s]", version), f"not an exact pin: {line!r}"
            pins[canonicalize_name(name)] = version
    return pins


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    listed = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return [Requirement(r) for r in listed]


def test_every_dependency_is_a_range_and_pinned_within_it():
    pins = _pins()
    for requirement in _requirements():
        assert not any(s.operator in ("==", "===") for s in requirement.specifier), \
            f"{requirement}: pyproject.toml gives ranges; the exact version goes into constraints.txt"
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} has no pin in constraints.txt"
        assert requirement.specifier.contains(pins[name], prereleases=True), \
            f"constraints.txt pins {requirement.name}=={pins[name]}, outside {requirement.specifier}"


def test_build_sh_installs_with_the_constraints_and_the_pinned_delta_jars():
    script = (ROOT / "build.sh").read_text(encoding="utf-8")
    installs = [line for line in script.splitlines() if re.search(r"pip install\b", line)]
    assert installs and all("-c constraints.txt" in line for line in installs), installs
    (delta_jars,) = re.findall(r'^DELTA_VERSION="([^"]+)"', script, re.M)
    assert _pins()["delta-spark"] == delta_jars, "the delta-spark package and the Delta jars differ in version"
