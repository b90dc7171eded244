#!/usr/bin/env bash
# bench_obs.sh: what the always-on records cost (issue 12's budget: under 1% of step time).
#
# The same training run with obs.records=true (default: segment timers, collectives and steps
# streamed to <out_dir>/records/) and obs.records=false (compute track off, no record file), in
# alternation (on, off, on, off, ...) so drifts of the machine hit both alike:
#   1. one process, 2 threads: configs/test_tiny.toml (C=64, 4 layers, GPT-2 vocabulary), B=8 T=64
#      (a short step, so fixed per-record costs weigh the most);
#   2. dp = 4 under `megascale launch` (4 ranks, 1 thread each: oversubscribed; more collectives and
#      four record files).
# Step time = median of step_ms over steps 3..N from rank 0's log.jsonl; the ratio is on / off of the
# medians over the rounds. Prints the CPU and a markdown table and writes it into docs/performance.md
# between the bench_obs markers (keeping the previous run's table). ~3 minutes on 2 cores; results in
# <build>/bench_results/obs_<timestamp>/.
#
# Usage: bench/bench_obs.sh [--no-doc] [--build DIR] [--rounds R] [--steps N]
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MS_BUILD_DIR:-$ROOT/build}
WRITE_DOC=1
ROUNDS=3
STEPS=60
while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-doc) WRITE_DOC=0 ;;
    --build) BUILD=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --steps) STEPS=$2; shift ;;
    *) echo "bench_obs: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
BIN=$BUILD/megascale
[[ -x $BIN ]] || { echo "bench_obs: $BIN not found (build first)" >&2; exit 1; }
DATA=$ROOT/data/brown/train_000000.bin
[[ -f $DATA ]] || { echo "bench_obs: $DATA not found (scripts/run.sh prepares it)" >&2; exit 1; }
OUTDIR=$BUILD/bench_results/obs_$(date +%Y%m%d_%H%M%S)
mkdir -p "$OUTDIR"
cp "$BIN" "$OUTDIR/megascale"
BIN=$OUTDIR/megascale
CPU=$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n1)
[[ -n $CPU ]] || CPU=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "bench_obs: CPU: ${CPU:-unknown}, $(nproc) cores; $ROUNDS rounds of $STEPS steps; results -> $OUTDIR" >&2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

common=(--data.train="$DATA" --data.val= --train.steps="$STEPS" --train.batch_size=8 --train.sample_tokens=0
        --train.progress=lines --checkpoint.every=0)
run() {  # NAME RECORDS EXTRA PREFIX...  (EXTRA: train options after the common ones)
  local name=$1 rec=$2 extra=$3; shift 3
  # shellcheck disable=SC2086
  "$@" train "$ROOT/configs/test_tiny.toml" "${common[@]}" $extra --obs.records="$rec" --train.out_dir="$OUTDIR/$name" \
    > "$OUTDIR/$name.out" 2>&1 || { echo "bench_obs: $name failed (see $OUTDIR/$name.out)" >&2; exit 1; }
}
for r in $(seq 1 "$ROUNDS"); do
  for rec in true false; do
    echo "bench_obs: round $r, records=$rec" >&2
    run "one_${rec}_$r" "$rec" "--train.threads=2" "$BIN"
    run "dp4_${rec}_$r" "$rec" "--parallel.dp=4 --train.threads=1" "$BIN" launch --nproc 4 --
  done
done

/usr/bin/python3 - "$OUTDIR" "$ROUNDS" "$CPU" "$WRITE_DOC" "$ROOT" <<'PY'
import json, statistics, sys, os
out, rounds, cpu, write_doc, root = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1", sys.argv[5]
def median_step(name):
    ms = [json.loads(l)["step_ms"] for l in open(f"{out}/{name}/log.jsonl") if '"step_ms"' in l]
    return statistics.median(ms[2:])
rows = []
for kind, label in (("one", "1 process, 2 threads"), ("dp4", "dp = 4 (4 ranks on 2 cores)")):
    on = [median_step(f"{kind}_true_{r}") for r in range(1, rounds + 1)]
    off = [median_step(f"{kind}_false_{r}") for r in range(1, rounds + 1)]
    recs = sum(1 for f in os.listdir(f"{out}/{kind}_true_1/records") for _ in open(f"{out}/{kind}_true_1/records/{f}"))
    ratio = statistics.median(on) / statistics.median(off)
    rows.append(f"| {label} | {statistics.median(off):.1f} | {statistics.median(on):.1f} | {ratio:.3f} | "
                f"{', '.join(f'{a / b:.3f}' for a, b in zip(on, off))} | {recs} |")
body = (f"CPU: {cpu}, {os.cpu_count()} cores; configs/test_tiny.toml (4 layers, C=64, GPT-2 vocabulary), B=8, T=64, "
        f"{rounds} rounds alternating records on/off; step = median step_ms over steps 3..N of rank 0.\n\n"
        "| run | step ms, records off | step ms, records on | on / off | per round | records written (one run) |\n"
        "|---|---|---|---|---|---|\n" + "\n".join(rows))
print(body)
if write_doc:
    sys.path.insert(0, os.path.join(root, "bench"))
    from doc_section import write_section
    write_section(os.path.join(root, "docs/performance.md"), "<!-- bench_obs:begin -->", "<!-- bench_obs:end -->",
                  body, keep_previous=True, heading="## Always-on records (bench/bench_obs.sh)",
                  intro="What obs.records costs a step: the same run with the per-rank record files on and off.")
PY
