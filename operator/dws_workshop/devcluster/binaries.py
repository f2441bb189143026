"""Where the control-plane binaries come from.

In order: `DWS_K8S_BIN_DIR` (every binary from there), `KUBEBUILDER_ASSETS` (the
envtest convention: kube-apiserver, etcd and kubectl), then the pinned versions
built from Go modules by `hack/k8s-binaries.sh` into ~/.cache/dws-operator/bin/.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

ENVTEST_BINARIES = frozenset({"kube-apiserver", "etcd", "kubectl"})
BUILD_SCRIPT = Path("hack") / "k8s-binaries.sh"


class MissingBinaries(RuntimeError):
    """A binary the control plane needs is not there and cannot be built."""


def source_root() -> Path | None:
    """The checkout this package runs from, if any (the build script lives there)."""
    for parent in Path(__file__).resolve().parents:
        if (parent / BUILD_SCRIPT).is_file():
            return parent
    return None


def pinned_versions() -> dict[str, str]:
    """hack/versions.env as a mapping (KEY=value lines, # comments)."""
    root = source_root()
    if root is None:
        return {}
    versions: dict[str, str] = {}
    for raw in (root / "hack" / "versions.env").read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            versions[key] = value
    return versions


def _executable(directory: Path, name: str, source: str) -> Path:
    path = directory / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise MissingBinaries(
            f"{name} not found in {source}={directory}; put it there, or unset {source} to use "
            f"the pinned build (bash hack/k8s-binaries.sh)"
        )
    return path


def built_dir(targets: Iterable[str], build: bool = True) -> Path:
    """The pinned build directory, building `targets` that are missing when `build`."""
    root = source_root()
    if root is None:
        raise MissingBinaries(
            "no Kubernetes binaries: this installation has no hack/k8s-binaries.sh; set "
            "DWS_K8S_BIN_DIR (or KUBEBUILDER_ASSETS) to a directory with kube-apiserver, etcd "
            "and kubectl"
        )
    argv = ["bash", str(root / BUILD_SCRIPT)]
    argv += list(targets) if build else ["--print-dir"]
    result = subprocess.run(
        argv,
        stdout=subprocess.PIPE,
        stderr=None if build else subprocess.PIPE,
        text=True,
        check=False,
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise MissingBinaries(
            f"building {' '.join(targets)} with {BUILD_SCRIPT} failed (exit {result.returncode}); "
            "see its message above"
        )
    return Path(lines[-1])


def find_binaries(names: Iterable[str], build: bool = True) -> dict[str, Path]:
    """Paths of the named binaries; builds the pinned ones on first use when `build`."""
    wanted = list(dict.fromkeys(names))
    override = os.environ.get("DWS_K8S_BIN_DIR")
    if override:
        return {n: _executable(Path(override), n, "DWS_K8S_BIN_DIR") for n in wanted}
    found: dict[str, Path] = {}
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        for name in wanted:
            if name in ENVTEST_BINARIES:
                found[name] = _executable(Path(assets), name, "KUBEBUILDER_ASSETS")
    rest = [n for n in wanted if n not in found]
    if rest:
        directory = built_dir(rest, build=False)
        if build and not all((directory / n).is_file() for n in rest):
            print(f"dws-operator: building {' '.join(rest)} (first run only)", file=sys.stderr)
            directory = built_dir(rest, build=True)
        for name in rest:
            path = directory / name
            if not path.is_file():
                raise MissingBinaries(
                    f"{name} is not built in {directory}; run: bash hack/k8s-binaries.sh {name}"
                )
            found[name] = path
    return found


def third_party_crds(kind: str) -> list[Path]:
    """The CRD files of `kind` (kueue, jobset, provisioningrequest) taken from the pinned
    Go modules."""
    override = os.environ.get("DWS_K8S_BIN_DIR")
    base = Path(override) if override else built_dir(["crds"], build=False)
    directory = base / "crds" / kind
    if not directory.is_dir() and not override:
        directory = built_dir(["crds"], build=True) / "crds" / kind
    files = sorted(directory.glob("*.yaml"))
    if not files:
        raise MissingBinaries(f"no {kind} CRDs in {directory}; run: bash hack/k8s-binaries.sh crds")
    return files
