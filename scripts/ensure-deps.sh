#!/usr/bin/env bash
# Installs whatever berth needs and this machine lacks: Debian packages and npm
# packages, and puts `berth` on the PATH. Safe to run every time; it does
# nothing when all is present.
# Usage: ensure-deps.sh [runtime|test]
#   runtime  what running berth needs (`npm start`)
#   test     that plus the test suite's tools (`npm test`; the default)
set -euo pipefail
mode="${1:-test}"
cd "$(dirname "$0")/.."

runtime_pkgs=(nats-server runc nftables skopeo umoci zstd iproute2 python3 python3-cloudpickle iptables procps debootstrap s3fs fuse3 docker-registry e2fsprogs crun runsc)  # zstd: zstd image layers (docs/images.md); crun, runsc: the other OCI runtimes, runsc for isolation="gvisor" (docs/runtime.md); debootstrap: berth up's default Python image; docker-registry: its cluster registry; s3fs, fuse3: CloudBucket mounts (docs/buckets.md); e2fsprogs: each container's disk (mkfs.ext4, filefrag; docs/runtime.md)
test_pkgs=(postgresql systemd curl chromium python3-torch)  # python3-torch: the SDK tests of a gang's gloo all-reduce through the runner; postgresql: the store suite and `berth up --replicas` tests run a server; systemd: systemd-analyze checks the unit files; curl: the deployments end-to-end test calls an endpoint as a user would; chromium: the dashboard browser test (headless, driven by playwright-core). README.md lists both sets; test/cli/two-commands.test.ts keeps them apart
case "$mode" in
  runtime) pkgs=("${runtime_pkgs[@]}") ;;
  test) pkgs=("${runtime_pkgs[@]}" "${test_pkgs[@]}") ;;
  *) echo "ensure-deps: unknown mode $mode (runtime or test)" >&2; exit 2 ;;
esac

# shellcheck source=lib/debian.sh
source scripts/lib/debian.sh
install_missing_debian_packages berth "${pkgs[@]}"

node_major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$node_major" -lt 20 ]; then
  echo "berth: Node.js 20 or newer is required (found $(node -v))" >&2
  exit 1
fi

# npm packages: install when node_modules is absent or older than the lock file.
stamp=node_modules/.package-lock.json
if [ ! -e "$stamp" ] || [ package-lock.json -nt "$stamp" ] || [ package.json -nt "$stamp" ]; then
  echo "berth: installing npm packages"
  # `npm install` follows package-lock.json. Not `npm ci`: npm 11 writes lock
  # files without other platforms' optional packages (biome's), which its own
  # `npm ci` then rejects as out of sync.
  npm install --no-audit --no-fund
fi

# shellcheck source=lib/berth-link.sh
source scripts/lib/berth-link.sh
if [ "$(id -u)" = 0 ]; then
  link_berth_command /usr/local/bin
else
  mkdir -p "$HOME/.local/bin"
  link_berth_command "$HOME/.local/bin"
fi
