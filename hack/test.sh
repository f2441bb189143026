#!/usr/bin/env bash
# The full test suite, as CI runs it: lint, format check, strict typing, then pytest.
# Arguments go to pytest, e.g. `bash hack/test.sh -m "not cluster"` or `-k crd`.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
venv=$(bash hack/python-env.sh)
export PATH="$venv/bin:$PATH"
# Caches that outlive the checkout: a fresh CI clone re-checks only what changed
# (mypy's analysis of the google-cloud and kubernetes stubs alone takes minutes).
cache=${DWS_CACHE_DIR:-$HOME/.cache/dws-operator}
export MYPY_CACHE_DIR="$cache/mypy" RUFF_CACHE_DIR="$cache/ruff"

step() { printf '\n== %s\n' "$*"; }

step "ruff check"
ruff check .
step "ruff format --check"
ruff format --check .
step "mypy --strict (operator/)"
mypy
needs_cluster=yes
for arg in "$@"; do
  [ "$arg" = "not cluster" ] && needs_cluster=no
done
if [ "$needs_cluster" = yes ] && [ -z "${DWS_K8S_BIN_DIR:-}" ]; then
  # Built once from the Go modules pinned in hack/versions.env (about 10.5 minutes on
  # 2 cores, Kueue's manager included; JobSet's controller adds about 1 and Prometheus
  # about 4, measured 2026-11-26), then reused from ~/.cache/dws-operator/bin/ in well
  # under a second.
  step "Kubernetes binaries"
  bash hack/k8s-binaries.sh all >/dev/null
fi

step "pytest"
# Four files at a time on two cores (pytest-xdist; each worker starts its own session
# clusters): the cluster tests mostly wait on servers and simulated clocks. Warm CI on
# this 2-core machine (clean clone, `.ci/run`): two workers 11 min 24 s; three 9 min 17 s
# to 9 min 44 s, about 1.05 cores busy; four 7 min 49 s, 1.4 cores (at 651cf44).
# DWS_TEST_WORKERS=0 runs everything in this process.
pytest --numprocesses="${DWS_TEST_WORKERS:-4}" --dist loadfile --no-loadscope-reorder --durations=15 "$@"

# The lower bounds of pyproject.toml (hack/lower-bounds.sh: every dependency at the lowest
# version it allows, and the tests that exercise those libraries run on them; about 1 min
# 50 s on 2 cores), on the full run only, and only when pyproject.toml or that script changed
# since the bounds last passed on this machine, so a warm CI run without a dependency change
# spends nothing on them. A change of the tests or the code alone does not run them again: a
# test needing a newer library than a bound allows is caught at the next dependency change.
if [ "$#" -eq 0 ]; then
  key=$(cat pyproject.toml hack/lower-bounds.sh | sha256sum | cut -c1-16)
  if [ ! -f "$cache/lower-bounds-passed-$key" ]; then
    step "lower bounds (pyproject.toml changed)"
    bash hack/lower-bounds.sh
    rm -f "$cache"/lower-bounds-passed-*
    touch "$cache/lower-bounds-passed-$key"
  fi
fi
