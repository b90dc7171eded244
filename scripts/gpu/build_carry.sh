#!/usr/bin/env bash
# build_carry.sh: prepares .gpu/ (git-ignored through .git/info/exclude) for scripts/gpu/check.sh,
# following docs' route (a): the GPU binaries are built HERE, in build-gpu/ (Release, CUDA on, MPI
# off, only the GPU targets), stripped into .gpu/bin/, and the Debian runtime packages of their
# shared-library closure (glibc, libstdc++ and the CUDA libraries left out: the GPU machine has its
# own) are fetched with `apt-get download` into .gpu/debs/. The lent machine has no network and none
# of our Debian dependencies; check.sh unpacks the .debs into /tmp/rt there.
# Then: run(command="bash scripts/gpu/check.sh comm", carry=[".gpu"], timeout_s=480) (check.sh's modes).
# Builds through flock /tmp/ms-build.lock (shared build machine). MS_JOBS sets -j (default 2);
# MS_SKIP_BUILD=1 packs what build-gpu/ already holds. The default packs issue 24's tests and
# benchmarks (`check.sh full`, `quick`); MS_CARRY=comm packs what `check.sh comm` runs (issue 24's
# tests and issue 25's communication tests, no benchmarks, no Brown data): the whole carried tree
# must stay under the lease's 64 MiB, which both sets at once would not.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
build=build-gpu
targets="test_cuda_kernels test_cuda_training test_device bench_cuda_kernels bench_train megascale"
if [ "${MS_CARRY:-full}" = comm ]; then
  targets="test_device test_cuda_kernels test_cuda_training megascale comm_check test_cuda_comm test_cuda_selfcheck \
test_cuda_layouts test_cuda_checkpoint"
fi
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
[ "${MS_SKIP_BUILD:-0}" = 1 ] || flock /tmp/ms-build.lock sh -c "cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DMEGASCALE_WITH_MPI=OFF -DMEGASCALE_WITH_CUDA=ON >/dev/null && cmake --build $build -j${MS_JOBS:-2} --target $targets"
rm -rf .gpu
mkdir -p .gpu/bin .gpu/debs
for t in $targets; do  # the test tools (comm_check) live in tools/; the tests find them beside themselves
  src="$build/$t"; [ -f "$src" ] || src="$build/tools/$t"
  objcopy --strip-all "$src" ".gpu/bin/$t"
done
# The tokenizer tables beside the binary (sampling) and the Brown corpus of the README's run.
mkdir -p .gpu/bin/share && cp -r "$build/share/megascale" .gpu/bin/share/
if [ "${MS_CARRY:-full}" = comm ]; then :; elif [ -d data/brown ]; then mkdir -p .gpu/data && cp -r data/brown .gpu/data/; else
  echo "build_carry.sh: no data/brown (scripts/setup.sh prepares it): check.sh skips the Brown run"; fi
# The closure's packages, without the C/C++ runtime (the image's are newer and compatible) and CUDA.
skip='^(libc6|libstdc\+\+6|libgcc-s1|libcrypt1|libzstd1|liblzma5|zlib1g)$'
pkgs=$(for b in .gpu/bin/*; do [ -f "$b" ] && ldd "$b"; done | awk '/=> \//{print $3}' | sort -u | grep -v -E 'libcublas|libcudart|/usr/local/cuda' |
  while read -r lib; do
    dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "/usr${lib#/usr}" 2>/dev/null ||
      echo "build_carry.sh: no package owns $lib" >&2
  done | cut -d: -f1 | sort -u | grep -v -E "$skip" || true)
echo "packages: $pkgs"
(cd .gpu/debs && apt-get download $pkgs >/dev/null)
du -sh .gpu/bin .gpu/debs
ls .gpu/bin .gpu/debs
total=$(( $(du -sb .gpu | cut -f1) + $(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) ))
echo "carried with the tree: $(( total / 1048576 )) MiB of the lease's 64"
[ "$total" -lt $(( 63 * 1048576 )) ] || { echo "build_carry.sh: over the 64 MiB a call may carry (MS_CARRY=comm packs less)"; exit 4; }
