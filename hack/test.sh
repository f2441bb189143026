#!/usr/bin/env bash
# The full test suite, as CI runs it: lint, format check, strict typing, then pytest.
# Arguments go to pytest, e.g. `bash hack/test.sh -m "not cluster"` or `-k crd`.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
venv=$(bash hack/python-env.sh)
export PATH="$venv/bin:$PATH"

step() { printf '\n== %s\n' "$*"; }

step "ruff check"
ruff check .
step "ruff format --check"
ruff format --check .
step "mypy --strict (operator/)"
mypy
step "pytest"
pytest "$@"
