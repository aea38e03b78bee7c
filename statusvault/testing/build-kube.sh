#!/usr/bin/env bash
# Build kube-apiserver + kube-controller-manager v1.20.x from Debian's source package and install etcd.
# Usage: build-kube.sh CACHE_DIR   (binaries land in CACHE_DIR/bin; a second run is a no-op)
set -euo pipefail
CACHE=${1:?usage: build-kube.sh CACHE_DIR}
BIN=$CACHE/bin
mkdir -p "$BIN"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"

need_pkgs=()
command -v etcd >/dev/null || need_pkgs+=(etcd-server)
if [ ! -x "$BIN/kube-apiserver" ] || [ ! -x "$BIN/kube-controller-manager" ]; then
  command -v go >/dev/null || need_pkgs+=(golang-go)
  command -v rsync >/dev/null || need_pkgs+=(rsync)
  [ -d /usr/share/gocode/src/github.com/modern-go/reflect2 ] || need_pkgs+=(golang-github-modern-go-reflect2-dev)
fi
command -v openssl >/dev/null || need_pkgs+=(openssl)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "build-kube: installing ${need_pkgs[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
if [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-controller-manager" ]; then
  exit 0
fi

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/lists/partial" "$W/cache/archives/partial" "$W/parts"
echo "deb-src http://deb.debian.org/debian bookworm main" > "$W/sources.list"
O=(-o "Dir::Etc::SourceList=$W/sources.list" -o "Dir::Etc::SourceParts=$W/parts"
   -o "Dir::State::Lists=$W/lists" -o "Dir::Cache=$W/cache")
apt-get "${O[@]}" update -qq
cd "$W"
apt-get "${O[@]}" source --download-only kubernetes=1.20.5+really1.20.2-1.1+deb12u1 >/dev/null \
  || apt-get "${O[@]}" source --download-only kubernetes >/dev/null
tar xzf kubernetes_*.orig.tar.gz
cd kubernetes-1.20*/
# Go >= 1.18 crashes the vendored reflect2 v1.0.1 at run time: use Debian's reflect2 1.0.2.
rm -rf vendor/github.com/modern-go/reflect2
cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 vendor/github.com/modern-go/reflect2
rm -f vendor/github.com/modern-go/reflect2/go.mod
echo "build-kube: building kube-apiserver and kube-controller-manager (several minutes, once per machine)" >&2
make WHAT=cmd/kube-apiserver KUBE_BUILD_PLATFORMS=linux/amd64 >"$W/build.log" 2>&1 || { tail -40 "$W/build.log" >&2; exit 1; }
make WHAT=cmd/kube-controller-manager KUBE_BUILD_PLATFORMS=linux/amd64 >>"$W/build.log" 2>&1 || { tail -40 "$W/build.log" >&2; exit 1; }
cp _output/bin/kube-apiserver "$BIN/kube-apiserver.tmp" && mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver"
cp _output/bin/kube-controller-manager "$BIN/kube-controller-manager.tmp" && mv "$BIN/kube-controller-manager.tmp" "$BIN/kube-controller-manager"
echo "build-kube: done: $BIN" >&2
