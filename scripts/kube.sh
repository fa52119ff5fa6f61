#!/usr/bin/env bash
# Builds the Kubernetes control plane hearth's Kubernetes tests run —
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl of
# tools/kube/go.mod's release, static — into $HEARTH_CACHE/kube/VERSION
# (default /var/cache/hearth), once: a cold build takes about 6 minutes on
# a quiet 2-core machine and 20 on a busy one; later runs find the cache.
# The binaries carry their release as their version (kubectl checks the
# server's). etcd is Debian's etcd-server (scripts/install.sh).
set -euo pipefail
cd "$(dirname "$0")/../tools/kube"
cache=${HEARTH_CACHE:-/var/cache/hearth}
version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' go.mod)
out=$cache/kube/$version
minor=${version#v1.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
mkdir -p "$out"
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
	[ -x "$out/$cmd" ] && continue
	printf 'kube: building %s %s into %s\n' "$cmd" "$version" "$out" >&2
	CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$out/$cmd.new" "k8s.io/kubernetes/cmd/$cmd"
	mv "$out/$cmd.new" "$out/$cmd"
done
echo "$out"
