#!/usr/bin/env bash
# Installs what hearth needs on a Debian/Ubuntu host and builds it:
#   - apt packages: runc (container runtime), debootstrap (the default image),
#     btrfs-progs (the layer store), util-linux/mount, iproute2, iptables and
#     ipset (sandbox networking),
#     python3 (the host side of the sandbox-URL benchmark), docker-registry,
#     skopeo, umoci and apache2-utils' htpasswd (the image tests' registry
#     and OCI tools; the registry's system service is stopped and disabled,
#     as the tests start their own registries on free ports), postgresql
#     (the store/postgres tests' throwaway clusters, testutil/pgtest; the
#     cluster Debian makes and starts when this script installs it is
#     stopped, and its service disabled), etcd-server (the Kubernetes
#     tests' etcd, testutil/kubetest; its service is stopped and disabled
#     too), chromium (the web console's tests drive it headless);
#   - the Kubernetes control plane the Kubernetes tests run
#     (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl of
#     tools/kube's release), built static once into $HEARTH_CACHE/kube
#     (scripts/kube.sh: about 6 minutes on 2 quiet cores the first time);
#   - gVisor's runsc, built static from the Go module proxy once, with its
#     seccomp filters precompiled as gVisor's releases have them, for
#     the configurations a hearth sandbox can have (no GPU, TPU or RDMA
#     proxies) and their bytecode in the binary's data rather than copied
#     to every sandbox's heap (scripts/runsc-seccomp), and cached in
#     $HEARTH_CACHE (default /var/cache/hearth); linked into
#     /usr/local/bin;
#   - npm (apt), then Node 22 and the npm packages of the real-client
#     tests: the MCP conformance suite and TypeScript SDK, and the Sprites
#     JavaScript SDK, from npm, cached in $HEARTH_CACHE/node22,
#     $HEARTH_CACHE/mcp-js and $HEARTH_CACHE/sprites-js;
#   - bin/hearth, bin/hearth-kube (hearth with its Kubernetes daemons) and
#     bin/hearth-agent (static) in the checkout.
# Safe to run again: it only does what is missing. Needs root and Go >= 1.26.
set -euo pipefail

cd "$(dirname "$0")/.."
cache=${HEARTH_CACHE:-/var/cache/hearth}
# The gVisor version is scripts/runsc-seccomp/go.mod's; the cache's stamp
# also names the precompiled filters, so a runsc built without them, with
# all of gVisor's (which cost every sentry 4 MB), or with their bytecode
# copied to the heap at registration, is built again.
runsc_version=$(awk '$1 == "gvisor.dev/gvisor" || $2 == "gvisor.dev/gvisor" {print $NF}' scripts/runsc-seccomp/go.mod | head -1)
runsc_stamp="$runsc_version+seccomp-nodevices-static"
# The MCP real-client tests (test/e2e/mcp_conformance_test.go and
# mcp_client_test.go): Node 22 (the conformance suite needs it; the host's
# Node may be older) and exact versions of the npm packages they run.
node_version=22.23.3
mcp_js_packages="@modelcontextprotocol/conformance@0.1.16 @modelcontextprotocol/sdk@1.32.2"
# The Sprites real-client test (test/e2e/sprites_js_client_test.go) runs the
# official JavaScript SDK, at an exact version, with the same Node.
sprites_js_packages="@fly/sprites@0.1.0"

say() { printf 'install: %s\n' "$*" >&2; }

if [ "$(id -u)" != 0 ]; then
	say "run as root (hearth manages mounts, cgroups and runtimes)"; exit 1
fi
if ! command -v go >/dev/null; then
	export PATH=$PATH:/usr/local/go/bin
fi
command -v go >/dev/null || { say "Go is missing: install Go 1.26 or newer (https://go.dev/doc/install)"; exit 1; }

need=()
for pair in chromium:chromium etcd:etcd-server runc:runc debootstrap:debootstrap mkfs.btrfs:btrfs-progs losetup:mount ip:iproute2 iptables:iptables ipset:ipset npm:npm python3:python3 docker-registry:docker-registry skopeo:skopeo umoci:umoci htpasswd:apache2-utils; do
	cmd=${pair%%:*} pkg=${pair#*:}
	command -v "$cmd" >/dev/null || need+=("$pkg")
done
# Postgres's initdb and postgres are not on PATH: Debian keeps them in
# /usr/lib/postgresql/N/bin, where testutil/pgtest looks.
installed_postgresql=
if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
	need+=(postgresql)
	installed_postgresql=1
fi
if [ ${#need[@]} -gt 0 ]; then
	say "apt-get install ${need[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# Debian's docker-registry starts a service on port 5000 when installed; the
# tests start their own registries, so it stays off (when systemd runs).
if [ -d /run/systemd/system ] && { systemctl is-enabled --quiet docker-registry || systemctl is-active --quiet docker-registry; } 2>/dev/null; then
	say "stopping and disabling the docker-registry service"
	systemctl disable --now --quiet docker-registry
fi
# So does Debian's etcd-server, on port 2379: the Kubernetes tests run
# their own etcd on free ports.
if [ -d /run/systemd/system ] && { systemctl is-enabled --quiet etcd || systemctl is-active --quiet etcd; } 2>/dev/null; then
	say "stopping and disabling the etcd service"
	systemctl disable --now --quiet etcd
fi
# Debian's postgresql makes a cluster (main, port 5432) when installed and
# starts it where services start; the tests run their own clusters on free
# ports, so the one this run installed stays off. A Postgres that was here
# before is left alone: it may be the operator's.
if [ -n "$installed_postgresql" ]; then
	if [ -d /run/systemd/system ]; then
		systemctl disable --now --quiet postgresql 2>/dev/null || true
	fi
	if command -v pg_lsclusters >/dev/null; then
		{ pg_lsclusters --no-header || true; } | awk '$4 == "online" {print $1, $2}' | while read -r version name; do
			say "stopping the postgresql cluster $version/$name that installing postgresql started"
			pg_ctlcluster "$version" "$name" stop || true
		done
	fi
fi

mkdir -p "$cache/bin"
runsc=$cache/bin/runsc
if [ ! -x "$runsc" ] || [ "$(cat "$cache/bin/runsc.version" 2>/dev/null)" != "$runsc_stamp" ]; then
	say "building gVisor runsc $runsc_version with precompiled seccomp filters (static; about 10 minutes on 2 cores the first time, cached after)"
	(cd scripts/runsc-seccomp && GOFLAGS=-mod=mod go run . -o "$runsc.new")
	mv "$runsc.new" "$runsc"
	echo "$runsc_stamp" > "$cache/bin/runsc.version"
fi
ln -sf "$runsc" /usr/local/bin/runsc

# Node 22 comes from npm's node-linux-<arch> package (the binary that the
# `node` package's install script would fetch, without the script).
node22=$cache/node22
if [ "$("$node22/node_modules/.bin/node" --version 2>/dev/null)" != "v$node_version" ]; then
	case $(uname -m) in
	x86_64) node_arch=x64 ;;
	aarch64) node_arch=arm64 ;;
	*) say "no npm build of Node for $(uname -m)"; exit 1 ;;
	esac
	say "installing Node $node_version into $node22 (from npm)"
	rm -rf "$node22"
	npm install --prefix "$node22" --no-audit --no-fund --loglevel=error "node-linux-$node_arch@$node_version" >/dev/null
	ln -sf ../node-linux-$node_arch/bin/node "$node22/node_modules/.bin/node"
fi
# npm_packages DIR PACKAGES installs PACKAGES (exact versions, one word
# each) into $cache/DIR with Node 22, unless that set is already there.
npm_packages() {
	local dir=$cache/$1 packages=$2
	if [ "$(cat "$dir/versions" 2>/dev/null)" != "$packages" ]; then
		say "installing $packages into $dir (from npm)"
		rm -rf "$dir"
		# shellcheck disable=SC2086 # one word per package
		PATH=$node22/node_modules/.bin:$PATH npm install --prefix "$dir" --no-audit --no-fund --loglevel=error --save-exact $packages >/dev/null
		echo "$packages" > "$dir/versions"
	fi
}
npm_packages mcp-js "$mcp_js_packages"
npm_packages sprites-js "$sprites_js_packages"

bash scripts/kube.sh >/dev/null

say "building bin/hearth, bin/hearth-kube and bin/hearth-agent"
mkdir -p bin
# bin/hearth links no Kubernetes library (the tag nokube; see
# cmd/hearth/kube_omitted.go): every command-line call starts in a fifth of
# the time. It hands a daemon in a cluster to bin/hearth-kube.
CGO_ENABLED=0 go build -trimpath -tags nokube -o bin/hearth ./cmd/hearth
CGO_ENABLED=0 go build -trimpath -o bin/hearth-kube ./cmd/hearth
CGO_ENABLED=0 go build -trimpath -o bin/hearth-agent ./cmd/hearth-agent
