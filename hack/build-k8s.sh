#!/usr/bin/env bash
# build-k8s.sh: build kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and
# kube-proxy (for `kovs-sandbox up --kube-proxy`) from the k8s.io/kubernetes module in a
# scratch build module (never the project's go.mod), and cache them under $KOVS_CACHE
# (default $HOME/.cache/kovs). A second run takes seconds.
# It also builds the binaries of the test images kovs-images makes (`make images`):
# agnhost and regression-issue-74839 (test/images/..., in the same scratch module), pause
# (build/pause, gcc) and
# CoreDNS (the cluster DNS of the sandbox's real nodes, the version kubeadm v1.37 deploys);
# and e2e.test, the upstream end-to-end suite (test/e2e, in a scratch module of its own:
# its test-only dependencies would change the components' go.sum).
#
# The k8s.io/kubernetes module cannot be built with `go install` because of its replace
# directives for the staging modules; the scratch module repeats them, pinned to v0.X.Y.
set -euo pipefail
K8S_VERSION=${K8S_VERSION:-1.37.2}
CACHE=${KOVS_CACHE:-$HOME/.cache/kovs}
OUT=$CACHE/k8s-v$K8S_VERSION/bin
COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler kubectl kube-proxy kubelet)
TEST_BINARIES=(agnhost regression-issue-74839 pause e2e.test coredns)
COREDNS_VERSION=${COREDNS_VERSION:-v1.14.6}

# build_test_binaries builds the test binaries into $OUT where missing; it needs the
# scratch module ($mod) the components are built in.
build_test_binaries() {
  local kdir tag tmpd
  command -v go >/dev/null && command -v jq >/dev/null || { echo "build-k8s: go and jq are required" >&2; exit 1; }
  kdir=$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | jq -r .Dir)
  if [ ! -x "$OUT/agnhost" ]; then
    echo "building agnhost $(cat "$kdir/test/images/agnhost/VERSION") (k8s.io/kubernetes v$K8S_VERSION)"
    printf '//go:build tools\n\npackage k8sbuild\n\nimport _ "k8s.io/kubernetes/test/images/agnhost"\n' >"$mod/tools_agnhost.go"
    tmpd=$(mktemp -d "$OUT/.agnhost.XXXXXX")
    (cd "$mod" && go mod tidy && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmpd/agnhost" k8s.io/kubernetes/test/images/agnhost) \
      || { rm -rf "$tmpd"; exit 1; }
    mv "$tmpd/agnhost" "$OUT/agnhost"; rm -rf "$tmpd"
  fi
  if [ ! -x "$OUT/regression-issue-74839" ]; then
    echo "building regression-issue-74839 $(cat "$kdir/test/images/regression-issue-74839/VERSION") (k8s.io/kubernetes v$K8S_VERSION)"
    printf '//go:build tools\n\npackage k8sbuild\n\nimport _ "k8s.io/kubernetes/test/images/regression-issue-74839"\n' >"$mod/tools_regression_issue_74839.go"
    tmpd=$(mktemp -d "$OUT/.regression-issue-74839.XXXXXX")
    (cd "$mod" && go mod tidy && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmpd/regression-issue-74839" \
      k8s.io/kubernetes/test/images/regression-issue-74839) || { rm -rf "$tmpd"; exit 1; }
    mv "$tmpd/regression-issue-74839" "$OUT/regression-issue-74839"; rm -rf "$tmpd"
  fi
  if [ ! -x "$OUT/pause" ]; then
    command -v gcc >/dev/null || { echo "build-k8s: gcc is required for the pause image (apt-get install gcc libc6-dev)" >&2; exit 1; }
    tag=$(sed -n 's/^TAG ?= *//p' "$kdir/build/pause/Makefile")
    echo "building pause $tag (build/pause of k8s.io/kubernetes v$K8S_VERSION)"
    # The flags of build/pause/Makefile: static, so the image needs nothing else.
    gcc -Os -Wall -Werror -static -DVERSION="v$tag" -o "$OUT/.pause.tmp" "$kdir/build/pause/linux/pause.c"
    strip "$OUT/.pause.tmp"
    mv "$OUT/.pause.tmp" "$OUT/pause"
  fi
  if [ ! -x "$OUT/e2e.test" ]; then
    echo "building e2e.test v$K8S_VERSION (test/e2e of k8s.io/kubernetes; cold: about 8 minutes on 2 cores)"
    local e2emod=$CACHE/k8s-v$K8S_VERSION/e2e-build
    mkdir -p "$e2emod"
    sed 's#^module kovs.local/k8sbuild#module kovs.local/k8se2e#' "$mod/go.mod" >"$e2emod/go.mod"
    cp "$mod/go.sum" "$e2emod/go.sum"
    printf '//go:build tools\n\npackage k8se2e\n\nimport _ "k8s.io/kubernetes/test/e2e"\n' >"$e2emod/tools.go"
    tmpd=$(mktemp -d "$OUT/.e2e.XXXXXX")
    (cd "$e2emod" && go mod tidy && go test -c -trimpath -ldflags "$ldflags" -o "$tmpd/e2e.test" k8s.io/kubernetes/test/e2e) \
      || { rm -rf "$tmpd"; exit 1; }
    mv "$tmpd/e2e.test" "$OUT/e2e.test"; rm -rf "$tmpd"
  fi
  if [ ! -x "$OUT/coredns" ]; then
    echo "building CoreDNS $COREDNS_VERSION"
    tmpd=$(mktemp -d "$OUT/.coredns.XXXXXX")
    (cd "$tmpd" && GOBIN="$tmpd" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION") \
      || { rm -rf "$tmpd"; exit 1; }
    mv "$tmpd/coredns" "$OUT/coredns"; rm -rf "$tmpd"
  fi
}

V=k8s.io/component-base/version
IFS=. read -r major minor _ <<<"$K8S_VERSION"
ldflags="-s -w -X $V.gitVersion=v$K8S_VERSION -X $V.gitMajor=$major -X $V.gitMinor=$minor -X $V.gitTreeState=clean"

test_binaries_missing() {
  local b
  for b in "${TEST_BINARIES[@]}"; do [ -x "$OUT/$b" ] || return 0; done
  return 1
}

missing=()
for c in "${COMPONENTS[@]}"; do [ -x "$OUT/$c" ] || missing+=("$c"); done
mod=$CACHE/k8s-v$K8S_VERSION/build
if [ ${#missing[@]} -eq 0 ]; then
  if test_binaries_missing; then
    export GOFLAGS=-buildvcs=false
    build_test_binaries
  fi
  echo "kubernetes v$K8S_VERSION binaries cached in $OUT"; exit 0
fi

command -v go >/dev/null || { echo "build-k8s: go is not on PATH" >&2; exit 1; }
command -v jq >/dev/null || { echo "build-k8s: jq is required (apt-get install jq)" >&2; exit 1; }

mkdir -p "$mod" "$OUT"
export GOFLAGS=-buildvcs=false
kmod=$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | jq -r .GoMod)
{
  printf 'module kovs.local/k8sbuild\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$K8S_VERSION"
  sed -n '/^replace (/,/^)/p' "$kmod" | awk -v v="v0.${K8S_VERSION#1.}" '/=>/{print "\t"$1" v0.0.0 => "$1" "v}'
  echo ')'
} >"$mod/go.mod"
{
  printf '//go:build tools\n\npackage k8sbuild\n\nimport (\n'
  for c in "${COMPONENTS[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
  printf ')\n'
} >"$mod/tools.go"

pkgs=()
for c in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
echo "building ${missing[*]} v$K8S_VERSION (cold: about 20 minutes on 2 cores)"
cd "$mod"
go mod tidy
tmp=$(mktemp -d "$OUT/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
go build -trimpath -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}"
for c in "${missing[@]}"; do mv "$tmp/$c" "$OUT/$c"; done
build_test_binaries
echo "kubernetes v$K8S_VERSION binaries built in $OUT"
