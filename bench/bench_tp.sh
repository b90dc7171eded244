#!/usr/bin/env bash
# bench_tp.sh: what MegaScale's tensor-parallel overlap (parallel.tp_chunks) hides, measured.
#
# GPT-2 124M (12 layers, C=768, 12 heads, vocab 50257 padded to a multiple of 128), random tokens,
# AdamW, fp32, one compute thread per rank, sequence parallelism on. For each engine (gloo: under
# `megascale launch`; mpi: under mpirun) and each tp_chunks it trains --tp ranks for a few steps and
# reports the medians after 2 warm-up steps of step ms, tp_exposed_ms (time rank 0's compute thread
# waited on the TP group) and tokens/s; then single-process tp=1 references with 1 and 2 threads.
# Per-rank peak RSS two ways: VmHWM of each rank read from /proc while the second-to-last step runs
# (the training peak) and /usr/bin/time %M around each rank (the whole process, which includes the
# end-of-run gather of the whole model for the export); also the CPU time other processes took during
# each run (/proc/stat), to flag runs that shared the cores. Prints the CPU model, ISA and a markdown
# table and writes the table into docs/performance.md between the bench_tp markers.
#
# Usage: bench/bench_tp.sh [--quick] [--no-doc] [--build DIR] [--tp N] [--engines gloo,mpi]
#                          [--chunks 1,2,4,8] [--steps N] [--batch B] [--seq T] [--no-ref]
#   --quick    2 warm-up + 4 timed steps per run (~2.5 min on 2 cores) instead of 2 + 10 (~4 min)
#   --no-doc   print only; do not touch docs/performance.md
#   --build    CMake build dir with the megascale binary (default: $MS_BUILD_DIR or <repo>/build)
#   --tp       tensor-parallel ranks (default 2; must divide 12 heads, 3072 and the padded vocab)
#   --engines  comma list of gloo, mpi (default gloo,mpi)
#   --chunks   comma list of tp_chunks values (default 1,2,4,8; 1 = no overlap, the reference)
#   --steps    total steps per run including the 2 warm-up steps (overrides --quick's 6 / full 12)
#   --batch/--seq  micro-batch B (default 2) and sequence length T (default 256)
#   --no-ref   skip the tp=1 single-process reference runs
# Env (for runs on emulated hosts / shaped links; defaults are one machine over loopback):
#   MS_TP_LAUNCH_PREFIX  words put before either launcher, e.g. "ip netns exec host0" or "taskset -c 0-3"
#   MS_TP_LAUNCH_ARGS    extra `megascale launch` arguments, e.g. "--store redis://10.0.0.1:6379"
#   MS_TP_MPIRUN_ARGS    extra mpirun arguments, e.g. "--hostfile hosts.txt --map-by node"
#   MS_TP_MPI_IF         network interface for OpenMPI's TCP BTL / OOB (default lo)
# Results (one folder per run, with log.jsonl and rank outputs) are kept in <build>/bench_results/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MS_BUILD_DIR:-$ROOT/build}
MODE=full
WRITE_DOC=1
TP=2
ENGINES=gloo,mpi
CHUNKS=1,2,4,8
STEPS=""
BATCH=2
SEQ=256
REF=1
WARMUP=2
need() { [[ $# -ge 2 ]] || { echo "bench_tp.sh: $1 needs a value (see --help)" >&2; exit 1; }; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) MODE=quick ;;
    --no-doc) WRITE_DOC=0 ;;
    --no-ref) REF=0 ;;
    --build|--tp|--engines|--chunks|--steps|--batch|--seq)
      need "$@"
      case "$1" in
        --build) BUILD=$2 ;; --tp) TP=$2 ;; --engines) ENGINES=$2 ;; --chunks) CHUNKS=$2 ;;
        --steps) STEPS=$2 ;; --batch) BATCH=$2 ;; --seq) SEQ=$2 ;;
      esac
      shift ;;
    --build=*) BUILD=${1#--build=} ;;
    --tp=*) TP=${1#--tp=} ;;
    --engines=*) ENGINES=${1#--engines=} ;;
    --chunks=*) CHUNKS=${1#--chunks=} ;;
    --steps=*) STEPS=${1#--steps=} ;;
    --batch=*) BATCH=${1#--batch=} ;;
    --seq=*) SEQ=${1#--seq=} ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "bench_tp.sh: unknown argument '$1' (see --help)" >&2; exit 1 ;;
  esac
  shift
done
if [[ -z $STEPS ]]; then
  if [[ $MODE == quick ]]; then STEPS=6; else STEPS=12; fi
fi
for v in TP STEPS BATCH SEQ; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "bench_tp.sh: --${v,,} must be a positive integer" >&2; exit 1; }
done
(( STEPS >= WARMUP + 2 )) || { echo "bench_tp.sh: --steps must be >= $((WARMUP + 2)) (2 warm-up + 2 timed)" >&2; exit 1; }
IFS=, read -r -a ENGINE_LIST <<<"$ENGINES"
IFS=, read -r -a CHUNK_LIST <<<"$CHUNKS"
for e in "${ENGINE_LIST[@]}"; do
  [[ $e == gloo || $e == mpi ]] || { echo "bench_tp.sh: unknown engine '$e' (gloo, mpi)" >&2; exit 1; }
done
for k in "${CHUNK_LIST[@]}"; do
  [[ $k =~ ^[1-9][0-9]*$ ]] || { echo "bench_tp.sh: --chunks takes positive integers, got '$k'" >&2; exit 1; }
done

PY=/usr/bin/python3
BIN="$BUILD/megascale"
if [[ ! -x $BIN ]]; then
  if [[ ! -f "$BUILD/build.ninja" && ! -f "$BUILD/Makefile" ]]; then
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  fi
  cmake --build "$BUILD" --target megascale -j2 >/dev/null
fi
[[ " ${ENGINE_LIST[*]} " == *" mpi "* ]] && ! command -v mpirun >/dev/null && {
  echo "bench_tp.sh: engine mpi needs mpirun (apt-get install openmpi-bin)" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "bench_tp.sh: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUTDIR="$BUILD/bench_results/tp-$STAMP-$MODE"
mkdir -p "$OUTDIR"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

CPU=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -n1)
ISA=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'avx2|avx512f|avx512_bf16|amx_bf16|amx_tile' | paste -sd, - || true)
echo "bench_tp: CPU: ${CPU:-unknown}, $(nproc) cores; ISA: ${ISA:-none of avx2/avx512f/avx512_bf16/amx}"
echo "bench_tp: mode=$MODE, tp=$TP, engines=$ENGINES, tp_chunks=$CHUNKS, $STEPS steps ($WARMUP warm-up), B=$BATCH T=$SEQ;" \
     "results -> $OUTDIR; load average at start: $LOAD_START"

# Random tokens (the step time does not depend on them): an llm.c shard, 1024-byte header of 256
# little-endian int32 [20240520, 1, count, 0...] then uint16 tokens.
DATA="$OUTDIR/train.bin"
"$PY" "$ROOT/bench/random_shard.py" "$DATA" $(( (STEPS + 2) * BATCH * (SEQ + 1) * 2 + 4096 )) 50257

# Each rank runs under /usr/bin/time, writing its own file (the rank from mpirun's or the launcher's env).
WRAP="$OUTDIR/rank_time.sh"
cat >"$WRAP" <<'EOF'
#!/bin/sh
# rank_time.sh DIR CMD...: CMD under /usr/bin/time: peak RSS (KiB), user and system CPU seconds into
# DIR/time_rank<r>.txt
dir=$1; shift
exec /usr/bin/time -f "%M %U %S" -o "$dir/time_rank${OMPI_COMM_WORLD_RANK:-${RANK:-0}}.txt" "$@"
EOF
chmod +x "$WRAP"

# Polls VmHWM of the run's megascale ranks (found by executable, "train" and the run folder) and keeps
# the last reading taken while at most steps-2 steps were logged, i.e. before the last step starts
# anywhere: the training peak without the end-of-run gather and export.
SAMPLER='
import json, os, sys, time
run_dir, steps, binary, stop, warmup = sys.argv[1], int(sys.argv[2]), os.path.realpath(sys.argv[3]), sys.argv[4], int(sys.argv[5])
log = os.path.join(run_dir, "log.jsonl")
def logged():
    try:
        return sum(1 for l in open(log) if "\"step_ms\"" in l and "\"loss\"" in l)
    except OSError:
        return 0
def ranks():
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            if os.path.realpath("/proc/%s/exe" % p) != binary:
                continue
            argv = open("/proc/%s/cmdline" % p, "rb").read().split(b"\0")
            if len(argv) < 2 or argv[1] != b"train" or not any(run_dir.encode() in a for a in argv):
                continue
            env = dict(kv.split(b"=", 1) for kv in open("/proc/%s/environ" % p, "rb").read().split(b"\0") if b"=" in kv)
            r = int(env.get(b"OMPI_COMM_WORLD_RANK", env.get(b"RANK", b"0")))
            st = {l.split(":")[0]: int(l.split()[1]) for l in open("/proc/%s/status" % p) if l.startswith(("VmHWM:", "VmRSS:"))}
            if "VmHWM" in st:
                out[r] = st
        except (OSError, ValueError):
            pass
    return out
best, rss, at = {}, {}, 0
while not os.path.exists(stop):
    reading = ranks()
    n = logged()
    if n <= steps - 2 and reading:
        best.update({r: st["VmHWM"] for r, st in reading.items()}); at = n
        if n >= warmup:  # steady state: the largest resident size seen during the timed steps
            for r, st in reading.items():
                rss[r] = max(rss.get(r, 0), st.get("VmRSS", 0))
    time.sleep(0.2)
json.dump({"vmhwm_kib": {str(k): v for k, v in sorted(best.items())}, "steps_logged_at_reading": at,
           "vmrss_max_timed_kib": {str(k): v for k, v in sorted(rss.items())}},
          open(os.path.join(run_dir, "vmhwm.json"), "w"))
'

MODEL_ARGS=(--model.n_layer=12 --model.n_head=12 --model.n_embd=768 --model.vocab_size=50257 --model.pad_vocab_to=128
            --train.batch_size="$BATCH" --train.seq_len="$SEQ" --train.steps="$STEPS" --train.eval_every=0
            --train.sample_tokens=0 --train.progress=lines --train.precision=fp32 --optim.name=adamw
            --data.train="$DATA")
read -r -a PREFIX <<<"${MS_TP_LAUNCH_PREFIX:-}"
read -r -a LAUNCH_EXTRA <<<"${MS_TP_LAUNCH_ARGS:-}"
read -r -a MPI_EXTRA <<<"${MS_TP_MPIRUN_ARGS:-}"
MPI_IF=${MS_TP_MPI_IF:-lo}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

RUNS=()
run_one() {  # name engine ranks threads [extra train overrides...]
  local name=$1 engine=$2 n=$3 threads=$4; shift 4
  local dir="$OUTDIR/$name" rc=0 cmd
  mkdir -p "$dir"
  local train=("$BIN" train "${MODEL_ARGS[@]}" --train.out_dir="$dir/out" --train.threads="$threads" "$@")
  case "$engine" in
    single) cmd=("${PREFIX[@]}" "$WRAP" "$dir" env OMP_NUM_THREADS="$threads" "${train[@]}") ;;
    gloo) cmd=("${PREFIX[@]}" env OMP_NUM_THREADS="$threads" "$BIN" launch --nproc "$n" "${LAUNCH_EXTRA[@]}" --
               "$WRAP" "$dir" "${train[@]}") ;;
    mpi) cmd=("${PREFIX[@]}" env "OMPI_MCA_btl=self,tcp" OMPI_MCA_btl_tcp_if_include="$MPI_IF"
              OMPI_MCA_oob_tcp_if_include="$MPI_IF" mpirun --oversubscribe -np "$n" -x OMP_NUM_THREADS="$threads"
              "${MPI_EXTRA[@]}" "$WRAP" "$dir" "${train[@]}") ;;
  esac
  printf '%q ' "${cmd[@]}" >"$dir/command.txt"
  echo "  $name ..." >&2
  rm -f "$dir/stop"
  "$PY" -c "$SAMPLER" "$dir/out" "$STEPS" "$BIN" "$dir/stop" "$WARMUP" &
  local sampler=$!
  # Wall time and the machine's busy CPU time (/proc/stat) around the run: minus the ranks' own CPU
  # time it gives the CPU that everything else (launcher, sampler, other users) took meanwhile.
  local t0 s0 t1 s1
  t0=$(date +%s.%N); s0=$(head -n1 /proc/stat)
  "${cmd[@]}" >"$dir/stdout.txt" 2>"$dir/stderr.txt" || rc=$?
  t1=$(date +%s.%N); s1=$(head -n1 /proc/stat)
  touch "$dir/stop"
  wait "$sampler" || true
  rm -rf "$dir/out/model"  # the exported model (~500 MB for 124M) is not needed here
  printf '{"name": "%s", "engine": "%s", "ranks": %d, "threads": %d, "rc": %d, "t0": %s, "t1": %s, "stat0": "%s", "stat1": "%s"}\n' \
    "$name" "$engine" "$n" "$threads" "$rc" "$t0" "$t1" "$s0" "$s1" >"$dir/run.json"
  [[ $rc == 0 ]] || echo "  $name FAILED (exit $rc): see $dir/stderr.txt" >&2
  RUNS+=("$dir")
}

# Interleaved (references first, then each tp_chunks on every engine in turn) so that a change of
# the background load does not fall on one engine or one end of the chunk list only; the table
# groups the rows by engine.
if [[ $REF == 1 ]]; then
  run_one "single-tp1-threads1" single 1 1
  run_one "single-tp1-threads2" single 1 2
fi
for k in "${CHUNK_LIST[@]}"; do
  for engine in "${ENGINE_LIST[@]}"; do
    run_one "$engine-tp$TP-chunks$k" "$engine" "$TP" 1 --parallel.tp="$TP" --parallel.sequence_parallel=true \
      --parallel.tp_chunks="$k" --parallel.backend="$engine"
  done
done
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

DOC_ARG=""
[[ $WRITE_DOC == 1 ]] && DOC_ARG="$ROOT/docs/performance.md"
CMDLINE="bench/bench_tp.sh"
[[ $MODE == quick ]] && CMDLINE+=" --quick"
"$PY" - "$OUTDIR" "$WARMUP" "$MODE" "$LOAD_START" "$LOAD_END" "${CPU:-unknown}" "$ISA" "$BATCH" "$SEQ" "$STEPS" \
       "$CMDLINE" "$DOC_ARG" "${RUNS[@]}" <<'PYEOF'
import datetime, json, os, re, statistics, sys

(outdir, warmup, mode, load_start, load_end, cpu, isa, B, T, steps, cmdline, doc), dirs = sys.argv[1:13], sys.argv[13:]
warmup = int(warmup)

def med(xs):
    return statistics.median(xs) if xs else None

rows, notes, parallel_lines = [], [], {}
for d in dirs:
    run = json.load(open(os.path.join(d, "run.json")))
    steps_, events = [], {}
    try:
        for line in open(os.path.join(d, "out", "log.jsonl")):
            j = json.loads(line)
            if "loss" in j and "step_ms" in j:
                steps_.append(j)
            elif "event" in j:
                events[j["event"]] = j["message"]
    except OSError:
        pass
    timed = steps_[warmup:]
    r = dict(run)
    r["timed"] = len(timed)
    r["step_ms"] = med([s["step_ms"] for s in timed])
    r["tp_ms"] = med([s["tp_exposed_ms"] for s in timed if "tp_exposed_ms" in s])
    r["tok_s"] = med([s["tokens_per_s"] for s in timed])
    r["chunks"] = None
    m = re.search(r"chunks(\d+)", run["name"])
    if m:
        r["chunks"] = int(m.group(1))
    r["time_mb"], rank_cpu = [], 0.0
    for rank in range(run["ranks"]):
        try:
            kib, user, system = open(os.path.join(d, f"time_rank{rank}.txt")).read().split()[-3:]
            r["time_mb"].append(int(kib) / 1024)
            rank_cpu += float(user) + float(system)
        except (OSError, ValueError):
            r["time_mb"].append(None)
            rank_cpu = float("nan")
    def busy(stat):  # user nice system idle iowait irq softirq steal: all but idle and iowait
        v = [int(x) for x in stat.split()[1:9]]
        return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")
    wall = run["t1"] - run["t0"]
    r["wall_s"] = wall
    other = (busy(run["stat1"]) - busy(run["stat0"]) - rank_cpu) / wall if wall > 0 else float("nan")
    r["other_cores"] = None if other != other else max(0.0, other)
    try:
        hw = json.load(open(os.path.join(d, "out", "vmhwm.json")))["vmhwm_kib"]
        r["hwm_mb"] = [hw[str(k)] / 1024 if str(k) in hw else None for k in range(run["ranks"])]
    except (OSError, ValueError, KeyError):
        r["hwm_mb"] = [None] * run["ranks"]
    try:
        rs = json.load(open(os.path.join(d, "out", "vmhwm.json")))["vmrss_max_timed_kib"]
        r["rss_mb"] = [rs[str(k)] / 1024 if str(k) in rs else None for k in range(run["ranks"])]
    except (OSError, ValueError, KeyError):
        r["rss_mb"] = [None] * run["ranks"]
    r["params"] = None
    m = re.search(r"tensor parallel: (\d+) parameters and (\d+) logits per rank", events.get("parallel", ""))
    if m:
        r["params"], r["logits"] = int(m.group(1)), int(m.group(2))
        parallel_lines[run["engine"]] = events["parallel"]
    else:
        m = re.search(r"megascale: (\d+) parameters", events.get("start", ""))
        if m:
            r["params"] = int(m.group(1))
    if run["rc"] != 0 or not timed:
        err = ""
        try:
            err = " ".join(open(os.path.join(d, "stderr.txt")).read().split())[-300:]
        except OSError:
            pass
        notes.append(f"{run['name']}: exit {run['rc']}, {len(steps_)} steps logged; {err}")
    rows.append(r)

def f(x, spec="{:.0f}"):
    return "n/a" if x is None else spec.format(x)

def mem(xs):
    return " / ".join(f(x) for x in xs) if xs else "n/a"

ref = {}
for r in rows:
    if r["engine"] in ("gloo", "mpi") and r["chunks"] == 1 and r["step_ms"]:
        ref[r["engine"]] = r["step_ms"]
order = {e: i for i, e in enumerate(dict.fromkeys(r["engine"] for r in rows if r["engine"] != "single"))}
rows.sort(key=lambda r: (order.get(r["engine"], len(order)), r["chunks"] or 0, r["threads"]))
lines = ["| engine | ranks x threads | tp_chunks | step ms | vs tp_chunks=1 | tp exposed ms | tokens/s | "
         "RSS MB per rank during timed steps (max VmRSS) | peak RSS MB per rank before the last step (VmHWM) | "
         "peak RSS MB per rank, whole process (/usr/bin/time) | parameters per rank | CPU outside the ranks (cores) |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
for r in rows:
    eng = {"single": "none (tp=1)"}.get(r["engine"], r["engine"])
    vs = ""
    if r["chunks"] is not None and r["engine"] in ref and r["step_ms"]:
        vs = "reference" if r["chunks"] == 1 else f"{(r['step_ms'] / ref[r['engine']] - 1) * 100:+.1f}%"
    chunks = "—" if r["chunks"] is None else str(r["chunks"])
    tp_ms = "—" if r["engine"] == "single" else f(r["tp_ms"])
    lines.append(f"| {eng} | {r['ranks']} x {r['threads']} | {chunks} | {f(r['step_ms'])} | {vs} | {tp_ms} | "
                 f"{f(r['tok_s'])} | {mem(r['rss_mb'])} | {mem(r['hwm_mb'])} | {mem(r['time_mb'])} | {f(r['params'], '{:,}')} | {f(r['other_cores'], '{:.2f}')} |")
table = "\n".join(lines)
now = datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC")
timed = sorted({r["timed"] for r in rows})
body = f"""Generated by `{cmdline}` on {now} ({mode} mode; results in `{os.path.relpath(outdir, os.path.dirname(os.path.dirname(outdir)))}` of the build dir).

- CPU: {cpu}, {os.cpu_count()} cores ({isa}).
- GPT-2 124M (12 layers, C=768, 12 heads, vocab 50257 padded to 50304), fp32, AdamW, B={B}, T={T},
  random tokens; sequence parallelism on; `train.threads=1` per rank. Medians over steps
  {warmup + 1}-{steps} ({', '.join(map(str, timed))} timed steps per run). tokens/s = B*T / step time (the TP ranks share one batch).
- tp exposed ms: time rank 0's compute thread waited on the TP group in a step (`tp_exposed_ms`).
- Memory per rank (rank 0 / rank 1), read from /proc/<pid>/status every 0.2 s: the largest VmRSS seen during
  the timed steps (steady state), and VmHWM (high-water mark since start, including start-up) at the last
  reading before the final step; "whole process" = `/usr/bin/time -f %M` around each rank, which also covers
  the end of the run (the whole model's parameters, gathered over rank 0's TP group or copied at tp=1, for
  the export that rank 0 writes).
- CPU outside the ranks: (busy CPU time of the machine from /proc/stat - the ranks' user + system time) / wall
  time of the run, in cores: the launcher or mpirun, the memory sampler and whatever else ran meanwhile. Well
  above ~0.1 means another workload shared the 2 cores during that run.
- Load average (1/5/15 min) at start: {load_start}; at end: {load_end}. Other engineers use this machine.

{table}
"""
if notes:
    body += "\nFailed or incomplete runs:\n" + "\n".join(f"- {n}" for n in notes) + "\n"
if parallel_lines:
    body += "\nRun log \"parallel\" line: " + "; ".join(f"{k}: `{v}`" for k, v in parallel_lines.items()) + "\n"
print(body)

if doc:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(doc)), "..", "bench"))
    from doc_section import write_section
    write_section(doc, "<!-- bench_tp:begin (written by bench/bench_tp.sh) -->", "<!-- bench_tp:end -->", body,
                  heading="## Tensor parallelism (bench/bench_tp.sh)")
    print(f"bench_tp: wrote {doc}")
PYEOF
