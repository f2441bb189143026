#!/usr/bin/env bash
# Checks the lower bounds in pyproject.toml: resolves every runtime, workshop and test
# dependency to the lowest version its bound allows (uv's `lowest-direct` resolution),
# installs that in a fresh virtualenv and runs there the tests that exercise those
# libraries: the unit tests, the GKE client against the emulator, the Kubernetes
# transport and leader election against a real API server, and the operator process.
# A bound that is too low fails here instead of on a user's machine.
#
#   bash hack/lower-bounds.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${DWS_CACHE_DIR:-$HOME/.cache/dws-operator}
dev=$(bash "$root/hack/python-env.sh")
venv="$cache/venv/lower-bounds"

"$dev/bin/python" - "$root/pyproject.toml" >"$cache/lower-bounds.txt" <<'PY'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
optional = project["optional-dependencies"]
tests = [
    r for r in optional["dev"] if r.split(">")[0] in ("pytest", "pytest-xdist", "hypothesis", "lupa")
]
print("\n".join(project["dependencies"] + optional["workshop"] + tests))
PY
rm -rf "$venv"
"$dev/bin/uv" venv --quiet --python "$dev/bin/python" "$venv"
"$dev/bin/uv" pip install --quiet --python "$venv/bin/python" --resolution lowest-direct \
  -r "$cache/lower-bounds.txt"
"$dev/bin/uv" pip install --quiet --python "$venv/bin/python" --no-deps -e "$root"
echo "lowest versions resolved:" >&2
"$dev/bin/uv" pip freeze --python "$venv/bin/python" | grep -v "^-e" | sed 's/^/  /' >&2

cd "$root"
"$venv/bin/python" -m pytest -q -p no:randomly -n 2 --dist loadfile \
  tests/unit tests/gke tests/cluster/test_kube_transport.py \
  tests/cluster/test_leader_election.py tests/cluster/operator/test_login.py \
  --deselect tests/unit/test_product_shape.py::test_the_wheel_carries_the_operator_and_not_the_workshop \
  --deselect tests/unit/test_packaging_files.py::test_dockerfile_lints_clean \
  --deselect tests/unit/test_requirements_lock.py::test_the_lock_is_the_tested_runtime_closure
# (the first two build the wheel with pip and lint with hadolint: tools, not libraries; the
# third compares requirements.lock with the tested versions, which these are not)
