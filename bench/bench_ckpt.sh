#!/usr/bin/env bash
# bench_ckpt.sh: what a checkpoint costs training (the two-stage save) and what a restore costs.
#
# GPT-2 124M (12 layers, C=768, 12 heads, vocab 50257 padded to 50304), random tokens, AdamW, fp32,
# B=4 sequences of T=256 per step (over all ranks). Every run is a real `megascale train`; its numbers
# come from rank 0's log.jsonl (checkpoint messages, step lines) and from wall-clock stamps put on
# each stdout line as it arrives (so a step boundary's stall counts even where step_ms leaves it out).
#  1. One process, 2 threads: every=0 (reference), then async saves every E steps for each E of
#     --every, and synchronous saves (checkpoint.async=false) every E (first E). Runs last 1 + k*E
#     steps (k >= 2, N >= 10), so the mean over steps 2..N holds exactly one save boundary per E steps.
#     Stall = the stage-1 message's ms (the training thread's whole stop at the boundary: copy into
#     the host snapshot, plus any wait for the previous save's writer). Synchronous save = the same
#     message with async=false, which then includes persisting (write, fsync, manifest, publish).
#     Mean step = wall clock between consecutive step lines, steps 2..N (includes the boundaries).
#  2. dp = 2 (`megascale launch --nproc 2`, 1 thread per rank, ZeRO-2): every=0, then async vs
#     synchronous saves every E (first E).
#  3. Restore at dp = 4 (4 ranks on 2 cores: oversubscribed): one step saved, then resumed with
#     checkpoint.broadcast_restore=true (one reader per DP group + broadcast) and =false (every rank
#     reads), and at dp = 1 for reference; the page cache is dropped before each (if root); max over
#     ranks of restore_rank<R>.json "seconds" and the bytes read summed over ranks. The resumed runs
#     have train.steps = the saved step, so they restore, export and stop without training.
# Prints the CPU and a markdown table and writes it into docs/performance.md between the bench_ckpt
# markers (keeping the previous run's table). ~6-7 minutes on 2 cores; results (logs, stamped stdout,
# restore_rank*.json) in <build>/bench_results/ckpt_<timestamp>/; checkpoints and exported models are
# deleted after each run unless --keep. The binary is copied into that folder first (a rebuild during
# the run changes nothing); a run stopped by a signal from outside is run again (3 tries) and noted.
#
# Usage: bench/bench_ckpt.sh [--no-doc] [--build DIR] [--every 3,6,10] [--batch B] [--seq T] [--keep]
#   --no-doc   print only; do not touch docs/performance.md
#   --build    CMake build dir with the megascale binary (default: $MS_BUILD_DIR or <repo>/build)
#   --every    comma list of save intervals for the async single-process runs (default 3,6,10); the
#              first one is also used for the synchronous run and for dp = 2
#   --batch/--seq  sequences per step over all ranks (default 4; a multiple of 4) and T (default 256)
#   --keep     keep checkpoints and exported models (~1.4 GiB each)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MS_BUILD_DIR:-$ROOT/build}
WRITE_DOC=1
EVERY=3,6,10
BATCH=4
SEQ=256
KEEP=0
need() { [[ $# -ge 2 ]] || { echo "bench_ckpt.sh: $1 needs a value (see --help)" >&2; exit 1; }; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-doc) WRITE_DOC=0 ;;
    --keep) KEEP=1 ;;
    --build|--every|--batch|--seq)
      need "$@"
      case "$1" in --build) BUILD=$2 ;; --every) EVERY=$2 ;; --batch) BATCH=$2 ;; --seq) SEQ=$2 ;; esac
      shift ;;
    --build=*) BUILD=${1#--build=} ;;
    --every=*) EVERY=${1#--every=} ;;
    --batch=*) BATCH=${1#--batch=} ;;
    --seq=*) SEQ=${1#--seq=} ;;
    -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
    *) echo "bench_ckpt.sh: unknown argument '$1' (see --help)" >&2; exit 1 ;;
  esac
  shift
done
IFS=, read -r -a EVERY_LIST <<<"$EVERY"
for e in "${EVERY_LIST[@]}" "$BATCH" "$SEQ"; do
  [[ $e =~ ^[1-9][0-9]*$ ]] || { echo "bench_ckpt.sh: --every/--batch/--seq take positive integers, got '$e'" >&2; exit 1; }
done
(( BATCH % 4 == 0 )) || { echo "bench_ckpt.sh: --batch must be a multiple of 4 (dp = 2 and dp = 4 split it)" >&2; exit 1; }

PY=/usr/bin/python3
BIN="$BUILD/megascale"
if [[ ! -x $BIN ]]; then
  if [[ ! -f "$BUILD/build.ninja" && ! -f "$BUILD/Makefile" ]]; then
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  fi
  cmake --build "$BUILD" --target megascale -j2 >/dev/null
fi

OUTDIR="$BUILD/bench_results/ckpt_$(date +%Y%m%d_%H%M%S)"
mkdir -p "$OUTDIR"
# A private copy of the binary: a rebuild of the build dir during the run does not change what is
# measured (ranks are started from /proc/self/exe). Deleted at the end unless --keep.
BINARY_INFO="megascale built $(date -u -r "$BIN" '+%Y-%m-%d %H:%M UTC') (repository HEAD at the start: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'))"
[[ -n $(git -C "$ROOT" status --porcelain -- src apps CMakeLists.txt 2>/dev/null) ]] && \
  BINARY_INFO+=" (src/ or apps/ had uncommitted changes when the bench started)"
cp "$BIN" "$OUTDIR/megascale"
BIN="$OUTDIR/megascale"
CPU=$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n1)
[[ -n $CPU ]] || CPU=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$(date +%s)
echo "bench_ckpt: CPU: ${CPU:-unknown}, $(nproc) cores; every=$EVERY, B=$BATCH, T=$SEQ; results -> $OUTDIR;" \
     "load average at start: $LOAD_START"

DATA="$OUTDIR/train.bin"
"$PY" "$ROOT/bench/random_shard.py" "$DATA" $(( 64 * BATCH * (SEQ + 1) + 4096 )) 50257

# runner.py DIR CMD...: runs CMD with stdout stamped line by line (wall clock) into DIR/stdout.txt and
# stderr into DIR/stderr.txt; DIR/run.json: exit code, wall time, CPU time of CMD and its children,
# and the CPU the rest of the machine used meanwhile (/proc/stat busy time minus CMD's), in cores.
cat >"$OUTDIR/runner.py" <<'EOF'
import json, os, resource, subprocess, sys, time
d, cmd = sys.argv[1], sys.argv[2:]
def busy():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")
b0, t0 = busy(), time.time()
with open(os.path.join(d, "stdout.txt"), "w") as out, open(os.path.join(d, "stderr.txt"), "w") as err:
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, errors="replace")
    for line in p.stdout:
        out.write("%.6f %s" % (time.time(), line))
        out.flush()
    rc = p.wait()
t1, b1 = time.time(), busy()
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
own = ru.ru_utime + ru.ru_stime
json.dump({"rc": rc, "wall_s": t1 - t0, "own_cpu_s": own, "other_cores": max(0.0, (b1 - b0 - own) / (t1 - t0))},
          open(os.path.join(d, "run.json"), "w"))
EOF

MODEL_ARGS=(--model.n_layer=12 --model.n_head=12 --model.n_embd=768 --model.vocab_size=50257 --model.pad_vocab_to=128
            --train.seq_len="$SEQ" --train.eval_every=0 --train.sample_tokens=0 --train.progress=lines
            --train.precision=fp32 --optim.name=adamw --data.train="$DATA")

# Drops the page cache (root only); prints yes or no.
drop_caches() {
  sync
  if [[ -w /proc/sys/vm/drop_caches ]] && { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then echo yes; else echo no; fi
}

RUNS=()
FAILED=0
run() {  # name kind ranks threads cache_dropped [train overrides...]
  local name=$1 kind=$2 n=$3 threads=$4 dropped=$5; shift 5
  local dir="$OUTDIR/$name"
  local train=(train "${MODEL_ARGS[@]}" --train.out_dir="$dir/out" --train.threads="$threads" "$@")
  local cmd=("$BIN" "${train[@]}")
  if (( n > 1 )); then cmd=("$BIN" launch --nproc "$n" --quiet-others -- "${train[@]}"); fi
  local attempt=1 rc killed
  while :; do
    rm -rf "$dir"
    mkdir -p "$dir"
    printf '%q ' "${cmd[@]}" >"$dir/command.txt"
    printf '{"name": "%s", "kind": "%s", "ranks": %d, "threads": %d, "cache_dropped": "%s", "attempt": %d, "args": "%s"}\n' \
      "$name" "$kind" "$n" "$threads" "$dropped" "$attempt" "$*" >"$dir/meta.json"
    echo "  $name ..." >&2
    OMP_NUM_THREADS=$threads "$PY" "$OUTDIR/runner.py" "$dir" "${cmd[@]}"
    rc=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["rc"])' "$dir/run.json")
    # Stopped by a signal from outside (another user of the machine; SIGTERM now ends a run cleanly
    # at the next step boundary, exit 0): keep the folder as <name>.killed<k> and run again (3 tries).
    killed=$("$PY" -c 'import sys; rc = int(sys.argv[1]); out = open(sys.argv[2]).read()
print(1 if rc in (-15, -9, 143, 137) or "(SIGTERM/SIGINT)" in out else 0)' "$rc" "$dir/stdout.txt")
    [[ $killed == 1 && $attempt -lt 3 ]] || break
    echo "  $name was stopped by a signal from outside (exit $rc); running it again" >&2
    rm -rf "$dir/out/model" "$dir/out/checkpoints" "$dir.killed$attempt"
    mv "$dir" "$dir.killed$attempt"
    attempt=$(( attempt + 1 ))
  done
  if [[ $rc != 0 || $killed == 1 ]]; then
    echo "  $name FAILED (exit $rc); last lines of $dir/stderr.txt:" >&2
    tail -n 5 "$dir/stderr.txt" >&2 || true
    FAILED=1
  fi
  rm -rf "$dir/out/model"
  [[ $KEEP == 1 || $kind == save ]] || rm -rf "$dir/out/checkpoints"
  sync
  RUNS+=("$dir")
  return 0
}

E1=${EVERY_LIST[0]}
steps_for() {  # 1 + k*E steps, k >= 2 (a save's writer runs during timed steps), N >= 10
  local e=$1 k=$(( (9 + $1 - 1) / $1 ))
  (( k >= 2 )) || k=2
  echo $(( 1 + k * e ))
}

# 1. One process, 2 threads.
run single-every0 single 1 2 - --train.batch_size="$BATCH" --train.steps=10 --train.resume=never --checkpoint.every=0
for e in "${EVERY_LIST[@]}"; do
  run "single-async-every$e" single 1 2 - --train.batch_size="$BATCH" --train.steps="$(steps_for "$e")" \
    --train.resume=never --checkpoint.every="$e" --checkpoint.async=true
done
run "single-sync-every$E1" single 1 2 - --train.batch_size="$BATCH" --train.steps="$(steps_for "$E1")" \
  --train.resume=never --checkpoint.every="$E1" --checkpoint.async=false

# 2. dp = 2, one thread per rank, the same global batch.
DP2_STEPS=$(( 1 + 2 * E1 ))
run dp2-every0 dp2 2 1 - --train.batch_size=$(( BATCH / 2 )) --train.steps="$DP2_STEPS" --train.resume=never \
  --checkpoint.every=0
for a in true false; do
  run "dp2-$([[ $a == true ]] && echo async || echo sync)-every$E1" dp2 2 1 - --train.batch_size=$(( BATCH / 2 )) \
    --train.steps="$DP2_STEPS" --train.resume=never --checkpoint.every="$E1" --checkpoint.async="$a"
done

# 3. Restore at dp = 4: save step 1, then resume it three ways (separate out_dirs; train.resume = the folder).
run dp4-save save 4 1 - --train.batch_size=$(( BATCH / 4 )) --train.steps=1 --train.resume=never --checkpoint.every=1
CKPT="$OUTDIR/dp4-save/out/checkpoints/step-00000001"
if [[ -f $CKPT/manifest.json ]]; then
  for b in true false; do
    d=$(drop_caches)
    run "dp4-restore-broadcast-$b" restore 4 1 "$d" --train.batch_size=$(( BATCH / 4 )) --train.steps=1 \
      --train.resume="$CKPT" --checkpoint.broadcast_restore="$b"
  done
  d=$(drop_caches)
  run dp1-restore restore 1 2 "$d" --train.batch_size="$BATCH" --train.steps=1 --train.resume="$CKPT"
else
  echo "  dp4-save published no checkpoint ($CKPT missing): restore runs skipped" >&2
  FAILED=1
fi
[[ $KEEP == 1 ]] || rm -rf "$OUTDIR/dp4-save/out/checkpoints" "$OUTDIR/megascale"
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
ELAPSED=$(( $(date +%s) - T_START ))

DOC_ARG=""
[[ $WRITE_DOC == 1 ]] && DOC_ARG="$ROOT/docs/performance.md"
"$PY" - "$OUTDIR" "${CPU:-unknown}" "$BATCH" "$SEQ" "$E1" "$LOAD_START" "$LOAD_END" "$ELAPSED" "$BINARY_INFO" "$DOC_ARG" \
       "${RUNS[@]}" <<'PYEOF'
import datetime, glob, json, os, re, statistics, sys

outdir, cpu, B, T, E1, load_start, load_end, elapsed, binary, doc = sys.argv[1:11]
dirs = sys.argv[11:]
E1 = int(E1)
STEP = re.compile(r"step\s+(\d+)/(\d+) \|")
STAGE1 = re.compile(r"^step (\d+): stage 1 stopped training for ([0-9.]+) ms(?:, of which ([0-9.]+) ms waiting[^(]*"
                    r"\(snapshot buffer in use\))? \(([0-9.]+) MiB")
OPTWAIT = re.compile(r"^step \d+: the optimizer waited ([0-9.]+) ms for the stage-1 copy of step (\d+)'s")
PUBLISHED = re.compile(r"^step (\d+): published (\S+) \((\d+) files, ([0-9.]+) MiB; stage-1 copy ([0-9.]+) ms beside "
                       r"training;.*\(stage 2: ([0-9.]+) s\)$")
NOT_PUBLISHED = re.compile(r"^step (\d+): step \d+ not published")

def mean(xs):
    return statistics.mean(xs) if xs else None

def f(x, spec="{:.0f}"):
    return "n/a" if x is None else spec.format(x)

runs, notes, params = {}, [], set()
for d in dirs:
    r = json.load(open(os.path.join(d, "meta.json")))
    try:
        r.update(json.load(open(os.path.join(d, "run.json"))))
    except (OSError, ValueError):
        r.update(rc=-1, wall_s=None, other_cores=None)
    m = re.search(r"--checkpoint.every=(\d+)", r["args"])
    r["every"] = int(m.group(1)) if m else 0
    r["async"] = "--checkpoint.async=false" not in r["args"]
    r["steps"], r["stage1"], r["stage2"], r["unpublished"], r["resume"], r["stamps"] = [], [], [], [], None, {}
    try:
        for line in open(os.path.join(d, "out", "log.jsonl")):
            j = json.loads(line)
            if "loss" in j and "step_ms" in j:
                r["steps"].append(j)
            elif j.get("event") == "checkpoint":
                msg = j["message"]
                if (m := STAGE1.match(msg)):
                    # The stall of a save: the boundary's stop plus the next optimizer update's wait for
                    # the copy (OPTWAIT, added below); wait_ms: the part spent waiting for the writer.
                    r["stage1"].append({"step": int(m.group(1)), "mib": float(m.group(4)), "ms": float(m.group(2)),
                                        "wait_ms": float(m.group(3) or 0)})
                elif (m := OPTWAIT.match(msg)):
                    for s1 in r["stage1"]:
                        if s1["step"] == int(m.group(2)):
                            s1["ms"] += float(m.group(1))
                elif (m := PUBLISHED.match(msg)):
                    r["stage2"].append({"step": int(m.group(1)), "files": int(m.group(3)), "mib": float(m.group(4)),
                                        "copy_ms": float(m.group(5)), "s": float(m.group(6))})
                elif NOT_PUBLISHED.match(msg) or "not published" in msg:
                    r["unpublished"].append(msg)
            elif j.get("event") == "start" and (m := re.search(r"megascale: (\d+) parameters", j["message"])):
                params.add(int(m.group(1)))
            elif j.get("event") == "resume":
                r["resume"] = j["message"]
    except OSError:
        pass
    try:
        for line in open(os.path.join(d, "stdout.txt")):
            t, _, text = line.partition(" ")
            if (m := STEP.search(text)):
                r["stamps"][int(m.group(1))] = float(t)
    except OSError:
        pass
    r["restores"] = []
    for p in sorted(glob.glob(os.path.join(d, "out", "restore_rank*.json"))):
        try:
            r["restores"].append(json.load(open(p)))
        except (OSError, ValueError):
            pass
    if r["rc"] != 0:
        err = ""
        try:
            err = " ".join(open(os.path.join(d, "stderr.txt")).read().split())[-300:]
        except OSError:
            pass
        notes.append(f"{r['name']}: exit {r['rc']}, {len(r['steps'])} steps logged; {err}")
    m = re.search(r"--train.steps=(\d+)", r["args"])
    if r["kind"] in ("single", "dp2") and m and r["rc"] == 0 and len(r["steps"]) != int(m.group(1)):
        notes.append(f"{r['name']}: {len(r['steps'])} of {m.group(1)} steps logged")
    if r.get("attempt", 1) > 1:
        notes.append(f"{r['name']}: stopped by a signal from outside {r['attempt'] - 1} time(s) (another user of the "
                     f"machine); the attempt measured here is number {r['attempt']} ({r['name']}.killed<k> folders kept)")
    for u in r["unpublished"]:
        notes.append(f"{r['name']}: {u}")
    # Save-boundary accounting.
    n = max(r["stamps"]) if r["stamps"] else 0
    iv = {k: r["stamps"][k] - r["stamps"][k - 1] for k in range(2, n + 1) if k in r["stamps"] and k - 1 in r["stamps"]}
    saved = {s["step"] for s in r["stage1"]}
    r["wall_ms"] = mean([v * 1e3 for v in iv.values()])
    r["step_ms"] = mean([s["step_ms"] for s in r["steps"] if s["step"] >= 2])
    after = [v * 1e3 for k, v in iv.items() if k - 1 in saved]
    plain = [v * 1e3 for k, v in iv.items() if k - 1 not in saved]
    r["boundary_extra_ms"] = mean(after) - mean(plain) if after and plain else None
    r["n_steps"] = n
    runs[r["name"]] = r

single = [r for r in runs.values() if r["kind"] == "single"]
dp2 = [r for r in runs.values() if r["kind"] == "dp2"]
refs = {k: runs.get(f"{k}-every0") for k in ("single", "dp2")}
ref = refs["single"]
ref_wall = ref["wall_ms"] if ref else None

def regular(r):  # the saves at multiples of `every` (not the extra one at the last step, right after another)
    return [x for x in r["stage1"] if r["every"] and x["step"] % r["every"] == 0]

def stalls(r):
    parts = []
    for s in r["stage1"]:
        w = f" ({s['wait_ms']:.0f} waiting)" if s["wait_ms"] > 0 else ""
        last = " [final]" if r["every"] and s["step"] % r["every"] else ""
        parts.append(f"{s['step']}{last}: {s['ms']:.0f}{w}")
    return ", ".join(parts) if parts else "—"

lines = ["| run | ranks x threads | checkpoint | stage-1 stall per save, ms (step: ms, of which waiting for the previous "
         "save's writer; [final] = the save at the last step, not in the means) | mean stall, ms | stage 2 per save, s | MiB published per save (all ranks) | mean step, ms (wall clock, steps 2..N) | "
         "vs every=0 | mean step_ms (trainer), ms | wall extra after a save boundary, ms | CPU used by other processes (cores) |",
         "|---|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]
for r in single + dp2:
    ck = "off" if r["every"] == 0 else f"every {r['every']}, {'async' if r['async'] else 'sync'}"
    vs = "—"
    base = refs.get(r["kind"])
    if base and base["wall_ms"] and r["wall_ms"]:
        vs = "reference" if r is base else f"{(r['wall_ms'] / base['wall_ms'] - 1) * 100:+.1f}%"
    st2 = ", ".join(f"{s['s']:.2f}" for s in r["stage2"]) or "—"
    mib = f"{r['stage2'][0]['mib']:.0f}" if r["stage2"] else "—"
    lines.append(f"| {r['name']} ({r['n_steps']} steps) | {r['ranks']} x {r['threads']} | {ck} | {stalls(r)} | "
                 f"{f(mean([s['ms'] for s in regular(r)]))} | {st2} | {mib} | {f(r['wall_ms'])} | {vs} | {f(r['step_ms'])} | "
                 f"{f(r['boundary_extra_ms']) if r['every'] else '—'} | {f(r['other_cores'], '{:.2f}')} |")
table1 = "\n".join(lines)

# Targets.
targets = []
def verdict(ok):
    return "met" if ok else "NOT met"
def shared(*rs):  # a warning when another workload took CPU during any of these runs
    busy = [r["other_cores"] for r in rs if r and r.get("other_cores") is not None]
    if busy and max(busy) > 0.3:
        return (f"; other processes used {' / '.join('%.2f' % b for b in busy)} cores during these runs: "
                "the comparison is unreliable")
    return ""
def compare(label, a, s):
    if not a or not s or not regular(a) or not regular(s):
        targets.append(f"- {label}: n/a (a run failed or logged no save)")
        return
    stall = mean([x["ms"] for x in regular(a)])
    copy = mean([x["ms"] - x["wait_ms"] for x in regular(a)])
    sync = mean([x["ms"] for x in regular(s)])
    worst = max(x["ms"] for x in regular(a))
    step = a["wall_ms"]
    copy_bg = mean([x["copy_ms"] for x in a["stage2"]])
    targets.append(f"- {label}: async stall {stall:.0f} ms per save (mean; {copy:.0f} ms without waiting for the previous "
                   f"writer; the copy itself, {f(copy_bg)} ms, ran beside the next step) vs synchronous "
                   f"save {sync:.0f} ms: {100 * stall / sync:.1f}% (without the writer wait {100 * copy / sync:.1f}%; target <= 5%: "
                   f"{verdict(stall <= 0.05 * sync)}); worst stall {worst:.0f} ms vs a step of {f(step)} ms "
                   f"(target below one step: {verdict(step is not None and worst < step)})" + shared(a, s))
def step_time(label, r, base):
    if r and base and r["wall_ms"] and base["wall_ms"]:
        d = r["wall_ms"] / base["wall_ms"] - 1
        targets.append(f"- {label}: mean step {r['wall_ms']:.0f} ms vs {base['wall_ms']:.0f} ms without checkpoints: "
                       f"{100 * d:+.1f}% (target within 3%: {verdict(d <= 0.03)}); trainer step_ms "
                       f"{f(r['step_ms'])} vs {f(base['step_ms'])} ms" + shared(r, base))
sync1 = runs.get(f"single-sync-every{E1}")
for r in single:
    if r["every"] and r["async"]:
        label = f"1 process, async every {r['every']}"
        compare(label + f" (synchronous: every {E1})", r, sync1)
        step_time(label, r, ref)
compare(f"dp = 2, every {E1}", runs.get(f"dp2-async-every{E1}"), runs.get(f"dp2-sync-every{E1}"))
step_time(f"dp = 2, async every {E1}", runs.get(f"dp2-async-every{E1}"), refs["dp2"])
alone, during = [], []
for r in single:
    if r["every"] and r["async"] and len(r["stage2"]) >= 2:
        alone.append(r["stage2"][-1]["s"])  # the final save: after the last step, nothing else runs
        during += [x["s"] for x in r["stage2"][:-1]]
if alone and during:
    targets.append(f"- The background writer (stage 2, 1 process): {mean(alone):.2f} s per save with the machine to "
                   f"itself (the final save, after the last step) vs {mean(during):.2f} s (mean; "
                   f"{min(during):.1f}-{max(during):.1f} s) for saves made while training runs on every core")

lines = ["| restore | ranks x threads | reading ranks | max restore time over ranks, s | per rank, s | rank 0: read + "
         "verify / agree / send, s | bytes read over ranks, MiB | files read over ranks | page cache dropped before | "
         "wall time of the run, s |",
         "|---|---|---:|---:|---|---|---:|---:|---|---:|"]
for r in runs.values():
    if r["kind"] != "restore":
        continue
    rs = r["restores"]
    b = re.search(r"--checkpoint.broadcast_restore=(\w+)", r["args"])
    how = ("one reader per DP group + broadcast" if b.group(1) == "true" else "every rank reads") if b else "single process"
    secs = [x["seconds"] for x in rs]
    lines.append(f"| {r['name']}: {how} | {r['ranks']} x {r['threads']} | {sum(1 for x in rs if x['bytes_read'] > 0)} | "
                 f"{f(max(secs) if secs else None, '{:.2f}')} | {' / '.join('%.2f' % s for s in secs) or 'n/a'} | "
                 f"{' / '.join('%.2f' % rs[0].get(k, float('nan')) for k in ('read_seconds', 'agree_seconds', 'send_seconds')) if rs else 'n/a'} | "
                 f"{f(sum(x['bytes_read'] for x in rs) / 1048576 if rs else None, '{:.0f}')} | "
                 f"{sum(x['files_read'] for x in rs) if rs else 'n/a'} | {r['cache_dropped']} | {f(r['wall_s'], '{:.1f}')} |")
    if r["rc"] == 0 and len(rs) != r["ranks"]:
        notes.append(f"{r['name']}: {len(rs)} restore_rank*.json for {r['ranks']} ranks")
table2 = "\n".join(lines)
save4 = runs.get("dp4-save")
save4_text = ""
if save4 and save4["stage1"]:
    s1, s2 = save4["stage1"][0], (save4["stage2"][0] if save4["stage2"] else None)
    save4_text = (f"The dp = 4 checkpoint (step 1): stage 1 of {s1['mib']:.0f} MiB per rank stopped rank 0 for {s1['ms']:.0f} ms; "
                  + (f"published {s2['files']} files, {s2['mib']:.0f} MiB, stage 2 {s2['s']:.2f} s." if s2 else "not published."))

now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
body = f"""Generated by `bench/bench_ckpt.sh` on {now} in {int(elapsed) // 60} min {int(elapsed) % 60} s (results in `{os.path.relpath(outdir, os.path.dirname(os.path.dirname(outdir)))}` of the build dir).

- Binary: {binary}. CPU: {cpu}, {os.cpu_count()} cores. Load average (1/5/15 min) at start {load_start}, at end {load_end}; the last column of
  the first table is the CPU other processes took during each run (other users of the machine): well above ~0.1 cores
  means the run shared the cores and its step times are inflated.
- GPT-2 124M ({", ".join(f"{p:,}" for p in sorted(params)) or "?"} parameters), fp32, AdamW, {B} sequences of T={T} per step over all ranks, random tokens.
  One process: 2 threads; dp = 2: 1 thread per rank (ZeRO-2); dp = 4: 4 ranks x 1 thread on 2 cores (oversubscribed).
- Stage-1 stall = the ms of the "stage 1 stopped training for ..." message (the step boundary: handing the state to the
  copier, plus waiting for the previous save's writer if it still held the buffer) plus the ms of "the optimizer waited
  ... for the stage-1 copy" (the copy into the host snapshot runs beside the next step's forward and backward and must
  end before its optimizer update). With `checkpoint.async=false` the first number is the synchronous save: copy + persist (safetensors write,
  fsync, and on rank 0 waiting for every rank's marker, manifest, rename, `latest`). Stage 2 = the background writer's
  time per save as the "published" message reports it. Mean step = wall clock between consecutive step lines on stdout,
  steps 2..N (N = 1 + k x every, so exactly one save boundary per `every` steps falls inside); step_ms (trainer) leaves
  the boundary out but shows the writer's interference with compute. "Wall extra after a save boundary" = mean
  interval that follows a save minus the mean interval that follows none, in the same run (a cross-check of the stall).

{table1}

Targets:
{chr(10).join(targets)}

Restore of the dp = 4 checkpoint, GPT-2 124M (weights + both Adam moments, fp32). Time = `seconds` of each rank's
`restore_rank<R>.json` (the whole restore: rank 0's checks, the reads with XXH64 verification, the broadcast, installing).
dp = 4 runs 4 ranks on 2 cores, so reading ranks also compete for the CPU. {save4_text}

{table2}
"""
if notes:
    body += "\nNotes (failed, incomplete or repeated runs):\n" + "\n".join(f"- {n}" for n in notes) + "\n"
print(body)

if doc:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(doc)), "..", "bench"))
    from doc_section import write_section
    intro = ("MegaScale's two-stage save (§4.4): each rank's state is copied into a host buffer beside the next\n"
             "step and persisted by a low-priority background thread; restore reads each data-parallel group's\n"
             "files once. `bench/bench_ckpt.sh` measures both on GPT-2 124M and writes the table below.")
    write_section(doc, "<!-- bench_ckpt begin -->", "<!-- bench_ckpt end -->", body, keep_previous=True,
                  heading="## Checkpoints (bench/bench_ckpt.sh)", intro=intro)
    print(f"bench_ckpt: table written to {doc}")
PYEOF
[[ $FAILED == 0 ]] || echo "bench_ckpt: some runs failed (see the notes above and $OUTDIR)" >&2
