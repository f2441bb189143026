#!/usr/bin/env bash
# Builds the operator image from the Dockerfile with podman, no daemon needed.
#
# Usage: hack/image.sh [--print-podman]
#
# Prints two lines: the image (localhost/dws-operator:<version>) and a podman command
# (a small wrapper script) that reaches the image store it was built in; with
# --print-podman, only the wrapper, building nothing.
#
# The Dockerfile's base (its ARG BASE, python:<version>-slim-bookworm) is pulled when a registry
# answers. When none does (machines that reach only PyPI and Debian's mirrors), a
# stand-in is assembled from Debian's packages under the base's name: debootstrap
# --variant=minbase with python3 and python3-venv, a virtualenv at the official image's
# prefix (/usr/local: python and pip where the Dockerfile expects them), and this
# machine's extra CA certificates (a TLS-inspecting proxy's) trusted by pip. It is kept
# in the image store and rebuilt only when its inputs change. A locally built image is
# therefore Debian's Python 3.11 on bookworm; a release image is built on the official
# base by a CI with a registry.
#
# Needs root (debootstrap, podman's store). podman, runc and debootstrap are installed
# from Debian's packages when missing. Everything lives under
# ~/.cache/dws-operator/image/ (DWS_CACHE_DIR): podman's store, its containers.conf, the
# stand-in's root. The store is overlay where the kernel mounts it there (a build whose
# layers are all cached then takes under a second, and a container starts in a fraction
# of one), else vfs, which works on any filesystem, inside a container too, but copies
# the whole image for every build step and every container (measured on a 2-core
# machine: a cached rebuild 34 s instead of 0.7 s, a first build 85 s instead of 20 s).
set -euo pipefail

PROG=hack/image.sh
log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: %s\n' "$PROG" "$*" >&2; exit 1; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${DWS_CACHE_DIR:-${HOME:?HOME is not set; set DWS_CACHE_DIR}/.cache/dws-operator}/image
mkdir -p "$cache"
wrapper=$cache/podman

# Ulimits the containers get: within this process's own (the machine may lack
# CAP_SYS_RESOURCE, so nothing may be raised), and nproc at most what podman's
# children are allowed (32768 here: runc refused more).
nofile_soft=$(ulimit -Sn) nofile_hard=$(ulimit -Hn)
nproc=$(ulimit -Su)
[[ $nproc == unlimited || $nproc -gt 32768 ]] && nproc=32768
cat >"$cache/containers.conf.tmp" <<EOF
# Written by hack/image.sh.
[containers]
default_ulimits = ["nofile=${nofile_soft}:${nofile_hard}", "nproc=${nproc}:${nproc}"]
[engine]
# crun refuses hybrid cgroup hierarchies; runc does not.
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
mv "$cache/containers.conf.tmp" "$cache/containers.conf"
print_only=no
[[ ${1:-} == --print-podman ]] && print_only=yes

missing=()
for tool in podman runc debootstrap; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [[ $print_only == no ]] && ((${#missing[@]})); then
  ((EUID == 0)) || die "needs ${missing[*]} (Debian packages); run as root or install them"
  log "installing ${missing[*]} from Debian's packages"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2 ||
    { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2; } ||
    die "could not install ${missing[*]}"
fi

# The store's driver: overlay if podman can set a store up on it here, else vfs.
driver=vfs
if [[ -z ${DWS_IMAGE_STORAGE_DRIVER:-} ]] && command -v podman >/dev/null 2>&1 &&
  grep -qw overlay /proc/filesystems &&
  CONTAINERS_CONF="$cache/containers.conf" podman --root "$cache/storage-overlay" \
    --runroot "$cache/run-overlay" --storage-driver overlay info >/dev/null 2>&1; then
  driver=overlay
fi
driver=${DWS_IMAGE_STORAGE_DRIVER:-$driver}
cat >"$wrapper.tmp" <<EOF
#!/usr/bin/env bash
# podman on hack/image.sh's image store (written by hack/image.sh).
export CONTAINERS_CONF="$cache/containers.conf"
exec podman --root "$cache/storage-$driver" --runroot "$cache/run-$driver" --storage-driver $driver "\$@"
EOF
chmod +x "$wrapper.tmp"
mv "$wrapper.tmp" "$wrapper"
# The stores of earlier versions of this script (vfs, under storage/): not used any more.
rm -rf "$cache/storage" "$cache/run"
[[ $print_only == yes ]] && { printf '%s\n' "$wrapper"; exit 0; }

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/pyproject.toml" | head -1)
[[ -n $version ]] || die "no version in pyproject.toml"
image=localhost/dws-operator:$version
# The Dockerfile's ARG BASE default: the tag (a release build passes the digest-pinned one).
base=$(sed -n 's/^ARG BASE=\([^ ]*\)$/\1/p' "$root/Dockerfile" | head -1)
[[ $base =~ ^python:(3\.[0-9]+)\.[0-9]+-slim-(bookworm|trixie)$ ]] ||
  die "the Dockerfile's base is ${base:-missing}; a stand-in exists only for python:3.X.Y-slim-bookworm"
suite=${BASH_REMATCH[2]}
full=docker.io/library/$base

# The official base when a registry answers; else the stand-in (made once per inputs).
# The stand-in's label: its inputs' key; empty on the official image.
have=$("$wrapper" image inspect --format '{{index .Labels "dws.stand-in"}}' "$full" 2>/dev/null || true)
if "$wrapper" image exists "$full" && [[ $have == "" ]]; then
  log "base ${full}: the official image (pulled before)"
elif timeout 60 "$wrapper" pull -q "$full" >/dev/null 2>&1; then
  log "base ${full}: the official image"
else
  mirror=${DWS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
  cas=$(cat /usr/local/share/ca-certificates/*.crt 2>/dev/null | sha256sum | cut -c1-12)
  key=$(printf '%s|%s|%s|%s' "$base" "$suite" "$mirror" "$cas" | sha256sum | cut -c1-16)
  if [[ $have != "$key" ]]; then
    log "no registry answers: assembling a stand-in for ${base} from Debian ${suite} (first run only)"
    rootfs=$cache/stand-in
    rm -rf "$rootfs"
    debootstrap --variant=minbase --include=python3,python3-venv "$suite" "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
      die "debootstrap failed; see $cache/debootstrap.log"
    chroot "$rootfs" /usr/bin/python3 -m venv /usr/local
    if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
      cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
      chroot "$rootfs" update-ca-certificates >/dev/null
    fi
    # pip trusts the system's CAs (a TLS-inspecting proxy's included), as this machine's pip.
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$rootfs/etc/pip.conf"
    tar -C "$rootfs" -c . | "$wrapper" import \
      --change "LABEL dws.stand-in=$key" --change "ENV PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
      - "$full" >/dev/null
    rm -rf "$rootfs"
  fi
  log "base ${full}: stand-in from Debian ${suite} (key ${key})"
fi

started=$(date +%s)
"$wrapper" build --pull=never --network=host -t "$image" "$root" >"$cache/build.log" 2>&1 ||
  die "podman build failed; see $cache/build.log: $(tail -3 "$cache/build.log")"
size=$("$wrapper" image inspect --format '{{.Size}}' "$image")
log "built ${image} in $(($(date +%s) - started))s: $((size / 1000000)) MB"
printf '%s\n%s\n' "$image" "$wrapper"
