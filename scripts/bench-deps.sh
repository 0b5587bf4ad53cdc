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
# buildah is the reference of bench/image-build (`buildah bud`).
bench_pkgs=(podman conmon containerd buildah)

# shellcheck source=lib/debian.sh
source scripts/lib/debian.sh
install_missing_debian_packages "berth bench" "${bench_pkgs[@]}"

# The containerd package enables a system daemon where systemd runs; the
# benchmark starts its own containerd (own root, state and socket) and never
# uses a system one.
