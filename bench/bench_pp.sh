#!/usr/bin/env bash
# bench_pp.sh: the pipeline bubble, measured against its closed form.
#
# An 8-layer GPT (C=512, 8 heads, a 1024-token vocabulary so the LM head does not outweigh a stage), random tokens, AdamW (or LAMB), fp32, one
# compute thread per rank, Gloo (`megascale launch`). For pp = 2 and 4, m = 4, 8, 16 micro-batches
# per step (train.grad_accum; 16 = 4x the batch of 4, MegaScale's argument that LAMB's larger batch
# cuts the bubble), 1F1B and interleaved (v = 2): each stage's mean idle fraction (1 - compute /
# step time, steps 2..N, as `megascale train` reports it at the end) against (p-1)/(v m); then, at
# pp = 2 and m = 8, decoupled sends (waited on at buffer reuse) against paired ones (waited on
# together with the next receive, Megatron's paired send/recv): the time rank 0 waited on pipeline
# sends and receives per step.
# On a 2-core machine pp = 4 oversubscribes the cores: idle time then includes waiting for a core,
# so compare rows with the same pp. Prints the CPU and a markdown table and writes it into
# docs/performance.md between the bench_pp markers.
#
# Usage: bench/bench_pp.sh [--no-doc] [--build DIR] [--steps N] [--optim adamw|lamb]
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MS_BUILD_DIR:-$ROOT/build}
WRITE_DOC=1
STEPS=6
OPTIM=adamw
while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-doc) WRITE_DOC=0 ;;
    --build) BUILD=$2; shift ;;
    --steps) STEPS=$2; shift ;;
    --optim) OPTIM=$2; shift ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) echo "bench_pp.sh: unknown argument $1 (see --help)" >&2; exit 1 ;;
  esac
  shift
done
BIN="$BUILD/megascale"
[[ -x "$BIN" ]] || { echo "bench_pp.sh: $BIN not built (cmake --build $BUILD)" >&2; exit 1; }
PY=/usr/bin/python3
OUTDIR="$BUILD/bench_results/pp_$(date +%Y%m%d_%H%M%S)"
mkdir -p "$OUTDIR"
CPU=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "bench_pp: $CPU, $(nproc) cores; results -> $OUTDIR"

B=2; T=128
DATA="$OUTDIR/train.bin"
"$PY" "$ROOT/bench/random_shard.py" "$DATA" $(( (STEPS + 2) * 16 * B * (T + 1) + 4096 )) 1024
cat >"$OUTDIR/cfg.toml" <<EOF
[model]
n_layer = 8
n_head = 8
n_embd = 512
vocab_size = 1024
max_seq_len = $T
[optim]
name = "$OPTIM"
[train]
steps = $STEPS
batch_size = $B
seq_len = $T
eval_every = 0
sample_tokens = 0
threads = 1
progress = "lines"
[data]
train = "$DATA"
shuffle = false
EOF

ROWS=()
run() {  # name pp m schedule decoupled
  local name=$1 pp=$2 m=$3 sched=$4 dec=$5 v=1
  [[ $sched == interleaved ]] && v=2
  local out="$OUTDIR/$name.txt"
  OMP_NUM_THREADS=1 "$BIN" launch --nproc "$pp" -- train "$OUTDIR/cfg.toml" --train.out_dir="$OUTDIR/$name" \
    --parallel.pp="$pp" --parallel.schedule="$sched" --parallel.virtual_stages="$v" --train.grad_accum="$m" \
    --parallel.pp_decoupled="$dec" --parallel.timeout_s=120 >"$out" 2>&1 || { echo "run $name failed:"; tail -20 "$out"; exit 1; }
  local line
  line=$("$PY" - "$out" "$OUTDIR/$name/log.jsonl" "$pp" "$v" "$m" "$sched" "$dec" <<'PYEOF'
import json, re, statistics, sys
out, log, p, v, m, sched, dec = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7]
text = open(out).read()
stages = re.findall(r"stage (\d+): ([0-9.]+)% idle, ([0-9.]+) ms waited", text)
steps = [json.loads(l) for l in open(log) if '"loss"' in l][1:]
step_ms = statistics.median(s["step_ms"] for s in steps)
tok = statistics.median(s["tokens_per_s"] for s in steps)
idle = " / ".join("%.0f%%" % float(i) for _, i, _ in stages)
wait0 = float(stages[0][2]) if stages else float("nan")
closed = 100.0 * (p - 1) / (v * m)
print("| %d | %d | %s | %s | %s | %.0f%% | %.0f | %.1f | %.0f |" % (
    p, m, sched + (" (v=2)" if v == 2 else ""), "decoupled" if dec == "true" else "paired", idle, closed,
    step_ms, wait0, tok))
PYEOF
)
  echo "$line"
  ROWS+=("$line")
}

for pp in 2 4; do
  for m in 4 8 16; do
    for sched in 1f1b interleaved; do
      run "pp${pp}_m${m}_${sched}" "$pp" "$m" "$sched" true
    done
  done
done
run "pp2_m8_1f1b_paired" 2 8 1f1b false
run "pp2_m8_interleaved_paired" 2 8 interleaved false


TABLE="CPU: $CPU, $(nproc) cores; $(date +%Y-%m-%d); Gloo, 8 layers, C=512, V=1024, B=$B, T=$T, $OPTIM, fp32, 1 thread per rank, $STEPS steps (medians / means over steps 2..$STEPS).

| pp | m | schedule | sends | idle per stage (measured) | (p-1)/(v m) | step ms | rank 0 pp wait ms | tokens/s |
|---|---|---|---|---|---|---|---|---|"
for r in "${ROWS[@]}"; do TABLE+=$'\n'"$r"; done
echo "$TABLE"
if [[ $WRITE_DOC == 1 ]]; then
  "$PY" - "$ROOT/docs/performance.md" "$TABLE" "$ROOT/bench" <<'PYEOF'
import sys
path, table = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
from doc_section import write_section
write_section(path, "<!-- bench_pp:begin (written by bench/bench_pp.sh) -->", "<!-- bench_pp:end -->", table,
              keep_previous=True, heading="## Pipeline bubble (bench/bench_pp.sh)")
PYEOF
  echo "bench_pp: table written to docs/performance.md"
fi
