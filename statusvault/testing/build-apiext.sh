#!/usr/bin/env bash
# Build the standalone CRD API server (k8s.io/apiextensions-apiserver, Kubernetes 1.36) from Debian unstable's
# Go source packages, and take etcd 3.5 from unstable too (the 1.36 server wants etcd >= 3.5; bookworm has 3.4).
# Usage: build-apiext.sh CACHE_DIR   (binaries land in CACHE_DIR/bin; a second run is a no-op)
#
# Nothing is installed on the system and the machine's apt sources are left alone: a private apt configuration
# (its own sources.list, lists, cache and an empty dpkg status) downloads the packages, `dpkg-deb -x` unpacks
# them into a private root in a temporary directory, and Go (also from unstable, GOROOT in that root) builds in
# GOPATH mode the way Debian builds these packages. The temporary directory is removed on exit.
#
# Environment: APIEXT_MINOR (default 36) is the Kubernetes minor the build insists on: unstable moves on, and a
# silently newer server would change what the tests check.
set -euo pipefail
CACHE=${1:?usage: build-apiext.sh CACHE_DIR}
MINOR=${APIEXT_MINOR:-36}
BIN=$CACHE/bin
OUT=$BIN/apiextensions-apiserver-1.$MINOR          # the stock server command
DISCO_OUT=$BIN/statusvault-apiext-1.$MINOR         # the same server plus root discovery (/api, /apis)
ETCD_OUT=$BIN/etcd-3.5
mkdir -p "$BIN"

built() { [ -x "$OUT" ] && [ -x "$DISCO_OUT" ] && [ -x "$ETCD_OUT" ] && command -v openssl >/dev/null; }
built && exit 0
# One build at a time (parallel test workers may all ask): the others wait, then find the binaries there.
if command -v flock >/dev/null; then
  exec 9>"$BIN/.build-apiext.lock"
  flock 9
  built && exit 0
fi
if ! command -v openssl >/dev/null; then  # the test harness issues its client certificates with it
  echo "build-apiext: installing openssl" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openssl >/dev/null
fi
for tool in apt-get apt-cache dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "build-apiext: step 'check tools': $tool not found (a Debian machine is needed)" >&2; exit 1; }
done

STEP="start"
fail() { echo "build-apiext: FAILED at step '$STEP'${1:+: $1}" >&2; }
trap 'rc=$?; [ $rc -ne 0 ] && fail; exit $rc' ERR
W=$(mktemp -d "${TMPDIR:-/tmp}/statusvault-apiext.XXXXXX")
trap 'rm -rf "$W"' EXIT
trap 'exit 130' INT TERM HUP  # so that the EXIT trap removes the temporary directory
log() { echo "build-apiext: $*" >&2; }

STEP="private apt update (Debian unstable)"
log "$STEP"
mkdir -p "$W/lists/partial" "$W/cache/archives/partial" "$W/parts" "$W/debs" "$W/root" "$W/ws"
: > "$W/status"
echo "deb http://deb.debian.org/debian unstable main" > "$W/sources.list"
O=(-o "Dir::Etc::SourceList=$W/sources.list" -o "Dir::Etc::SourceParts=$W/parts"
   -o "Dir::State::Lists=$W/lists" -o "Dir::Cache=$W/cache" -o "Dir::State::status=$W/status"
   -o "Dir::Etc::Preferences=$W/preferences" -o "Dir::Etc::PreferencesParts=$W/parts"
   -o "APT::Architecture=amd64" -o "Debug::NoLocking=1")
apt-get "${O[@]}" update -qq >"$W/apt.log" 2>&1 || { tail -20 "$W/apt.log" >&2; false; }

STEP="check versions"
ver() { apt-cache "${O[@]}" show "$1" 2>/dev/null | sed -n 's/^Version: //p' | head -1; }
K8S_VER=$(ver golang-k8s-apiextensions-apiserver-dev)
[ -n "$K8S_VER" ] || { fail "golang-k8s-apiextensions-apiserver-dev is not in unstable"; exit 1; }
case "$K8S_VER" in
  0.$MINOR.*) ;;
  *) fail "unstable has golang-k8s-apiextensions-apiserver-dev $K8S_VER, not 0.$MINOR.x (set APIEXT_MINOR to build another minor)"; exit 1 ;;
esac
K8S_UPSTREAM=${K8S_VER%%-*}                     # 0.36.4
GO_PKG=$(apt-cache "${O[@]}" depends golang-go 2>/dev/null | sed -n 's/^ *Depends: \(golang-1\.[0-9]*-go\)$/\1/p' | head -1)
[ -n "$GO_PKG" ] || { fail "cannot tell which golang-1.NN-go golang-go depends on"; exit 1; }
GO_SRC=${GO_PKG%-go}-src
log "apiextensions-apiserver $K8S_VER, Go $GO_PKG, etcd-server $(ver etcd-server)"

STEP="resolve the dependency closure"
# Every golang-*-dev package reachable from the server's source package (test-only dependencies included:
# Debian lists them in Depends), plus the Go compiler and its standard library sources.
apt-cache "${O[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances golang-k8s-apiextensions-apiserver-dev 2>/dev/null \
  | grep -E '^golang-[^ ]*-dev$' | sort -u > "$W/closure.txt"
printf '%s\n' "$GO_PKG" "$GO_SRC" >> "$W/closure.txt"
log "$(wc -l < "$W/closure.txt") packages in the closure"

STEP="download the packages"
log "$STEP (about 270 MB)"
(cd "$W/debs" && xargs apt-get "${O[@]}" download < "$W/closure.txt" >"$W/download.log" 2>&1) \
  || { tail -20 "$W/download.log" >&2; false; }
(cd "$W/debs" && apt-get "${O[@]}" download etcd-server >>"$W/download.log" 2>&1) \
  || { tail -20 "$W/download.log" >&2; false; }

STEP="extract into a private root"
log "$STEP"
for deb in "$W"/debs/*.deb; do
  case "$deb" in
    */etcd-server_*) dpkg-deb -x "$deb" "$W/etcd" ;;
    *) dpkg-deb -x "$deb" "$W/root" ;;
  esac
done
GOROOT=$(echo "$W"/root/usr/lib/go-1.*)
[ -x "$GOROOT/bin/go" ] || { fail "no go binary under $GOROOT"; exit 1; }
SRC=$W/root/usr/share/gocode/src/k8s.io/apiextensions-apiserver
[ -f "$SRC/main.go" ] || { fail "no $SRC/main.go"; exit 1; }

STEP="install etcd 3.5"
"$W/etcd/usr/bin/etcd" --version >/dev/null
cp "$W/etcd/usr/bin/etcd" "$ETCD_OUT.tmp.$$" && mv "$ETCD_OUT.tmp.$$" "$ETCD_OUT"

STEP="go build"
V=k8s.io/component-base/version
LDFLAGS="-s -w -X $V.gitVersion=v1.${K8S_UPSTREAM#0.} -X $V.gitMajor=1 -X $V.gitMinor=$MINOR"
LDFLAGS="$LDFLAGS -X $V.gitTreeState=clean -X $V.gitCommit=debian-$K8S_VER -X $V.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
gobuild() {  # gobuild OUTPUT IMPORT_PATH
  (
    cd "$W/ws"
    env GOROOT="$GOROOT" PATH="$GOROOT/bin:$PATH" GO111MODULE=off GOPATH="$W/ws:$W/root/usr/share/gocode" \
      GOCACHE="$W/gocache" GOTOOLCHAIN=local GOPROXY=off GOFLAGS= CGO_ENABLED=0 \
      go build -trimpath -o "$1.tmp.$$" -ldflags "$LDFLAGS" "$2"
  ) >>"$W/build.log" 2>&1 || { rm -f "$1.tmp.$$"; tail -40 "$W/build.log" >&2; false; }
  mv "$1.tmp.$$" "$1"
}
log "building with $("$GOROOT/bin/go" version | cut -d' ' -f3) in GOPATH mode (5-15 minutes on 2 cores, once per machine)"
STEP="go build k8s.io/apiextensions-apiserver (the stock command)"
[ -x "$OUT" ] || gobuild "$OUT" k8s.io/apiextensions-apiserver

STEP="go build statusvault-apiext (the server plus root discovery)"
mkdir -p "$W/ws/src/statusvault.test/apiext"
cat > "$W/ws/src/statusvault.test/apiext/main.go" <<'GO'
// The stock apiextensions-apiserver command plus root discovery: a standalone server (no kube-apiserver and
// no kube-aggregator in front of it) answers 404 for /apis and /api. This serves /apis from the server's own
// aggregated discovery manager (which the CRD discovery controller keeps current), in both the legacy
// APIGroupList form and the aggregated APIGroupDiscoveryList form, and /api as an APIVersions with no version
// (the server has no core API). Everything else is the unchanged server.
package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"

	"github.com/spf13/cobra"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apiextensions-apiserver/pkg/cmd/server/options"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"
)

const aggregatedAccept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

type rootDiscovery struct {
	server atomic.Pointer[apiserver.CustomResourceDefinitions]
}

func writeJSON(w http.ResponseWriter, obj any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(obj)
}

// legacyAPIs answers /apis as an APIGroupList, from the aggregated document (preferred version first).
func (d *rootDiscovery) legacyAPIs(w http.ResponseWriter, r *http.Request) {
	g := d.server.Load().GenericAPIServer
	req := httptest.NewRequest(http.MethodGet, "/apis", nil).WithContext(r.Context())
	req.Header.Set("Accept", aggregatedAccept)
	rec := httptest.NewRecorder()
	g.AggregatedDiscoveryGroupManager.ServeHTTP(rec, req)
	var agg apidiscoveryv2.APIGroupDiscoveryList
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &agg) != nil {
		http.Error(w, "aggregated discovery unavailable", http.StatusServiceUnavailable)
		return
	}
	list := metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}}
	for _, group := range agg.Items {
		if len(group.Versions) == 0 {
			continue
		}
		out := metav1.APIGroup{Name: group.Name}
		for _, v := range group.Versions {
			out.Versions = append(out.Versions, metav1.GroupVersionForDiscovery{GroupVersion: group.Name + "/" + v.Version, Version: v.Version})
		}
		out.PreferredVersion = out.Versions[0]
		list.Groups = append(list.Groups, out)
	}
	writeJSON(w, &list)
}

func (d *rootDiscovery) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := d.server.Load()
	if s == nil || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		http.NotFound(w, r)
		return
	}
	g := s.GenericAPIServer
	switch strings.TrimSuffix(r.URL.Path, "/") {
	case "/apis":
		aggregated.WrapAggregatedDiscoveryToHandler(http.HandlerFunc(d.legacyAPIs), g.AggregatedDiscoveryGroupManager, nil).ServeHTTP(w, r)
	case "/api":
		legacy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, &metav1.APIVersions{
				TypeMeta:                   metav1.TypeMeta{Kind: "APIVersions"},
				Versions:                   []string{},
				ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{},
			})
		})
		aggregated.WrapAggregatedDiscoveryToHandler(legacy, g.AggregatedLegacyDiscoveryGroupManager, nil).ServeHTTP(w, r)
	default:
		http.NotFound(w, r)
	}
}

func run(ctx context.Context, o *options.CustomResourceDefinitionsServerOptions) error {
	config, err := o.Config()
	if err != nil {
		return err
	}
	d := &rootDiscovery{}
	server, err := config.Complete().New(genericapiserver.NewEmptyDelegateWithCustomHandler(d))
	if err != nil {
		return err
	}
	d.server.Store(server)
	return server.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}

func main() {
	ctx := genericapiserver.SetupSignalContext()
	o := options.NewCustomResourceDefinitionsServerOptions(os.Stdout, os.Stderr)
	cmd := &cobra.Command{
		Short: "Launch an API extensions API server (with root discovery)",
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return o.ServerRunOptions.ComponentGlobalsRegistry.Set()
		},
		RunE: func(c *cobra.Command, args []string) error {
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return run(c.Context(), o)
		},
	}
	cmd.SetContext(ctx)
	o.AddFlags(cmd.Flags())
	os.Exit(cli.Run(cmd))
}
GO
[ -x "$DISCO_OUT" ] || gobuild "$DISCO_OUT" statusvault.test/apiext
log "done: $OUT, $DISCO_OUT, $ETCD_OUT"
