#!/usr/bin/env bash
# Prints the path of a virtualenv with dws-operator's development dependencies,
# creating it under ~/.cache/dws-operator/venv/ when missing (keyed by the Python
# version and a hash of pyproject.toml, so a dependency change gets a fresh one; the
# operator's runtime dependencies at the versions of requirements.lock), and
# (re)installs this checkout into it in editable mode (no network, about 2 s).
#
# `hack/python-env.sh operator` does the same for a virtualenv with the operator's
# runtime dependencies only, as its image has them: the benchmark and the chaos run
# start the operator from it, so it runs without the workshop's libraries.
#
# Of each kind, the three venvs used last are kept (hack/prune-venvs.sh).
set -euo pipefail

kind=${1:-dev}
case "$kind" in
  dev) extras='["workshop", "dev"]' ;;
  operator) extras='[]' ;;
  *) echo "usage: $0 [dev|operator]" >&2; exit 2 ;;
esac

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${DWS_CACHE_DIR:-$HOME/.cache/dws-operator}
python=${PYTHON:-python3}

if ! command -v "$python" >/dev/null 2>&1; then
  echo "dws-operator: $python not found; install Python >= 3.11 or set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "dws-operator: $("$python" --version 2>&1) is too old; Python >= 3.11 is required (set PYTHON=...)" >&2
  exit 1
fi

py_version=$("$python" -c 'import sys; print("py%d%d" % sys.version_info[:2])')
deps_hash=$(sha256sum "$root/pyproject.toml" | cut -c1-12)
venv="$cache/venv/$py_version-$deps_hash"
[ "$kind" = dev ] || venv="$venv-$kind"

if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.complete" ]; then
  echo "dws-operator: creating $venv (first run only)" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip "setuptools>=77" wheel >&2
  # Dependencies only; the project itself is linked below, at every run, so a
  # cached venv always points at the checkout being tested.
  "$venv/bin/python" - "$root/pyproject.toml" "$extras" >"$venv/requirements.txt" <<'PY'
import json, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
extras = [r for e in json.loads(sys.argv[2]) for r in project["optional-dependencies"][e]]
print("\n".join(project["dependencies"] + extras))
PY
  # The operator's runtime dependencies at requirements.lock's versions (hack/lock.sh wrote
  # it from a venv made here): a fresh machine tests what the image ships. When the lock no
  # longer fits pyproject.toml (a bound raised past a pin), the venv is resolved without it
  # and tests/unit/test_requirements_lock.py says to run hack/lock.sh.
  sed -n 's/^\([A-Za-z0-9][A-Za-z0-9._-]*==[^ ;]*\).*/\1/p' "$root/requirements.lock" \
    >"$venv/constraints.txt" 2>/dev/null || : >"$venv/constraints.txt"
  if ! "$venv/bin/python" -m pip install --quiet -r "$venv/requirements.txt" \
    -c "$venv/constraints.txt" >&2; then
    echo "dws-operator: requirements.lock conflicts with pyproject.toml; resolving without it (then run hack/lock.sh)" >&2
    "$venv/bin/python" -m pip install --quiet -r "$venv/requirements.txt" >&2
  fi
  touch "$venv/.complete"
fi

touch "$venv/.used"
suffix=""
[ "$kind" = dev ] || suffix="-$kind"
bash "$root/hack/prune-venvs.sh" "$(dirname "$venv")" "$suffix"

"$venv/bin/python" -m pip install --quiet --no-deps --no-build-isolation -e "$root" >&2
echo "$venv"
