#!/usr/bin/env bash
# Checks the lower bounds in pyproject.toml: installs every runtime and workshop
# dependency at exactly the lowest version it allows (`>=X` becomes `==X`; the dev tools
# at their pins) in a fresh virtualenv, and runs the unit tests, the GKE client against
# the emulator, and the operator process against a real API server there. A bound that
# is too low fails here instead of on a user's machine.
#
#   bash hack/lower-bounds.sh            # about 3 minutes once the wheels are cached
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${DWS_CACHE_DIR:-$HOME/.cache/dws-operator}
python=${PYTHON:-python3}
venv="$cache/venv/lower-bounds"

rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip "setuptools>=77" wheel
"$venv/bin/python" - "$root/pyproject.toml" >"$venv/requirements.txt" <<'PY'
import re, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
optional = project["optional-dependencies"]
for requirement in project["dependencies"] + optional["workshop"]:
    # The lowest version allowed, exactly; an upper bound (",<3") goes with it.
    print(re.sub(r">=([^,;\s]+).*", r"==\1", requirement))
print("\n".join(optional["dev"]))
PY
echo "lower bounds:" >&2
grep -v '^#' "$venv/requirements.txt" | sed 's/^/  /' >&2
"$venv/bin/python" -m pip install --quiet -r "$venv/requirements.txt"
"$venv/bin/python" -m pip install --quiet --no-deps --no-build-isolation -e "$root"

cd "$root"
export PYTHONPATH="$root/operator"
"$venv/bin/python" -m pytest -q -p no:randomly -n 2 --dist loadfile \
  tests/unit tests/gke tests/cluster/operator/test_run_command.py \
  tests/cluster/test_kube_transport.py tests/cluster/test_leader_election.py
