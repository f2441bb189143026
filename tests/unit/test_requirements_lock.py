"""requirements.lock, which the image installs with `pip --require-hashes`, is the operator's
runtime closure as tested: every [project] dependency of pyproject.toml is in it within its
bounds, every pin carries hashes, and its packages and versions are exactly those the tested
virtualenv (this one) installed for those dependencies. Any failure: run `bash hack/lock.sh`."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
REGENERATE = "requirements.lock is stale: run `bash hack/lock.sh`"


def runtime_requirements() -> list[Requirement]:
    """pyproject.toml's [project] dependencies: what the operator's wheel requires."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"]]


def locked() -> dict[str, tuple[str, list[str]]]:
    """The lock's pins: canonical name -> (version, sha256 hashes)."""
    pins: dict[str, tuple[str, list[str]]] = {}
    current: list[str] | None = None
    for line in LOCK.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.startswith(" "):
            match = re.fullmatch(r"\s+--hash=sha256:([0-9a-f]{64})( \\)?", line)
            assert match, f"not a hash: {line!r}"
            assert current is not None, f"a hash before any pin: {line!r}"
            current.append(match.group(1))
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+) \\", line)
        assert match, f"not an exact pin followed by its hashes: {line!r}"
        name = canonicalize_name(match.group(1))
        assert name not in pins, f"{name} is pinned twice"
        current = []
        pins[name] = (match.group(2), current)
    return pins


def installed_closure(requirements: list[Requirement]) -> dict[str, str]:
    """What `requirements` pull in, as installed in this interpreter's environment:
    canonical name -> installed version, following each distribution's requirements (with
    the extras asked for) whose markers hold here, the image's platform."""
    found: dict[str, str] = {}
    expanded: set[tuple[str, str]] = set()
    pending = [(r, {""}) for r in requirements]
    while pending:
        requirement, extras = pending.pop()
        marker = requirement.marker
        if marker is not None and not any(marker.evaluate({"extra": e}) for e in extras):
            continue
        name = canonicalize_name(requirement.name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
            continue
        found[name] = dist.version
        asked = {"", *requirement.extras}
        if all((name, e) in expanded for e in asked):
            continue
        expanded.update((name, e) for e in asked)
        pending += [(Requirement(r), asked) for r in dist.requires or []]
    return found


def test_every_runtime_dependency_is_locked_within_its_bounds() -> None:
    pins = locked()
    for requirement in runtime_requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement} is not in the lock; {REGENERATE}"
        version = pins[name][0]
        assert requirement.specifier.contains(Version(version), prereleases=True), (
            f"the lock pins {name}=={version}, outside {requirement}; {REGENERATE}"
        )


def test_every_pin_is_exact_and_hashed() -> None:
    pins = locked()
    assert pins, "the lock pins nothing"
    assert [name for name, (_, hashes) in pins.items() if not hashes] == []


def test_the_lock_is_the_tested_runtime_closure() -> None:
    """Same packages (none missing, none left over) at the versions installed here."""
    tested = installed_closure(runtime_requirements())
    pins = {name: version for name, (version, _) in locked().items()}
    missing = {n: v for n, v in tested.items() if n not in pins}
    extra = sorted(set(pins) - set(tested))
    differ = {n: (pins[n], v) for n, v in tested.items() if n in pins and pins[n] != v}
    assert (missing, extra, differ) == ({}, [], {}), (
        f"missing from the lock: {missing}; locked but not required: {extra}; "
        f"(locked, tested) versions that differ: {differ}; {REGENERATE}"
    )
