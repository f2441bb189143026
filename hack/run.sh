#!/usr/bin/env bash
# Runs `dws-operator ARGS...` from the project's cached virtualenv (created on first use).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=$(bash "$root/hack/python-env.sh")
exec "$venv/bin/dws-operator" "$@"
