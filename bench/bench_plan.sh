#!/usr/bin/env bash
# bench_plan.sh: `megascale plan` against measured runs on this machine (planner.md §6).
#
# Calibrates this host (`megascale plan --calibrate-host --ranks 2`, about a minute), then trains
# six short runs of the README's model (configs/brown.toml's [model]: 4 layers, C=256, parallel
# block, sliding window) on random tokens, B=8 x T=256 per micro-batch: 1 rank fp32, 1 rank bf16,
# DP 2 (ZeRO-2), TP 2 (sequence parallel), PP 2 1F1B and PP 2 interleaved (v=2), 4 micro-batches
# per step for the pipelines; the multi-rank runs in train.precision=auto, over Gloo
# (`megascale launch`). For each it prints the planned step time of the very same config and
# overrides (`megascale plan CFG --overrides --cluster host.toml --gpus R --json`) against the
# measured median step (steps 3..N of log.jsonl), the error, and the planned time split beside
# the run's segment timers (the busiest rank's records: forward, backward, optimizer; the rest of the step),
# and the planned memory per rank beside the largest rank's peak RSS (/usr/bin/time).
# Prints the CPU and a markdown table and writes it into docs/performance.md between the
# bench_plan markers. Timing stays out of tests (DEVELOPERS.md); this is where it is checked.
#
# Usage: bench/bench_plan.sh [--no-doc] [--build DIR] [--steps N] [--host FILE (skip calibration)]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MS_BUILD_DIR:-$ROOT/build}
WRITE_DOC=1
STEPS=8
HOST=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-doc) WRITE_DOC=0 ;;
    --build) BUILD=$2; shift ;;
    --steps) STEPS=$2; shift ;;
    --host) HOST=$2; shift ;;
    -h|--help) sed -n 2,17p "$0"; exit 0 ;;
    *) echo "bench_plan.sh: unknown argument $1 (see --help)" >&2; exit 1 ;;
  esac
  shift
done
BIN="$BUILD/megascale"
[[ -x "$BIN" ]] || { echo "bench_plan.sh: $BIN not built (cmake --build $BUILD)" >&2; exit 1; }
PY=/usr/bin/python3
OUTDIR="$BUILD/bench_results/plan_$(date +%Y%m%d_%H%M%S)"
mkdir -p "$OUTDIR"
CPU=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "bench_plan: $CPU, $(nproc) cores; results -> $OUTDIR"
if [[ -z $HOST ]]; then
  HOST="$OUTDIR/host.toml"
  "$BIN" plan --calibrate-host --ranks 2 --out "$HOST" >"$OUTDIR/calibrate.log" 2>&1 ||
    { echo "calibration failed:"; tail -20 "$OUTDIR/calibrate.log"; exit 1; }
fi
B=8; T=256
DATA="$OUTDIR/train.bin"
"$PY" "$ROOT/bench/random_shard.py" "$DATA" $(( (STEPS + 2) * 2 * 4 * B * (T + 1) + 4096 )) 50257
sed -n '/^\[model\]/,/^$/p' "$ROOT/configs/brown.toml" >"$OUTDIR/cfg.toml"
cat >>"$OUTDIR/cfg.toml" <<EOC
[data]
train = "$DATA"
shuffle = false
[train]
precision = "auto"
steps = $STEPS
batch_size = $B
seq_len = $T
eval_every = 0
sample_tokens = 0
progress = "lines"
[checkpoint]
every = 0
EOC
ROWS=()
run() {  # name ranks overrides...
  local name=$1 ranks=$2; shift 2
  local out="$OUTDIR/$name.txt" cmd=("$BIN")
  [[ $ranks -gt 1 ]] && cmd+=(launch --nproc "$ranks" --)
  /usr/bin/time -f "%M" -o "$OUTDIR/$name.rss" "${cmd[@]}" train "$OUTDIR/cfg.toml" --train.out_dir="$OUTDIR/$name" "$@" >"$out" 2>&1 ||
    { echo "run $name failed:"; tail -20 "$out"; exit 1; }
  "$BIN" plan "$OUTDIR/cfg.toml" "$@" --cluster "$HOST" --gpus "$ranks" --json >"$OUTDIR/$name.plan.json" ||
    { echo "plan $name failed"; exit 1; }
  local line
  line=$("$PY" - "$name" "$OUTDIR/$name" "$OUTDIR/$name.plan.json" "$OUTDIR/$name.rss" <<'PYEOF'
import json, statistics, sys
name, run, plan = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
rss = float(open(sys.argv[4]).read().split()[-1]) / 1024  # MiB: the largest process (a rank)
mem = plan["memory_per_device_gib"]["total"] * 1024
steps = [json.loads(l) for l in open(run + "/log.jsonl") if '"loss"' in l][2:]
meas = statistics.median(s["step_ms"] for s in steps)
import glob
def segments(path):
    rec = [json.loads(l) for l in open(path)]
    return [r["ms"] for r in rec if r.get("type") == "step"][2:]
# The busiest rank's records (the plan's split is the busiest stage's): the most forward + backward.
segs = max((segments(p) for p in sorted(glob.glob(run + "/records/rank-*.jsonl"))),
           key=lambda s: statistics.median(x.get("forward", 0.0) + x.get("backward", 0.0) for x in s))
seg = lambda k: statistics.median(s.get(k, 0.0) for s in segs)
fwd, bwd, opt = seg("forward"), seg("backward"), seg("optimizer")
p = plan["step_time_s"] * 1e3
sp = {k: v * 1e3 for k, v in plan["time_split_s"].items()}
comp = sp["compute"] + sp["recompute"] + sp["tp_exposed"]
print("| %s | %.0f | %.0f | %+.1f%% | %.0f / %.0f | %.0f / %.0f | %.0f / %.0f | %.0f bubble, %.0f pp, %.0f dp | %.0f | %.0f | %+.1f%% |" % (
    name, p, meas, 100.0 * (p - meas) / meas, comp, fwd + bwd, sp["optimizer"], opt,
    p - comp - sp["optimizer"], meas - fwd - bwd - opt, sp["bubble"], sp["pp_exposed"], sp["dp_exposed"],
    mem, rss, 100.0 * (mem - rss) / rss))
PYEOF
)
  echo "$line"
  ROWS+=("$line")
}
run "1 rank fp32" 1 --train.precision=fp32
run "1 rank bf16" 1 --train.precision=bf16
run "dp 2" 2 --parallel.dp=2
run "tp 2" 2 --parallel.tp=2
run "pp 2 1f1b" 2 --parallel.pp=2 --train.grad_accum=4
run "pp 2 interleaved" 2 --parallel.pp=2 --parallel.schedule=interleaved --parallel.virtual_stages=2 --train.grad_accum=4
TABLE="CPU: $CPU, $(nproc) cores; $(date +%Y-%m-%d); the README's model (4 layers, C=256, V=50257), B=$B, T=$T, Gloo; measured: median step over steps 3..$STEPS; planned: \`megascale plan\` of the same config on this host's calibrated file. Split columns: planned / measured ms (compute = forward + backward on the busiest rank; rest = the step less forward, backward and optimizer); memory: planned per rank against the largest rank's peak RSS.
| run | planned ms | measured ms | error | compute | optimizer | rest | planned rest | planned MiB | peak RSS MiB | error |
|---|---|---|---|---|---|---|---|---|---|---|"
for r in "${ROWS[@]}"; do TABLE+=$'\n'"$r"; done
echo "$TABLE"
if [[ $WRITE_DOC == 1 ]]; then
  "$PY" - "$ROOT/docs/performance.md" "$TABLE" "$ROOT/bench" <<'PYEOF'
import sys
path, table = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
from doc_section import write_section
write_section(path, "<!-- bench_plan:begin (written by bench/bench_plan.sh) -->", "<!-- bench_plan:end -->", table,
              keep_previous=True, heading="## Planner against measured runs (bench/bench_plan.sh)")
PYEOF
  echo "bench_plan: table written to docs/performance.md"
fi
