#!/usr/bin/env bash
# check.sh: the GPU check of issues 24 and 25, the one prepared command a lent GPU machine runs over
# .gpu/ (made here by scripts/gpu/build_carry.sh):
#   run(command="bash scripts/gpu/check.sh comm", carry=[".gpu"], timeout_s=480)
# Modes: `quick` (1, 2, 4), `comm` (1, 2, 3: issue 25's check, about 2 minutes), `train` (1 and
# the GPT-2 124M training benchmarks of 4), `full` (everything).
# 1. prelude: the carried .debs unpacked into /tmp/rt (never into /); LD_LIBRARY_PATH set for our
#    binaries only (not for python3), with cuBLASLt and NCCL from the machine's CUDA / torch wheels;
#    probes of nvidia-smi, the OS, torch and its NCCL, the compute mode and MPS; an `ldd -r` gate (a
#    missing library or symbol stops here);
# 2. the GPU tests of issue 24 (test_device, test_cuda_kernels: every CUDA kernel against the CPU
#    kernel, the Llama-style ones included; test_cuda_training: GPU training against the CPU run,
#    GPT-2 and Llama-style configurations, rerun bits, recomputation's bits, no allocation after
#    step 1, training state moved between devices); the planner's compute constants of the card
#    (`megascale plan --calibrate-host --device cuda`, issue 38);
# 3. communication on GPU buffers (issue 25): test_cuda_comm (NCCL at world size 1: every op and
#    dtype, groups, a deadline; staged Gloo with 2 and 4 processes sharing the GPU; event ordering),
#    test_cuda_selfcheck, test_cuda_layouts (dp2, tp2, pp2, pp2 interleaved, dp2 x tp2 against the
#    one-GPU run, itself against the CPU run; the delayed-gradient ordering test),
#    test_cuda_checkpoint (exact resume from GPU state; the stage-1 stall against a synchronous
#    save), and `megascale selfcheck --device cuda` on NCCL and in two processes over staged Gloo;
# 4. the README's Brown run on the GPU, then GPT-2 124M (T 1024, B 16) training: bench_train
#    --train.device=cuda in bf16 and fp32, PyTorch (torch_gpt.py --device cuda) compiled and eager,
#    megascale bf16 again (drift); bench_cuda_kernels and bench/torch_ops_cuda.py (full mode only);
# 5. logs under $OUT (at most 8 files come back); the tables last.
# Every step's timeout is cut to what is left of the budget (MS_GPU_BUDGET seconds, default 470; a
# step with under 20 s left is skipped and says so), so the script stays under 8 minutes and a rerun
# fits the lease.
# Exit status: 0 all green, 1 a test or run failed, 2 no .gpu, 3 the ABI gate.
set -uo pipefail
mode="${1:-full}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
OUT="${OUT:-/tmp/megascale-gpu-out}"
mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "--- $1 (+$(( $(date +%s) - t0 )) s)"; }
budget=${MS_GPU_BUDGET:-470}
# limit PLANNED: the timeout for the next step, at most what is left of the budget (0: skip it).
limit() { local left=$(( budget - ($(date +%s) - t0) )); [ "$left" -lt 20 ] && { echo 0; return; }; echo $(( $1 < left ? $1 : left )); }
[ -d .gpu/bin ] || { echo "check.sh: no .gpu/bin: run scripts/gpu/build_carry.sh first and carry .gpu"; exit 2; }

stamp prelude
rt=/tmp/rt
mkdir -p "$rt"
for f in .gpu/debs/*.deb; do [ -e "$f" ] && dpkg -x "$f" "$rt"; done
site=$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null || echo /nonexistent)
cublas=$(find /usr/local/cuda/lib64/ /usr/local/cuda/targets/x86_64-linux/lib/ "$site/nvidia/" -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
# NCCL: the image's (torch's nvidia-nccl-cu13 wheel, or the toolkit's); ours is too large to carry.
nccl=$(find "$site/nvidia/" /usr/local/cuda/lib64/ /usr/lib/x86_64-linux-gnu/ -name 'libnccl.so.2*' 2>/dev/null | head -1)
MS_LD="$rt/usr/lib/x86_64-linux-gnu:$rt/lib/x86_64-linux-gnu:$rt/usr/lib${cublas:+:$(dirname "$cublas")}${nccl:+:$(dirname "$nccl")}"
ld_env="LD_LIBRARY_PATH=$MS_LD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ms() { env "$ld_env" "$@"; }
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 || echo "no nvidia-smi"
  grep -E '^(PRETTY_NAME|VERSION_ID)=' /etc/os-release; ldd --version | head -1; nproc
  echo "cublasLt: ${cublas:-not found}"; echo "nccl: ${nccl:-not found}"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available(), "nccl", torch.cuda.nccl.version())' 2>&1
  nvidia-smi --query-gpu=compute_mode,mig.mode.current --format=csv,noheader 2>&1 | sed 's/^/compute mode, MIG: /'
  echo "mps: $(command -v nvidia-cuda-mps-control || ls /usr/local/nvidia/bin 2>/dev/null | grep -i mps || echo none)"
} | tee "$OUT/env.txt"
for b in .gpu/bin/*; do
  [ -f "$b" ] || continue  # share/: the tokenizer tables beside the binary
  if ms ldd -r "$b" 2>&1 | grep -E 'not found|undefined symbol'; then
    echo "check.sh: ABI gate: $b cannot load here (see above)"
    exit 3
  fi
done

status=0
log="$OUT/tests.log"
if [ "$mode" != train ]; then  # `train`: the GPT-2 124M benchmarks alone
stamp tests
js() { [ "$mode" = full ] && echo "--gtest_output=json:$OUT/$1.json"; }  # JSON for the full mode's tables only
timeout 60 env "$ld_env" .gpu/bin/test_device $(js device) > "$log" 2>&1 || status=1
timeout "$(limit 150)" env "$ld_env" .gpu/bin/test_cuda_kernels $(js kernels) >> "$log" 2>&1 || status=1
tlog="$OUT/training_test.log"
timeout "$(limit 120)" env "$ld_env" OMP_NUM_THREADS=8 .gpu/bin/test_cuda_training $(js training) > "$tlog" 2>&1 || status=1
grep -E '^\[measured\]|Failure|Expected|Which is|^\[  (PASSED|FAILED|SKIPPED) ' "$tlog" | tail -30
grep -E 'seed|rel L2 [0-9.e-]+$|differ in bits|^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is|error' "$log" |
  awk '/rel L2/ { split($0, a, "rel L2 "); if (a[2] + 0 > worst) { worst = a[2] + 0; w = $0 } next } { print } END { if (w) print "worst rel L2:" w }' | tail -40

# The planner's compute constants of this card (issue 38): its header and [efficiency] to stdout (the
# file stays here: $OUT returns few files); they go into configs/clusters/<card>.toml.
stamp "planner: megascale plan --calibrate-host --device cuda"
l=$(limit 60)
if [ "$l" = 0 ]; then echo "skipped: GPU calibration (budget)"; else
  timeout "$l" env "$ld_env" .gpu/bin/megascale plan --calibrate-host --device cuda --out /tmp/plan-gpu.toml 2>&1 |
    tail -2
  [ -f /tmp/plan-gpu.toml ] && sed -n '1,4p;/^\[efficiency\]/,$p' /tmp/plan-gpu.toml || status=1
fi

# Communication on GPU buffers (issue 25): the tests, then the self-check as the driver runs it.
comm_part() {
  stamp "communication on GPU buffers"
  local clog="$OUT/comm.log" l t
  : > "$clog"
  for t in test_cuda_comm test_cuda_selfcheck test_cuda_layouts test_cuda_checkpoint; do
    l=$(limit 170)
    if [ "$l" = 0 ]; then echo "skipped: $t (budget)" | tee -a "$clog"; status=1; continue; fi
    echo "=== $t (+$(( $(date +%s) - t0 )) s)" >> "$clog"
    timeout "$l" env "$ld_env" OMP_NUM_THREADS=2 .gpu/bin/$t >> "$clog" 2>&1 || { echo "$t failed"; status=1; }
  done
  stamp "megascale selfcheck --device cuda"
  local sdir=/tmp/ms-selfcheck; rm -rf "$sdir"; mkdir -p "$sdir"
  { timeout 60 env "$ld_env" MEGASCALE_BACKEND=nccl .gpu/bin/megascale selfcheck --device cuda 2>&1 | tail -1
    for r in 0 1; do
      timeout 90 env "$ld_env" MEGASCALE_BACKEND=gloo RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MEGASCALE_STORE=file:$sdir/store \
        MEGASCALE_RUN_ID=sc .gpu/bin/megascale selfcheck --device cuda > "$sdir/out.$r" 2>&1 &
    done
    wait; tail -qn1 "$sdir"/out.*; } | tee -a "$clog" > "$OUT/selfcheck.log"
  grep -q '"ok":false\|"ok": false' "$OUT/selfcheck.log" && { echo "a selfcheck failed"; status=1; }
  grep -c '"ok":true\|"ok": true' "$OUT/selfcheck.log" | grep -qx 3 || { echo "selfcheck: want 3 ok results"; status=1; }
}
comm_table() {
  echo "=== issue 25: communication on GPU buffers ($(head -2 "$OUT/env.txt" | tail -1 | cut -d, -f1))"
  grep -E '^\[measured\]|vs .*: losses within' "$OUT/comm.log"
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\] [A-Za-z]' "$OUT/comm.log" | sed -E 's/^\[ +([A-Z]+) +\] /\1  /' | sort -u
  sed 's/^/selfcheck: /' "$OUT/selfcheck.log" | cut -c1-200
}
fi  # mode != train
if [ "$mode" = comm ] || { [ "$mode" = full ] && [ -x .gpu/bin/test_cuda_comm ]; }; then comm_part; fi
if [ "$mode" = comm ]; then comm_table; echo "check.sh comm: exit $status after $(( $(date +%s) - t0 )) s"; exit $status; fi

# The README's Brown run on the GPU (bf16): it must learn as the CPU run does (the README's CPU
# bf16 run ends at a validation loss of 6.31 nats; accepted within 0.15). Run folder in /tmp, its
# log.jsonl copied to $OUT.
stamp "brown on the GPU"
l=$(limit 120)
if [ "$mode" = train ]; then
  :
elif [ "$l" = 0 ] || [ ! -d .gpu/data/brown ]; then
  echo "skipped: brown run (budget or no .gpu/data/brown)"
else
  rm -rf /tmp/brown-gpu
  if timeout "$l" env "$ld_env" .gpu/bin/megascale train configs/brown.toml --train.device=cuda --train.precision=bf16 \
      --data.train='.gpu/data/brown/train_*.bin' --data.val='.gpu/data/brown/val_*.bin' --train.out_dir=/tmp/brown-gpu \
      --train.progress=lines > "$OUT/brown.log" 2>&1; then
    cp /tmp/brown-gpu/log.jsonl "$OUT/brown_log.jsonl" 2>/dev/null
    python3 - /tmp/brown-gpu/log.jsonl <<'PY' || status=1
import json, sys
evals = [j for j in map(json.loads, open(sys.argv[1])) if "val_loss" in j]
last = evals[-1]["val_loss"] if evals else float("nan")
ok = abs(last - 6.31) <= 0.15
print(f"brown on the GPU: validation loss {last:.3f} after {evals[-1].get('step') if evals else '?'} steps "
      f"(CPU bf16 reference 6.31 +- 0.15): {'ok' if ok else 'FAILED'}")
sys.exit(0 if ok else 1)
PY
  else
    echo "brown run failed"; tail -5 "$OUT/brown.log"; status=1
  fi
fi

if [ "$mode" = quick ]; then echo "check.sh quick: exit $status after $(( $(date +%s) - t0 )) s"; exit $status; fi
# GPT-2 124M training, megascale and PyTorch on this card, interleaved (megascale bf16 again last: drift).
blog="$OUT/train_bench.log"
shape="--model.n_layer=12 --model.n_head=12 --model.n_embd=768 --model.vocab_size=50257 --model.max_seq_len=1024 --train.seq_len=1024 --train.batch_size=16"
tshape="--n-layer 12 --n-head 12 --n-embd 768 --vocab-size 50257 --max-seq-len 1024 --seq-len 1024 --batch-size 16"
ms_train() {  # precision
  stamp "bench megascale train $1"
  local l; l=$(limit 75); [ "$l" = 0 ] && { echo "skipped: megascale $1 (budget)"; return; }
  timeout "$l" env "$ld_env" .gpu/bin/bench_train --train.device=cuda --train.precision="$1" $shape \
    --bench.warmup=2 --bench.steps=8 >> "$OUT/ms_train.jsonl" 2>> "$blog" || { echo "bench_train $1 failed"; tail -3 "$blog"; status=1; }
}
torch_train() {  # precision compile planned_timeout
  stamp "bench torch train $1 compile=$2"
  local l; l=$(limit "$3"); [ "$l" = 0 ] && { echo "skipped: torch $1 compile=$2 (budget)"; return; }
  PYTHONUNBUFFERED=1 timeout "$l" python3 bench/torch_gpt.py --device cuda --precision "$1" --compile "$2" $tshape \
    --warmup 3 --steps 8 >> "$OUT/torch_train.jsonl" 2>> "$blog" || { echo "torch_gpt.py $1 compile=$2 failed"; tail -3 "$blog"; }
}
ms_train bf16
torch_train bf16 1 150
torch_train bf16 0 45
ms_train fp32
torch_train fp32 0 45
ms_train bf16
if [ "$mode" = train ]; then
  (cd bench && python3 gpu_train_table.py "$OUT/ms_train.jsonl" "$OUT/torch_train.jsonl") | tee "$OUT/train_table.txt"
  echo "check.sh train: exit $status after $(( $(date +%s) - t0 )) s"
  exit $status
fi
stamp "bench megascale kernels"
timeout "$(limit 60)" env "$ld_env" .gpu/bin/bench_cuda_kernels > "$OUT/ms_kernels.jsonl" 2>> "$log" || { echo "bench_cuda_kernels failed"; status=1; }
stamp "bench torch ops"
PYTHONUNBUFFERED=1 timeout "$(limit 70)" python3 bench/torch_ops_cuda.py --out "$OUT/torch_ops.jsonl" >> "$log" 2>&1 || { echo "torch_ops_cuda.py failed"; tail -5 "$log"; }
stamp table
python3 bench/gpu_table.py "$OUT/ms_kernels.jsonl" "$OUT/torch_ops.jsonl" --tests "$OUT/device.json" "$OUT/kernels.json" | tee "$OUT/table.txt"
(cd bench && python3 gpu_train_table.py "$OUT/ms_train.jsonl" "$OUT/torch_train.jsonl" --tests "$OUT/training.json") | tee "$OUT/train_table.txt"
[ -f "$OUT/comm.log" ] && comm_table
echo "check.sh: exit $status after $(( $(date +%s) - t0 )) s"
exit $status
