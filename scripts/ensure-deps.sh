#!/usr/bin/env bash
# Installs whatever berth needs and this machine lacks: Debian packages and npm
# packages. Safe to run every time; it does nothing when all is present.
# Usage: ensure-deps.sh [runtime|test]   (default: test, which is a superset)
set -euo pipefail
mode="${1:-test}"
cd "$(dirname "$0")/.."

runtime_pkgs=(nats-server runc nftables skopeo umoci iproute2 python3 python3-cloudpickle iptables procps)
test_pkgs=(postgresql debootstrap docker-registry)
pkgs=("${runtime_pkgs[@]}")
if [ "$mode" = test ]; then pkgs+=("${test_pkgs[@]}"); fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "berth: missing Debian packages: ${missing[*]}; run this as root or install them with apt-get" >&2
    exit 1
  fi
  echo "berth: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # The postgresql package would create and start a system cluster; berth's tests
  # start their own in a temporary directory, so the default cluster is not made.
  if printf '%s\n' "${missing[@]}" | grep -qx postgresql; then
    mkdir -p /etc/postgresql-common
    if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
      echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.conf
    fi
  fi
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

node_major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$node_major" -lt 20 ]; then
  echo "berth: Node.js 20 or newer is required (found $(node -v))" >&2
  exit 1
fi

# npm packages: install when node_modules is absent or older than the lock file.
stamp=node_modules/.package-lock.json
if [ ! -e "$stamp" ] || [ package-lock.json -nt "$stamp" ] || [ package.json -nt "$stamp" ]; then
  echo "berth: installing npm packages"
  if [ -e package-lock.json ]; then npm ci --no-audit --no-fund; else npm install --no-audit --no-fund; fi
fi
