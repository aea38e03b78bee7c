#!/usr/bin/env bash
# Build kube-apiserver + kube-controller-manager v1.20.x from Debian's source package and install etcd.
# Usage: build-kube.sh CACHE_DIR   (binaries land in CACHE_DIR/bin; a second run is a no-op)
#
# Kubernetes 1.20 builds with Debian's Go 1.19, called by its path: machines also carry a current Go (first on
# PATH), which must not build it. GO119 overrides where that toolchain lives.
set -euo pipefail
CACHE=${1:?usage: build-kube.sh CACHE_DIR}
BIN=$CACHE/bin
mkdir -p "$BIN"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
GO119=${GO119:-/usr/lib/go-1.19}

need_pkgs=()
command -v etcd >/dev/null || need_pkgs+=(etcd-server)
if [ ! -x "$BIN/kube-apiserver" ] || [ ! -x "$BIN/kube-controller-manager" ]; then
  [ -x "$GO119/bin/go" ] || need_pkgs+=(golang-1.19-go)
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
# The toolchain by its path, never a newer one found on PATH or fetched by GOTOOLCHAIN.
export GOROOT=$GO119 PATH="$GO119/bin:$PATH" GOTOOLCHAIN=local GOFLAGS=
case "$(go version)" in
  *" go1.19"*) ;;
  *) echo "build-kube: $GO119/bin/go is $(go version), not Go 1.19 (set GO119 to a Go 1.19 root)" >&2; exit 1 ;;
esac
echo "build-kube: building kube-apiserver and kube-controller-manager (several minutes, once per machine)" >&2
make WHAT=cmd/kube-apiserver KUBE_BUILD_PLATFORMS=linux/amd64 >"$W/build.log" 2>&1 || { tail -40 "$W/build.log" >&2; exit 1; }
make WHAT=cmd/kube-controller-manager KUBE_BUILD_PLATFORMS=linux/amd64 >>"$W/build.log" 2>&1 || { tail -40 "$W/build.log" >&2; exit 1; }
cp _output/bin/kube-apiserver "$BIN/kube-apiserver.tmp" && mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver"
cp _output/bin/kube-controller-manager "$BIN/kube-controller-manager.tmp" && mv "$BIN/kube-controller-manager.tmp" "$BIN/kube-controller-manager"
echo "build-kube: done: $BIN" >&2
