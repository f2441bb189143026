#!/usr/bin/env bash
# Deletes the cached virtualenvs of one kind that have gone unused longest, keeping the
# newest `keep`. A venv is keyed by a hash of pyproject.toml, so every dependency change
# leaves the old one (about 500 MiB) behind; the ones kept cover switching between a
# few branches without reinstalling.
#
#   bash hack/prune-venvs.sh DIR SUFFIX [KEEP]
# DIR: the venvs' directory; SUFFIX: "" for development venvs, "-operator" for the
# operator's own. Each venv's last use is the time of its `.used` file.
set -euo pipefail

dir=$1
suffix=$2
keep=${3:-3}

# py311-0123456789ab plus the suffix: other kinds (and lower-bounds) never match.
candidates=()
for venv in "$dir"/py[0-9]*-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]"$suffix"; do
  [ -d "$venv" ] && candidates+=("$venv")
done
[ "${#candidates[@]}" -gt "$keep" ] || exit 0

# Newest use first; a venv without `.used` (made before this script) counts as oldest.
mapfile -t ordered < <(
  for venv in "${candidates[@]}"; do
    stamp=0
    [ -f "$venv/.used" ] && stamp=$(stat -c %Y "$venv/.used")
    echo "$stamp $venv"
  done | sort -rn -k1,1 | cut -d' ' -f2-
)
for venv in "${ordered[@]:$keep}"; do
  echo "dws-operator: removing $venv (unused longest)" >&2
  rm -rf "$venv"
done
