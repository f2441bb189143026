#!/usr/bin/env bash
# Build pinned Kubernetes control-plane binaries (and friends) from Go modules.
#
# Usage: hack/k8s-binaries.sh [--print-dir] [TARGET...]
#
# Targets:
#   etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm crds
#                 the default set (used when no target is given; also: "default")
#   kueue jobset  the Kueue manager and the JobSet controller-manager binaries; built
#                 only when asked (or with "all")
#   all           the default set plus kueue and jobset
#
# Versions come from hack/versions.env (the one place they are pinned). Results go to
#   ${DWS_CACHE_DIR:-$HOME/.cache/dws-operator}/bin/<tag>/
# where <tag> names every pin, e.g. k8s-v1.36.4_etcd-v3.6.16_kwok-v0.8.0_..., with:
#   <dir>/etcd, <dir>/kube-apiserver, ..., <dir>/kueue, <dir>/jobset
#   <dir>/crds/kueue/*.yaml                 Kueue's CRDs
#   <dir>/crds/jobset/*.yaml                JobSet's CRD (jobset.x-k8s.io)
#   <dir>/crds/provisioningrequest/*.yaml   autoscaling.x-k8s.io ProvisioningRequest CRD
# The LAST line on stdout is that directory; progress and errors go to stderr.
# Whatever is already there is reused. --print-dir prints the directory and builds nothing.
#
# Needs Go (GO_MIN_VERSION in versions.env or newer) and access to a Go module proxy
# (or a module cache that already holds the pinned modules). Honors GOPROXY,
# GOMODCACHE, GOCACHE, GOFLAGS, TMPDIR and DWS_CACHE_DIR.
set -euo pipefail

PROG=dws-operator
HACK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VERSIONS_FILE=${HACK_DIR}/versions.env

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: %s\n' "$PROG" "$*" >&2; exit 1; }

usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
}

# ---------------------------------------------------------------------------
# Pins
# ---------------------------------------------------------------------------
declare -A PIN=()
[[ -r $VERSIONS_FILE ]] || die "cannot read ${VERSIONS_FILE}"
lineno=0
while IFS= read -r line || [[ -n $line ]]; do
  lineno=$((lineno + 1))
  line=${line%$'\r'}
  [[ $line =~ ^[[:space:]]*(#.*)?$ ]] && continue
  if [[ $line =~ ^([A-Z][A-Z0-9_]*)=([A-Za-z0-9._+-]+)$ ]]; then
    PIN[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
  else
    die "${VERSIONS_FILE}:${lineno}: expected a plain KEY=value line, got: ${line}"
  fi
done <"$VERSIONS_FILE"
for key in KUBERNETES_VERSION ETCD_VERSION KWOK_VERSION HELM_VERSION KUEUE_VERSION JOBSET_VERSION AUTOSCALER_PROVREQ_VERSION PROMETHEUS_VERSION; do
  [[ -n ${PIN[$key]:-} ]] || die "${VERSIONS_FILE}: ${key} is not set"
  [[ ${PIN[$key]} =~ ^v[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]+)?$ ]] ||
    die "${VERSIONS_FILE}: ${key}=${PIN[$key]} is not a Go module version (vX.Y.Z)"
done
K8S_V=${PIN[KUBERNETES_VERSION]}
ETCD_V=${PIN[ETCD_VERSION]}
KWOK_V=${PIN[KWOK_VERSION]}
HELM_V=${PIN[HELM_VERSION]}
KUEUE_V=${PIN[KUEUE_VERSION]}
JOBSET_V=${PIN[JOBSET_VERSION]}
PROVREQ_V=${PIN[AUTOSCALER_PROVREQ_VERSION]}
PROM_V=${PIN[PROMETHEUS_VERSION]}
GO_MIN=${PIN[GO_MIN_VERSION]:-}

# Module and package paths.
K8S_MOD=k8s.io/kubernetes
ETCD_MOD=go.etcd.io/etcd/server/v3 # its root package is the etcd server's main package
KWOK_MOD=sigs.k8s.io/kwok
HELM_MAJOR=${HELM_V#v}
HELM_MAJOR=${HELM_MAJOR%%.*}
((HELM_MAJOR >= 3)) || die "${VERSIONS_FILE}: HELM_VERSION=${HELM_V}: only Helm 3 and newer (helm.sh/helm/vN) can be built"
HELM_MOD=helm.sh/helm/v${HELM_MAJOR}
KUEUE_MOD=sigs.k8s.io/kueue
JOBSET_MOD=sigs.k8s.io/jobset # its root package is the controller-manager's main package
PROVREQ_MOD=k8s.io/autoscaler/cluster-autoscaler/apis
PROM_MOD=github.com/prometheus/prometheus
KUEUE_CRD_SUBDIR=config/components/crd/bases
JOBSET_CRD_SUBDIR=config/components/crd/bases
PROVREQ_CRD_FILE=config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml

# Cache directory: one per combination of pins.
short_version() { # pseudo-versions shortened to their commit hash
  if [[ $1 =~ -[0-9]{14}-([0-9a-f]{12})$ ]]; then printf '%s' "${BASH_REMATCH[1]}"; else printf '%s' "$1"; fi
}
TAG="k8s-${K8S_V}_etcd-${ETCD_V}_kwok-${KWOK_V}_helm-${HELM_V}_kueue-${KUEUE_V}_jobset-${JOBSET_V}_provreq-$(short_version "$PROVREQ_V")_prometheus-${PROM_V}"
CACHE_DIR=${DWS_CACHE_DIR:-${HOME:?HOME is not set; set DWS_CACHE_DIR}/.cache/dws-operator}
OUT_DIR=${CACHE_DIR}/bin/${TAG}

# ---------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------
DEFAULT_TARGETS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm crds)
ALL_TARGETS=("${DEFAULT_TARGETS[@]}" kueue jobset prometheus)

# Which pin each target belongs to (used to reuse binaries from other cache dirs).
target_token() {
  case $1 in
    etcd) echo "etcd-${ETCD_V}" ;;
    kube-apiserver | kube-controller-manager | kube-scheduler | kubectl) echo "k8s-${K8S_V}" ;;
    kwok) echo "kwok-${KWOK_V}" ;;
    helm) echo "helm-${HELM_V}" ;;
    kueue) echo "kueue-${KUEUE_V}" ;;
    jobset) echo "jobset-${JOBSET_V}" ;;
    prometheus) echo "prometheus-${PROM_V}" ;;
    *) echo "" ;;
  esac
}
target_version() {
  case $1 in
    etcd) echo "$ETCD_V" ;;
    kube-apiserver | kube-controller-manager | kube-scheduler | kubectl) echo "$K8S_V" ;;
    kwok) echo "$KWOK_V" ;;
    helm) echo "$HELM_V" ;;
    kueue) echo "$KUEUE_V" ;;
    jobset) echo "$JOBSET_V" ;;
    prometheus) echo "$PROM_V" ;;
    crds) echo "kueue ${KUEUE_V}, jobset ${JOBSET_V}, provisioningrequest $(short_version "$PROVREQ_V")" ;;
  esac
}
is_present() {
  if [[ $1 == crds ]]; then [[ -d $OUT_DIR/crds ]]; else [[ -f $OUT_DIR/$1 && -x $OUT_DIR/$1 ]]; fi
}

PRINT_DIR_ONLY=0
requested=()
for arg in "$@"; do
  case $arg in
    -h | --help) usage; exit 0 ;;
    --print-dir) PRINT_DIR_ONLY=1 ;;
    default) requested+=("${DEFAULT_TARGETS[@]}") ;;
    all) requested+=("${ALL_TARGETS[@]}") ;;
    etcd | kube-apiserver | kube-controller-manager | kube-scheduler | kubectl | kwok | helm | kueue | jobset | prometheus | crds)
      requested+=("$arg") ;;
    *) die "unknown target '${arg}'; known: ${ALL_TARGETS[*]} default all (see --help)" ;;
  esac
done
((${#requested[@]})) || requested=("${DEFAULT_TARGETS[@]}")

if ((PRINT_DIR_ONLY)); then
  printf '%s\n' "$OUT_DIR"
  exit 0
fi

missing_targets() {
  local t
  missing=()
  for t in "${requested[@]}"; do
    is_present "$t" || [[ " ${missing[*]-} " == *" $t "* ]] || missing+=("$t")
  done
}

# Fast path: everything is there already (no subprocess, no lock).
missing_targets
if ((${#missing[@]} == 0)); then
  printf '%s\n' "$OUT_DIR"
  exit 0
fi

# ---------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------
mkdir -p "$OUT_DIR" || die "cannot create ${OUT_DIR}; set DWS_CACHE_DIR to a writable directory"

CLEANUP=()
cleanup() {
  local p
  for p in "${CLEANUP[@]-}"; do
    [[ -n $p && -e $p ]] || continue
    chmod -R u+w "$p" 2>/dev/null || true
    rm -rf "$p"
  done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# One build at a time per cache dir; others wait, then find the results.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$OUT_DIR/.lock"
  if ! flock -n 9; then
    log "waiting for another build in ${OUT_DIR}"
    flock 9
  fi
  # Holding the lock: leftovers of a killed build are stale.
  for stale in "$OUT_DIR"/.build-* "$OUT_DIR"/.*.tmp.*; do
    [[ -e $stale ]] || continue
    chmod -R u+w "$stale" 2>/dev/null || true
    rm -rf "$stale"
  done
  missing_targets
fi

# Reuse a binary built for the same pin under another tag (another pin changed).
for t in "${missing[@]}"; do
  token=$(target_token "$t")
  [[ -n $token ]] || continue
  for cand in "$CACHE_DIR"/bin/*/"$t"; do
    [[ -f $cand && -x $cand && $cand != "$OUT_DIR/$t" ]] || continue
    d=${cand%/*}
    d=${d##*/}
    [[ _${d}_ == *_${token}_* ]] || continue
    CLEANUP+=("$OUT_DIR/.$t.tmp.$$")
    ln "$cand" "$OUT_DIR/.$t.tmp.$$" 2>/dev/null || cp "$cand" "$OUT_DIR/.$t.tmp.$$"
    mv -f "$OUT_DIR/.$t.tmp.$$" "$OUT_DIR/$t"
    log "reused ${t} ${token#*-} from ${cand}"
    break
  done
done
missing_targets
if ((${#missing[@]} == 0)); then
  printf '%s\n' "$OUT_DIR"
  exit 0
fi

export GO111MODULE=on GOWORK=off CGO_ENABLED=0
HINT="or set KUBEBUILDER_ASSETS/DWS_K8S_BIN_DIR to a directory with the binaries"

now() { printf '%s' "${EPOCHREALTIME/,/.}"; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

GO_CHECKED=0
require_go() { # $1 = what we are building, $2 = its version
  ((GO_CHECKED)) && return 0
  command -v go >/dev/null 2>&1 ||
    die "cannot build $1 $2: go not found on PATH; install Go >= ${GO_MIN:-1.x} (https://go.dev/dl/), ${HINT}"
  GO_LOCAL=$(go env GOVERSION 2>/dev/null) || die "cannot build $1 $2: 'go env' failed; check your Go installation, ${HINT}"
  GO_LOCAL=${GO_LOCAL#go}
  GO_LOCAL=${GO_LOCAL%% *}
  GO_TOOLCHAIN=$(go env GOTOOLCHAIN 2>/dev/null || echo local)
  GO_CHECKED=1
  [[ -z $GO_MIN ]] || check_go_version "$1" "$2" "$GO_MIN"
}
check_go_version() { # what version needed
  local lowest
  lowest=$(printf '%s\n%s\n' "$3" "$GO_LOCAL" | sort -V | head -n1)
  if [[ $lowest != "$3" && $GO_TOOLCHAIN != *auto* ]]; then # "auto" could download a newer Go
    die "cannot build $1 $2: it needs Go >= $3 but go on PATH is ${GO_LOCAL} (GOTOOLCHAIN=${GO_TOOLCHAIN}); install Go >= $3 (https://go.dev/dl/), ${HINT}"
  fi
}

# download MODULE VERSION WHAT: fills DL_DIR, DL_GOMOD, DL_INFO (paths in the module cache).
download() {
  local json err
  if ! json=$(cd "$WORK_ROOT" && go mod download -json "$1@$2" 2>&1); then
    err=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Error": "\(.*\)",\{0,1\}$/\1/p' | head -n1)
    [[ -n $err ]] || err=$(printf '%s\n' "$json" | tail -n1)
    err=${err//\\n\\t/; }
    err=${err//\\n/; }
    die "cannot build $3: cannot download Go module $1@$2 (GOPROXY=$(go env GOPROXY)): ${err}"
  fi
  DL_DIR=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' | head -n1)
  DL_GOMOD=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' | head -n1)
  DL_INFO=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Info": "\(.*\)",\{0,1\}$/\1/p' | head -n1)
  DL_HASH=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Hash": "\([0-9a-f]\{40\}\)",\{0,1\}$/\1/p' | head -n1)
  [[ -d $DL_DIR && -f $DL_GOMOD ]] || die "cannot build $3: 'go mod download' of $1@$2 gave no module directory"
  DL_TIME=$(sed -n 's/.*"Time"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' "$DL_INFO" 2>/dev/null | head -n1)
}

# Print a go.mod in a line-oriented form:
#   G <go version> | R <module> <version> | P <module>|<version>|<new path or module>|<new version>
parse_gomod() {
  awk '
    function trim(s) { sub(/\/\/.*/, "", s); gsub(/^[ \t]+|[ \t]+$/, "", s); gsub(/"/, "", s); return s }
    function emit(kw, s,   n, f, lhs, rhs, l, r) {
      if (kw == "require") { n = split(s, f, /[ \t]+/); if (n >= 2) print "R", f[1], f[2] }
      else if (kw == "replace") {
        if (index(s, "=>") == 0) return
        lhs = trim(substr(s, 1, index(s, "=>") - 1)); rhs = trim(substr(s, index(s, "=>") + 2))
        split(lhs, l, /[ \t]+/); split(rhs, r, /[ \t]+/)
        print "P", l[1] "|" l[2] "|" r[1] "|" r[2]
      }
    }
    { line = trim($0) }
    line == "" { next }
    block != "" { if (line == ")") block = ""; else emit(block, line); next }
    line ~ /^[a-z]+[ \t]*\($/ { block = line; sub(/[ \t]*\($/, "", block); next }
    line ~ /^go[ \t]/ { split(line, f, /[ \t]+/); print "G", f[2]; next }
    line ~ /^(require|replace)[ \t]/ { kw = line; sub(/[ \t].*/, "", kw); emit(kw, substr(line, length(kw) + 1)); next }
  ' "$1"
}

# go_build LABEL MODULE VERSION LDFLAGS NAME=PACKAGE...
# Builds the packages of MODULE@VERSION with one 'go build' inside a generated wrapper
# module that requires MODULE VERSION. Unlike 'go install pkg@version', this works when
# MODULE's go.mod has replace directives: replacements by module version are copied;
# replacements by local directory are dropped (the required published versions are used),
# except that for k8s.io/kubernetes each staging module (required as v0.0.0 and replaced
# by ./staging/src/...) is replaced by its published v0.MINOR.PATCH.
go_build() {
  local label=$1 mod=$2 ver=$3 ldflags=$4
  shift 4
  local specs=("$@") names=() pkgs=() spec pkg def start
  for spec in "${specs[@]}"; do names+=("${spec%%=*}"); pkgs+=("${spec#*=}"); done
  local what
  what="$(IFS=,; printf '%s' "${names[*]}") ${ver}"
  require_go "${names[0]}" "$ver"
  start=$(now)
  log "building ${names[*]} (${mod}@${ver}) ..."

  download "$mod" "$ver" "$what"
  local gomod_src=$DL_GOMOD
  # Fill in @COMMIT@ / @DATE@ from the module's .info (origin commit, tag time);
  # flags whose value is unknown are dropped.
  local -a ldf=()
  local word
  for word in $ldflags; do
    if [[ ($word == *@COMMIT@* && -z $DL_HASH) || ($word == *@DATE@* && -z $DL_TIME) ]]; then
      unset 'ldf[-1]' # drop this -X flag
      continue
    fi
    word=${word//@COMMIT@/$DL_HASH}
    word=${word//@DATE@/$DL_TIME}
    ldf+=("$word")
  done
  ldflags="${ldf[*]}"
  local parsed go_directive staging_ver="" kind rest
  parsed=$(parse_gomod "$gomod_src")
  go_directive=$(awk '$1 == "G" { print $2; exit }' <<<"$parsed")
  [[ -z $go_directive ]] || check_go_version "${names[0]}" "$ver" "$go_directive"
  if [[ $mod == "$K8S_MOD" ]]; then staging_ver="v0.${ver#v*.}"; fi

  local wdir
  wdir=$(mktemp -d "${TMPDIR:-/tmp}/dws-build-${label}.XXXXXX")
  CLEANUP+=("$wdir")
  {
    printf 'module dws-operator.local/build/%s\n\n' "$label"
    [[ -z $go_directive ]] || printf 'go %s\n\n' "$go_directive"
    printf 'require %s %s\n' "$mod" "$ver"
    local old oldv new newv reqv
    while read -r kind rest; do
      [[ $kind == P ]] || continue
      IFS='|' read -r old oldv new newv <<<"$rest"
      if [[ -n $newv ]]; then # replaced by another module version: keep
        printf 'replace %s %s=> %s %s\n' "$old" "${oldv:+$oldv }" "$new" "$newv"
        continue
      fi
      # replaced by a local directory
      reqv=$(awk -v m="$old" '$1 == "R" && $2 == m { print $3; exit }' <<<"$parsed")
      [[ -n $reqv ]] || continue # not required: replacement unused
      if [[ $reqv == v0.0.0 ]]; then
        [[ -n $staging_ver ]] ||
          die "cannot build ${what}: ${mod}'s go.mod requires ${old} v0.0.0 and replaces it with ${new}; no published version to use"
        printf 'replace %s => %s %s\n' "$old" "$old" "$staging_ver"
      fi
    done <<<"$parsed"
  } >"$wdir/go.mod"
  # Seed go.sum with the module's own go.sum: dependencies are then verified against the
  # hashes upstream committed (the checksum database is asked only about the rest, e.g.
  # the k8s.io staging modules). Some proxies serve modules whose checksum-database
  # lookup fails (seen with sigs.k8s.io/scheduler-library, needed by Kueue).
  if [[ -f $DL_DIR/go.sum ]]; then cp "$DL_DIR/go.sum" "$wdir/go.sum" && chmod u+w "$wdir/go.sum"; fi

  local tmp_out
  tmp_out=$(mktemp -d "$OUT_DIR/.build-${label}.XXXXXX")
  CLEANUP+=("$tmp_out")
  if ! (cd "$wdir" && go build -mod=mod -trimpath -ldflags "-s -w${ldflags:+ $ldflags}" -o "$tmp_out/" "${pkgs[@]}"); then
    die "cannot build ${what}: 'go build' of ${pkgs[*]} failed (errors above); needs Go >= ${go_directive:-?} and the Go module proxy, ${HINT}"
  fi
  local i
  for i in "${!names[@]}"; do
    pkg=${pkgs[$i]}
    def=${pkg##*/}
    if [[ $def =~ ^v[0-9]+$ ]]; then def=${pkg%/*}; def=${def##*/}; fi
    [[ -f $tmp_out/$def ]] || die "cannot build ${names[$i]} ${ver}: 'go build' produced no ${def} binary"
    mv -f "$tmp_out/$def" "$OUT_DIR/${names[$i]}"
  done
  log "built ${names[*]} ${ver} in $(elapsed "$start")s"
}

# copy_crd_dir MODULE VERSION SUBDIR KIND WHAT: the module's SUBDIR/*.yaml into $tmp/crds/KIND;
# adds their number to n.
copy_crd_dir() {
  local f found=0
  download "$1" "$2" "$5 $2"
  mkdir -p "$tmp/crds/$4"
  for f in "$DL_DIR/$3"/*.yaml; do
    [[ -f $f ]] || continue
    cp "$f" "$tmp/crds/$4/"
    found=$((found + 1))
  done
  ((found > 0)) || die "cannot build $5 $2: no $3/*.yaml in $1@$2"
  n=$((n + found))
}

build_crds() {
  require_go crds "$KUEUE_V"
  local start tmp n=0
  start=$(now)
  log "extracting CRDs (${KUEUE_MOD}@${KUEUE_V}, ${JOBSET_MOD}@${JOBSET_V}, ${PROVREQ_MOD}@${PROVREQ_V}) ..."
  tmp=$(mktemp -d "$OUT_DIR/.build-crds.XXXXXX")
  CLEANUP+=("$tmp")
  copy_crd_dir "$KUEUE_MOD" "$KUEUE_V" "$KUEUE_CRD_SUBDIR" kueue "Kueue CRDs"
  copy_crd_dir "$JOBSET_MOD" "$JOBSET_V" "$JOBSET_CRD_SUBDIR" jobset "JobSet CRDs"
  download "$PROVREQ_MOD" "$PROVREQ_V" "ProvisioningRequest CRD ${PROVREQ_V}"
  [[ -f $DL_DIR/$PROVREQ_CRD_FILE ]] ||
    die "cannot build ProvisioningRequest CRD: no ${PROVREQ_CRD_FILE} in ${PROVREQ_MOD}@${PROVREQ_V}"
  mkdir -p "$tmp/crds/provisioningrequest"
  cp "$DL_DIR/$PROVREQ_CRD_FILE" "$tmp/crds/provisioningrequest/"
  chmod -R u+w,a+r "$tmp/crds"
  rm -rf "$OUT_DIR/crds"
  mv "$tmp/crds" "$OUT_DIR/crds"
  log "extracted $((n + 1)) CRDs in $(elapsed "$start")s"
}

want() { [[ " ${missing[*]} " == *" $1 "* ]]; }

TOTAL_START=$(now)
WORK_ROOT=$(mktemp -d "${TMPDIR:-/tmp}/dws-build.XXXXXX") # neutral cwd for 'go mod download'
CLEANUP+=("$WORK_ROOT")

if want etcd; then
  go_build etcd "$ETCD_MOD" "$ETCD_V" "-X go.etcd.io/etcd/api/v3/version.GitSHA=@COMMIT@" "etcd=${ETCD_MOD}"
fi

k8s_specs=()
for t in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  want "$t" && k8s_specs+=("$t=${K8S_MOD}/cmd/$t")
done
if ((${#k8s_specs[@]})); then
  k8s_minor=${K8S_V#v*.}
  k8s_minor=${k8s_minor%%.*}
  k8s_ld=""
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    k8s_ld+=" -X ${pkg}.gitVersion=${K8S_V} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${k8s_minor}"
    k8s_ld+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.gitCommit=@COMMIT@ -X ${pkg}.buildDate=@DATE@"
  done
  go_build kubernetes "$K8S_MOD" "$K8S_V" "${k8s_ld# }" "${k8s_specs[@]}"
fi

if want kwok; then
  go_build kwok "$KWOK_MOD" "$KWOK_V" "" "kwok=${KWOK_MOD}/cmd/kwok"
fi

if want helm; then
  go_build helm "$HELM_MOD" "$HELM_V" \
    "-X ${HELM_MOD}/internal/version.version=${HELM_V} -X ${HELM_MOD}/internal/version.metadata= -X ${HELM_MOD}/internal/version.gitTreeState=clean -X ${HELM_MOD}/internal/version.gitCommit=@COMMIT@" \
    "helm=${HELM_MOD}/cmd/helm"
fi

if want kueue; then
  go_build kueue "$KUEUE_MOD" "$KUEUE_V" "-X ${KUEUE_MOD}/pkg/version.GitVersion=${KUEUE_V} -X ${KUEUE_MOD}/pkg/version.GitCommit=@COMMIT@ -X ${KUEUE_MOD}/pkg/version.BuildDate=@DATE@" \
    "kueue=${KUEUE_MOD}/cmd/kueue"
fi

if want jobset; then
  go_build jobset "$JOBSET_MOD" "$JOBSET_V" "-X ${JOBSET_MOD}/pkg/version.GitVersion=${JOBSET_V} -X ${JOBSET_MOD}/pkg/version.GitCommit=@COMMIT@" \
    "jobset=${JOBSET_MOD}"
fi

if want prometheus; then
  # Prometheus 3.X.Y is Go module v0.3XX.Y (3.16.0: v0.316.0); the UI assets are not
  # embedded (no builtinassets tag): the tests use the HTTP API only.
  prom_minor=${PROM_V#v0.}
  prom_patch=${prom_minor#*.}
  prom_minor=${prom_minor%%.*}
  prom_release="3.$((prom_minor - 300)).${prom_patch}"
  go_build prometheus "$PROM_MOD" "$PROM_V" \
    "-X github.com/prometheus/common/version.Version=${prom_release} -X github.com/prometheus/common/version.Revision=@COMMIT@ -X github.com/prometheus/common/version.BuildDate=@DATE@" \
    "prometheus=${PROM_MOD}/cmd/prometheus"
fi

if want crds; then
  build_crds
fi

log "done in $(elapsed "$TOTAL_START")s: ${OUT_DIR}"
printf '%s\n' "$OUT_DIR"
