#!/usr/bin/env bash
# Installs what the benchmarks in bench/ need and this machine lacks: berth's
# own runtime and test dependencies (scripts/ensure-deps.sh) plus the
# reference container engines the benchmarks compare with. Safe to run every
# time; it does nothing when all is present.
# Usage: bench-deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# berth itself, the debootstrap test rootfs and the OCI tools (skopeo, umoci).
bash scripts/ensure-deps.sh test

# podman (with conmon) and containerd (ctr, containerd-shim-runc-v2) are the
# references in bench/container-start; both use the runc ensure-deps installs.
bench_pkgs=(podman conmon containerd)

missing=()
for p in "${bench_pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "berth bench: missing Debian packages: ${missing[*]}; run this as root or install them with apt-get" >&2
    exit 1
  fi
  echo "berth bench: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The containerd package enables a system daemon where systemd runs; the
# benchmark starts its own containerd (own root, state and socket) and never
# uses a system one.
