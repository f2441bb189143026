#!/usr/bin/env bash
# Writes requirements.lock, which the Dockerfile installs with `pip --require-hashes`: the
# operator's runtime dependencies (pyproject.toml's [project] dependencies, not its extras)
# and everything they pull in on the image's platform, each at the version installed in the
# tested virtualenv (hack/python-env.sh's, where hack/test.sh runs the suite), with the
# sha256 of every file PyPI has for that version. The image therefore ships the versions the
# tests ran against. Run it after changing [project] dependencies:
#
#   bash hack/lock.sh
#
# tests/unit/test_requirements_lock.py fails until it is run: a dependency missing from the
# lock, a pin outside a bound, or a pin other than the tested virtualenv's version.
# hack/python-env.sh installs new virtualenvs with the lock's versions as constraints, so a
# fresh CI machine tests the same versions.
#
# DWS_VENV=/path/to/venv reads that virtualenv instead of hack/python-env.sh's (which also
# re-installs this checkout into it). Needs PyPI (the hashes come from its index).
set -euo pipefail

PROG=hack/lock.sh
die() { printf '%s: %s\n' "$PROG" "$*" >&2; exit 1; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${DWS_VENV:-$(bash "$root/hack/python-env.sh")}
[[ -x $venv/bin/python && -x $venv/bin/uv ]] || die "$venv is not hack/python-env.sh's virtualenv (no python or uv)"

# The image's Python (the Dockerfile's base tag) decides which versions and markers apply;
# the tested virtualenv must run the same minor version, or its versions were not tested
# there.
base=$(sed -n 's/^ARG BASE=python:\([0-9.]*\)-.*$/\1/p' "$root/Dockerfile" | head -1)
[[ $base =~ ^3\.[0-9]+\.[0-9]+$ ]] || die "no ARG BASE=python:3.X.Y-... in the Dockerfile"
tested=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[[ ${base%.*} == "$tested" ]] ||
  die "the image runs Python $base, the tested virtualenv $tested: make one with PYTHON=python${base%.*} hack/python-env.sh"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Every distribution installed in the tested virtualenv, as constraints: the resolution
# below may pick only these versions. The checkout itself (editable) is not one of them.
"$venv/bin/uv" pip freeze --quiet --python "$venv/bin/python" --exclude-editable |
  grep -v '^dws-operator==' >"$work/tested-venv.txt"

# pyproject.toml is read for [project] dependencies alone (no --extra). Only wheels: the
# image's last stage has no compiler. Every file's hash is kept (not only this platform's),
# so the lock also installs on the official base's other architectures.
cd "$root"
"$venv/bin/uv" pip compile --quiet pyproject.toml \
  --constraints "$work/tested-venv.txt" \
  --python-version "$base" --python-platform x86_64-manylinux_2_28 --only-binary :all: \
  --generate-hashes --annotation-style line --custom-compile-command "bash hack/lock.sh" \
  --output-file "$work/requirements.lock"

# The constraints file is named on every line ("via -c .../tested-venv.txt"): a path that
# changes at every run, so it is dropped. Then every pin must be the tested version: a
# package the virtualenv lacks (resolved on another platform's markers) was never tested.
"$venv/bin/python" - "$work/requirements.lock" "$work/tested-venv.txt" <<'PY'
import re, sys
lock_path, tested_path = sys.argv[1:]
text = re.sub(r", -c \S*tested-venv\.txt", "", open(lock_path).read())
text = re.sub(r"-c \S*tested-venv\.txt(, )?", "", text)
text = re.sub(r"  # via $", "", text, flags=re.M)
open(lock_path, "w").write(text)
def norm(name): return re.sub(r"[-_.]+", "-", name).lower()
tested = {}
for line in open(tested_path):
    name, _, version = line.strip().partition("==")
    tested[norm(name)] = version
untested = []
for name, version in re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", text, re.M):
    if tested.get(norm(name)) != version:
        untested.append(f"{name}=={version} (tested: {tested.get(norm(name), 'not installed')})")
if untested:
    sys.exit("hack/lock.sh: not the tested versions: " + ", ".join(untested))
PY
mv "$work/requirements.lock" "$root/requirements.lock"
printf '%s: wrote requirements.lock: %s packages from %s\n' "$PROG" \
  "$(grep -c '^[A-Za-z0-9]' "$root/requirements.lock")" "$venv" >&2
