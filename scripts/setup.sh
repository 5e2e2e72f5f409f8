#!/usr/bin/env bash
# Installs Opal's build dependencies from Debian 12 packages and builds the release
# preset's `opal` binary (build/release/opal); --all builds every target (the unit
# tests and benchmarks too: what `ctest --preset release` runs); --no-build nothing.
# Usage: scripts/setup.sh [--all | --no-build]
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "") targets=(--target opal) ;;
  --all | --no-build) targets=() ;;
  *) echo "usage: scripts/setup.sh [--all | --no-build]" >&2; exit 2 ;;
esac

PKGS=(build-essential cmake ninja-build pkg-config python3
      libfmt-dev nlohmann-json3-dev libboost1.81-dev libcpp-httplib-dev libcli11-dev libpcre2-dev libcurl4-openssl-dev libssl-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      clang-format-14  # scripts/check_format.sh
      haproxy  # tests/deploy: replicas behind a load balancer (deploy/haproxy)
      chromium  # tests/server: the chat page (server/webui) in a headless browser, driven by playwright-core
      g++-aarch64-linux-gnu qemu-user  # the neon preset (NEON kernels under qemu), scripts/cross_check_rocket.sh
      gcc-riscv64-unknown-elf binutils-riscv64-unknown-elf)  # ET-SoC-1 device kernels (cmake/et_kernels.cmake)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# tests/server drives `opal serve` with the official `openai` npm client and the chat page
# with playwright-core (pointed at Debian's chromium): Node.js + npm, then the locked
# packages (node_modules is git-ignored; the test fails without it).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing nodejs npm"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi
(cd tests/server/node && npm ci --no-audit --no-fund --loglevel=error)

[ "${1:-}" = "--no-build" ] && exit 0
cmake --preset release >/dev/null
cmake --build --preset release -j"$(nproc)" "${targets[@]}"
