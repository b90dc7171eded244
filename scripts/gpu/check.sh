#!/usr/bin/env bash
# check.sh: the GPU check of issue 24 (piece A: CUDA kernels), the one prepared command a lent GPU
# machine runs over .gpu/ (made here by scripts/gpu/build_carry.sh):
#   run(command="bash scripts/gpu/check.sh", carry=[".gpu"], timeout_s=420)
# 1. prelude: the carried .debs unpacked into /tmp/rt (never into /); LD_LIBRARY_PATH set for our
#    binaries only (not for python3), with cuBLASLt from the machine's CUDA / torch wheels; probes
#    of nvidia-smi, the OS and torch; an `ldd -r` gate (a missing library or symbol stops here);
# 2. the GPU tests (test_device, test_cuda_kernels: every CUDA kernel against the CPU kernel);
# 3. bench_cuda_kernels, then bench/torch_ops_cuda.py on the same card;
# 4. logs and JSON under $OUT; bench/gpu_table.py's table printed last.
# Runs in about 3-4 minutes. Exit status: 0 all green, 1 a test failed, 2 no .gpu, 3 the ABI gate.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
OUT="${OUT:-/tmp/megascale-gpu-out}"
mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "--- $1 (+$(( $(date +%s) - t0 )) s)"; }
[ -d .gpu/bin ] || { echo "check.sh: no .gpu/bin: run scripts/gpu/build_carry.sh first and carry .gpu"; exit 2; }

stamp prelude
rt=/tmp/rt
mkdir -p "$rt"
for f in .gpu/debs/*.deb; do [ -e "$f" ] && dpkg -x "$f" "$rt"; done
site=$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null || echo /nonexistent)
cublas=$(find /usr/local/cuda/lib64/ /usr/local/cuda/targets/x86_64-linux/lib/ "$site/nvidia/" -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
MS_LD="$rt/usr/lib/x86_64-linux-gnu:$rt/lib/x86_64-linux-gnu:$rt/usr/lib${cublas:+:$(dirname "$cublas")}"
ld_env="LD_LIBRARY_PATH=$MS_LD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ms() { env "$ld_env" "$@"; }
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 || echo "no nvidia-smi"
  grep -E '^(PRETTY_NAME|VERSION_ID)=' /etc/os-release; ldd --version | head -1; nproc
  echo "cublasLt: ${cublas:-not found}"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available())' 2>&1
} | tee "$OUT/env.txt"
for b in .gpu/bin/*; do
  if ms ldd -r "$b" 2>&1 | grep -E 'not found|undefined symbol'; then
    echo "check.sh: ABI gate: $b cannot load here (see above)"
    exit 3
  fi
done

stamp tests
status=0
log="$OUT/tests.log"
timeout 60 env "$ld_env" .gpu/bin/test_device --gtest_output="json:$OUT/device.json" > "$log" 2>&1 || status=1
timeout 200 env "$ld_env" .gpu/bin/test_cuda_kernels --gtest_output="json:$OUT/kernels.json" >> "$log" 2>&1 || status=1
grep -E 'seed|rel L2 [0-9.e-]+$|differ in bits|^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is|error' "$log" |
  awk '/rel L2/ { split($0, a, "rel L2 "); if (a[2] + 0 > worst) { worst = a[2] + 0; w = $0 } next } { print } END { if (w) print "worst rel L2:" w }' | tail -40

stamp "bench megascale"
timeout 90 env "$ld_env" .gpu/bin/bench_cuda_kernels > "$OUT/ms_kernels.jsonl" 2>> "$log" || { echo "bench_cuda_kernels failed"; status=1; }
stamp "bench torch"
PYTHONUNBUFFERED=1 timeout 100 python3 bench/torch_ops_cuda.py --out "$OUT/torch_ops.jsonl" >> "$log" 2>&1 || { echo "torch_ops_cuda.py failed"; tail -5 "$log"; }
stamp table
python3 bench/gpu_table.py "$OUT/ms_kernels.jsonl" "$OUT/torch_ops.jsonl" --tests "$OUT/device.json" "$OUT/kernels.json" | tee "$OUT/table.txt"
echo "check.sh: exit $status after $(( $(date +%s) - t0 )) s"
exit $status
