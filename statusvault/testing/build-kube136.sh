#!/usr/bin/env bash
# Build the Kubernetes 1.36 control plane of the tests from the Go module proxy: kube-apiserver and
# kube-controller-manager (the Go module kube136/, k8s.io/kubernetes at the version its go.mod names) and the
# etcd 3.6 server (the module kube136/etcd/).
# Usage: build-kube136.sh CACHE_DIR        binaries land in CACHE_DIR/bin as kube-apiserver-1.36,
#                                          kube-controller-manager-1.36 and etcd-3.6; a no-op when they are
#                                          there and were built from the module files as they are now
#        build-kube136.sh --replaces VER   print the replace block that pins every staging module of
#                                          k8s.io/kubernetes VER (v1.36.x) to its release (v0.36.x), for go.mod
#
# Built with the machine's current Go (1.26 or newer: /usr/local/go/bin/go, else the go on PATH; GO126 names
# another Go binary), called by its path with GOTOOLCHAIN=local: never Debian's Go 1.19 that builds Kubernetes 1.20
# (build-kube.sh), nor a toolchain fetched behind our back. Modules are kept in CACHE_DIR/go/mod, apart from the machine's own Go caches.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
MOD=$HERE/kube136
MINOR=1.36

fail() { echo "build-kube136: FAILED at step '$STEP'${1:+: $1}" >&2; }
log() { echo "build-kube136: $*" >&2; }
STEP="start"

if [ "${1:-}" != "--replaces" ]; then
  CACHE=${1:?usage: build-kube136.sh CACHE_DIR}
  BIN=$CACHE/bin
  APISERVER=$BIN/kube-apiserver-$MINOR
  CONTROLLER=$BIN/kube-controller-manager-$MINOR
  ETCD=$BIN/etcd-3.6
  STAMP=$BIN/.kube136.sum  # what the binaries were built from: a digest of the module files
  sources() { (cd "$MOD" && cat go.mod go.sum etcd/go.mod etcd/go.sum etcd/main.go | sha256sum | cut -d' ' -f1); }
  built() {
    [ -x "$APISERVER" ] && [ -x "$CONTROLLER" ] && [ -x "$ETCD" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$(sources)" ]
  }
  built && exit 0
  mkdir -p "$BIN"
  # One build at a time (parallel test workers may all ask): the others wait, then find the binaries there.
  exec 9>"$BIN/.build-kube136.lock"
  flock 9
  built && exit 0
fi

STEP="find Go 1.26+"
recent_go() { case "$(GOTOOLCHAIN=local "$1" env GOVERSION 2>/dev/null)" in go1.2[6-9]*|go1.[3-9][0-9]*) ;; *) false ;; esac; }
GO=""
for candidate in ${GO126:-/usr/local/go/bin/go $(command -v go || true)}; do  # GO126, when set, is the only one
  if [ -x "$candidate" ] && recent_go "$candidate"; then GO=$candidate; break; fi
done
[ -n "$GO" ] || { fail "no Go 1.26+ at ${GO126:-/usr/local/go/bin/go or on PATH} (set GO126 to a Go 1.26+ binary)"; exit 1; }
GOVER=$(GOTOOLCHAIN=local "$GO" env GOVERSION)
GOROOT=$(GOTOOLCHAIN=local "$GO" env GOROOT)
export GOROOT PATH="$GOROOT/bin:$PATH" GOTOOLCHAIN=local GOWORK=off GO111MODULE=on GOFLAGS="-modcacherw -buildvcs=false"

if [ "${1:-}" = "--replaces" ]; then
  VER=${2:?usage: build-kube136.sh --replaces v1.36.N}
  STEP="read k8s.io/kubernetes@$VER's go.mod"
  GOMOD=$(cd "$MOD" && go mod download -json "k8s.io/kubernetes@$VER" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
  echo "replace ("
  sed -n "s#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\t\1 => \1 v0.${VER#v1.}#p" "$GOMOD"
  echo ")"
  exit 0
fi

trap 'rc=$?; [ $rc -ne 0 ] && fail; exit $rc' ERR
W=$(mktemp -d "${TMPDIR:-/tmp}/statusvault-kube136.XXXXXX")
trap 'rm -rf "$W"' EXIT
trap 'exit 130' INT TERM HUP  # so that the EXIT trap removes the temporary directory
rm -f "$STAMP"
# Modules are kept (a rebuild for another patch release downloads only what changed); compiled packages (about
# 3 GB) are not: nothing is rebuilt until the module files change.
export GOMODCACHE=$CACHE/go/mod GOCACHE=$W/gocache

STEP="download the modules"
log "$STEP (about 160 MB, 830 MB unpacked into $GOMODCACHE, once per machine)"
(cd "$MOD" && go mod download && cd etcd && go mod download) >"$W/download.log" 2>&1 \
  || { tail -20 "$W/download.log" >&2; false; }

KUBE_VERSION=$(cd "$MOD" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
case "$KUBE_VERSION" in
  v$MINOR.*) ;;
  *) fail "kube136/go.mod names k8s.io/kubernetes $KUBE_VERSION, not v$MINOR.x"; exit 1 ;;
esac
V=k8s.io/component-base/version
LDFLAGS="-s -w -X $V.gitVersion=$KUBE_VERSION -X $V.gitMajor=1 -X $V.gitMinor=${MINOR#1.} -X $V.gitTreeState=clean"
LDFLAGS="$LDFLAGS -X $V.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
gobuild() {  # gobuild DIR OUTPUT PACKAGE
  (cd "$1" && CGO_ENABLED=0 go build -trimpath -ldflags "$LDFLAGS" -o "$2.tmp.$$" "$3") >>"$W/build.log" 2>&1 \
    || { rm -f "$2.tmp.$$"; tail -40 "$W/build.log" >&2; false; }
  mv "$2.tmp.$$" "$2"
}
log "building Kubernetes $KUBE_VERSION and etcd with $GOVER (about 7 minutes on 2 cores, once per machine)"
STEP="go build k8s.io/kubernetes/cmd/kube-apiserver"
gobuild "$MOD" "$APISERVER" k8s.io/kubernetes/cmd/kube-apiserver
STEP="go build k8s.io/kubernetes/cmd/kube-controller-manager"
gobuild "$MOD" "$CONTROLLER" k8s.io/kubernetes/cmd/kube-controller-manager
STEP="go build etcd"
LDFLAGS="-s -w"
gobuild "$MOD/etcd" "$ETCD" .
STEP="check the binaries"
"$APISERVER" --version | grep -qx "Kubernetes $KUBE_VERSION" || { fail "$("$APISERVER" --version)"; exit 1; }
"$ETCD" --version >/dev/null
sources > "$STAMP"
log "done: $APISERVER, $CONTROLLER, $ETCD"
