#!/usr/bin/env bash
# bench_hosts.sh: communication across emulated hosts (scripts/emulated_cluster.sh, Redis on host 1,
# Slurm for the launches), on 1 Gbit/s and 10 Gbit/s links:
#  1. bandwidth: `megascale bench comm-worker` on 2 hosts x 1 rank (srun, Gloo): all-reduce,
#     reduce-scatter and all-gather bus bandwidth (NCCL-tests' busbw) for 1, 16 and 64 MiB, as a share
#     of the link rate (1 Gbit/s = 125 MB/s per direction);
#  2. start-up: init_world (Redis rendezvous) + the rank grid's groups for 8, 16 and 32 ranks on 4
#     hosts (the slowest rank; no per-group barrier), 1 Gbit/s;
#  3. overlap where links are slow (1 Gbit/s): a GPT-2-small-sized model (12 layers, C 768, 12 heads,
#     GPT-2's vocabulary; B 4 x T 256, 4 steps, one thread per rank) on 2 hosts x 1 rank:
#     ZeRO-2 dp = 2 with overlap on and off (exposed DP communication per step, the trainer's
#     comm_exposed; also with B 8, twice the compute for the same communication), and pp = 2
#     (4 micro-batches) with decoupled and paired send/recv: the pipeline's exposed communication is
#     its wait beyond the same run's on unshaped links (the bubble), against the stage's transfer
#     time (its sends' bytes at the link rate); on 1 Gbit/s and 100 Mbit/s links; median of steps 2..4;
#  4. recovery (driver, 1 Gbit/s, the small layout model, checkpoint every 2 steps): a host cut off for
#     good after step 5 (3 hosts, one spare, --stall-min 5, --selfcheck-timeout 10) and a rank killed
#     with SIGKILL after step 5 (2 hosts): detection (the fault event after the cut or kill), the
#     self-checks, and restart to the first step resumed, from the driver's events.jsonl.
# Prints the CPU and a markdown table and writes it into docs/performance.md between the
# bench_hosts markers. Needs what scripts/emulated_cluster.sh needs (root, iproute2, redis, slurm).
# Usage: bench/bench_hosts.sh [--no-doc] [--build DIR]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MS_BUILD_DIR:-$ROOT/build}
WRITE_DOC=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-doc) WRITE_DOC=0 ;;
    --build) BUILD=$2; shift ;;
    -h|--help) sed -n 2,17p "$0"; exit 0 ;;
    *) echo "bench_hosts.sh: unknown argument $1 (see --help)" >&2; exit 1 ;;
  esac
  shift
done
BIN="$BUILD/megascale"
[[ -x "$BIN" ]] || { echo "bench_hosts.sh: $BIN not built" >&2; exit 1; }
OUT="$BUILD/bench_results/hosts_$(date +%Y%m%d_%H%M%S)"
mkdir -p "$OUT"
CLUSTER="$ROOT/scripts/emulated_cluster.sh"
CPU=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "CPU: $CPU ($(nproc) cores); results in $OUT"

# 1. bandwidth
for rate in 1gbit 10gbit; do
  bash "$CLUSTER" --hosts 2 --rate "$rate" --redis --slurm -- sh -c "MEGASCALE_STORE=\$MS_CLUSTER_STORE srun -N2 \
    --ntasks-per-node=1 '$BIN' bench comm-worker --sizes 1M,16M,64M --iters 5 --out '$OUT/bw_$rate.json'" \
    > "$OUT/bw_$rate.log" 2>&1 || { echo "bandwidth at $rate failed:"; tail -5 "$OUT/bw_$rate.log"; }
done
# 2. start-up
for per in 2 4 8; do
  n=$((4 * per))
  bash "$CLUSTER" --hosts 4 --rate 1gbit --redis --slurm -- sh -c "MEGASCALE_STORE=\$MS_CLUSTER_STORE srun -N4 \
    --ntasks-per-node=$per '$BIN' bench comm-worker --no-bandwidth --out '$OUT/start_$n.json'" \
    > "$OUT/start_$n.log" 2>&1 || { echo "start-up of $n ranks failed:"; tail -5 "$OUT/start_$n.log"; }
done
# 3. overlap: GPT-2-small-sized model, random-free: the Brown tokens when prepared, else a synthetic shard
DATA="$ROOT/data/brown/train_*.bin"
ls $DATA >/dev/null 2>&1 || { echo "bench_hosts.sh: data/brown is not prepared (scripts/setup.sh)" >&2; exit 1; }
VOCAB=50257
MODEL_BODY="--model.n_layer=12 --model.n_embd=768 --model.n_head=12 --model.max_seq_len=256 \
  --model.block=sequential --model.attention=full --train.batch_size=4 --train.seq_len=256 --train.steps=4 \
  --train.eval_every=0 --train.sample_tokens=0 --train.threads=1 --train.pin_threads=false --train.progress=lines \
"
MODEL="$MODEL_BODY --model.vocab_size=$VOCAB --data.train=$DATA"
run_pair() {  # name extra [rate]
  bash "$CLUSTER" --hosts 2 --rate "${3:-1gbit}" --redis --slurm -- sh -c "MEGASCALE_STORE=\$MS_CLUSTER_STORE srun -N2 \
    --ntasks-per-node=1 '$BIN' train $MODEL --train.out_dir='$OUT/$1' $2" > "$OUT/$1.log" 2>&1 ||
    { echo "run $1 failed:"; tail -5 "$OUT/$1.log"; }
}
run_pair dp_overlap "--parallel.dp=2 --parallel.overlap=true"
run_pair dp_no_overlap "--parallel.dp=2 --parallel.overlap=false"
# Twice the tokens per step (B 8): the same communication, twice the compute to hide it under.
MODEL=${MODEL/--train.batch_size=4/--train.batch_size=8}
run_pair dp_overlap_b8 "--parallel.dp=2 --parallel.overlap=true"
run_pair dp_no_overlap_b8 "--parallel.dp=2 --parallel.overlap=false"
MODEL="$MODEL_BODY --model.vocab_size=$VOCAB --data.train=$DATA"
run_pair pp_decoupled "--parallel.pp=2 --train.grad_accum=4 --parallel.pp_decoupled=true"
run_pair pp_paired "--parallel.pp=2 --train.grad_accum=4 --parallel.pp_decoupled=false"
# the bubble alone: unshaped links (the wait that is not communication)
run_pair pp_decoupled_free "--parallel.pp=2 --train.grad_accum=4 --parallel.pp_decoupled=true" none
run_pair pp_paired_free "--parallel.pp=2 --train.grad_accum=4 --parallel.pp_decoupled=false" none
# where the link, not the bubble, sets the pipeline's waits: 100 Mbit/s (an activation: 1 MiB, ~84 ms)
run_pair pp_decoupled_100mbit "--parallel.pp=2 --train.grad_accum=4 --parallel.pp_decoupled=true" 100mbit
run_pair pp_paired_100mbit "--parallel.pp=2 --train.grad_accum=4 --parallel.pp_decoupled=false" 100mbit

# 4. recovery
RCFG="--model.n_layer=4 --model.n_embd=128 --model.n_head=4 --model.vocab_size=50257 --model.max_seq_len=64 \
  --train.batch_size=8 --train.seq_len=64 --train.steps=12 --train.eval_every=0 --train.sample_tokens=0 \
  --train.threads=1 --train.pin_threads=false --train.progress=lines --data.train=$DATA --parallel.dp=2 \
  --checkpoint.every=2"
recover() {  # name hosts driver_extra action(shell, run once step 5 is logged)
  local d="$OUT/$1"
  bash "$CLUSTER" --hosts "$2" --rate 1gbit --redis -- sh -c "'$BIN' launch --hosts \"\$MS_CLUSTER_HOSTS\" \
    --nproc-per-host 1 --host-launcher \"\$MS_CLUSTER_LAUNCHER\" --store \"\$MS_CLUSTER_STORE\" --log-dir '$d/driver' $3 \
    -- train $RCFG --train.out_dir='$d' --checkpoint.dir='$d/ckpt' & p=\$!; \
    until grep -q '\"step\":5,\"step_ms\"' '$d/log.jsonl' 2>/dev/null; do sleep 0.02; done; \
    date +%s.%N > '$d/action_t'; $4; wait \$p" > "$OUT/$1.log" 2>&1 || { echo "recovery run $1 failed:"; tail -5 "$OUT/$1.log"; }
}
recover partition 3 "--spare-hosts 1 --stall-min 5 --selfcheck-timeout 10" '"$MS_CLUSTER_SELF" link 10.77.0.2 down'
recover kill9 2 "" "pkill -9 -n -f '^[^ ]*megascale train'"

/usr/bin/python3 - "$OUT" "$ROOT" "$CPU" "$WRITE_DOC" <<'PY'
import glob, json, os, statistics, sys
out, root, cpu, write = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
def load(p):
    try:
        return json.load(open(p))
    except (OSError, ValueError):
        return None
lines = [f"Run of {os.path.basename(out)[6:]} on {cpu} ({os.cpu_count()} cores), `bench/bench_hosts.sh`; "
         "emulated hosts (network namespaces, tbf-shaped veth links), Gloo over TCP, Redis rendezvous, launched "
         "by srun on the emulated Slurm. All ranks share this machine's cores.", "",
         "**Bus bandwidth across 2 hosts (1 rank each)**, share of the link rate:", "",
         "| link | op | 1 MiB | 16 MiB | 64 MiB |", "|---|---|---|---|---|"]
for rate, mbps in (("1gbit", 125.0), ("10gbit", 1250.0)):
    j = load(f"{out}/bw_{rate}.json")
    if not j:
        lines.append(f"| {rate} | (failed) | | | |")
        continue
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        cells = []
        for size in (1 << 20, 16 << 20, 64 << 20):
            r = next((r for r in j["rows"] if r["op"] == op and r["bytes"] == size), None)
            cells.append(f"{r['busbw_GBps'] * 1e3:.0f} MB/s ({100 * r['busbw_GBps'] * 1e3 / mbps:.0f}%)" if r else "-")
        lines.append(f"| {rate} | {op} | " + " | ".join(cells) + " |")
lines += ["", "**Start-up across 4 hosts** (the slowest rank; Redis rendezvous, then the grid's groups):", "",
          "| ranks | grid | init_world ms | rank grid ms |", "|---|---|---|---|"]
for n in (8, 16, 32):
    j = load(f"{out}/start_{n}.json")
    lines.append(f"| {n} | {j['grid']} | {j['init_world_ms']:.0f} | {j['rank_grid_ms']:.0f} |" if j else f"| {n} | (failed) | | |")
def steps(name):
    rows = []
    p = f"{out}/{name}/log.jsonl"
    if os.path.exists(p):
        for line in open(p):
            j = json.loads(line)
            if "step_ms" in j and j.get("step", 0) >= 2:
                rows.append(j)
    return rows
def med(rows, key):
    v = [r.get(key, 0.0) for r in rows]
    return statistics.median(v) if v else float("nan")
lines += ["", "**Overlap on 1 Gbit/s links** (GPT-2-small-sized, 124M parameters, B 4 x T 256 unless named, 2 hosts x 1 "
          "rank, median of steps 2..4; with pp the exposed DP communication is the tied embedding's sum over the "
          "two stages):", "", "| run | step ms | exposed DP comm ms | pipeline wait ms |", "|---|---|---|---|"]
PP = ("pp_decoupled", "pp_paired", "pp_decoupled_100mbit", "pp_paired_100mbit", "pp_decoupled_free", "pp_paired_free")
for name in ("dp_overlap", "dp_no_overlap", "dp_overlap_b8", "dp_no_overlap_b8") + PP:
    r = steps(name)
    lines.append(f"| {name} | {med(r, 'step_ms'):.0f} | {med(r, 'comm_exposed_ms'):.0f} | {med(r, 'pp_wait_ms'):.0f} |")
for tag, what in (("", "B 4"), ("_b8", "B 8")):
    on, off = med(steps("dp_overlap" + tag), "comm_exposed_ms"), med(steps("dp_no_overlap" + tag), "comm_exposed_ms")
    if off == off and off > 0:
        lines += ["", f"ZeRO-2 overlap hides {100 * (1 - on / off):.0f}% of the DP communication of GPT-2-small at {what} "
                  f"({off:.0f} -> {on:.0f} ms exposed per step)."]
def send_ms(name, bytes_per_s):  # stage 0's sends per step at the link rate (median over steps 2..)
    per = {}
    try:
        for line in open(f"{out}/{name}/records/rank-00000.jsonl"):
            j = json.loads(line)
            if j.get("type") == "comm" and j.get("op") == "send" and j.get("step", 0) >= 2:
                per[j["step"]] = per.get(j["step"], 0) + j["bytes"]
    except OSError:
        return float("nan")
    return statistics.median(per.values()) / bytes_per_s * 1e3 if per else float("nan")
lines += ["", "**Pipeline communication** (pp = 2, 4 micro-batches; stage 0; exposed = pipeline wait minus the same "
          "schedule's wait on unshaped links):", "",
          "| link | send/recv | transfers ms per step | exposed ms | hidden |", "|---|---|---|---|---|"]
for rate, tag, bps in (("1 Gbit/s", "", 125e6), ("100 Mbit/s", "_100mbit", 12.5e6)):
    for mode in ("decoupled", "paired"):
        comm = send_ms(f"pp_{mode}{tag}", bps)
        exposed = max(0.0, med(steps(f"pp_{mode}{tag}"), "pp_wait_ms") - med(steps(f"pp_{mode}_free"), "pp_wait_ms"))
        hidden = f"{100 * max(0.0, 1 - exposed / comm):.0f}%" if comm == comm and comm > 0 else "-"
        lines.append(f"| {rate} | {mode} | {comm:.0f} | {exposed:.0f} | {hidden} |")
lines += ["", "**Recovery through the driver** (1 Gbit/s, checkpoint every 2 steps, the fault after step 5; "
          "seconds from the driver's events):", "",
          "| fault | detected after | self-checks | restart to resumed step | total (fault to resumed) | steps repeated |",
          "|---|---|---|---|---|---|"]
for name, what in (("partition", "host link down for good (--stall-min 5)"), ("kill9", "rank killed (SIGKILL)")):
    try:
        ev = [json.loads(l) for l in open(f"{out}/{name}/driver/events.jsonl")]
        t0 = float(open(f"{out}/{name}/action_t").read())
        det = next(e for e in ev if e["event"] == "fault_detected")
        chk = next((e for e in ev if e["event"] == "selfcheck_done"), {"seconds": 0.0})
        rst = next(e for e in ev if e["event"] == "restart")
        res = next(e for e in ev if e["event"] == "resumed")
        lines.append(f"| {what} | {det['t'] - t0:.1f} | {chk['seconds']:.1f} | {res['t'] - rst['t']:.1f} | "
                     f"{res['recovery_s']:.1f} | {res['steps_repeated']} |")
    except (OSError, StopIteration, KeyError, ValueError) as e:
        lines.append(f"| {what} | (failed: {e}) | | | | |")
body = "\n".join(lines)
print(body)
if write:
    sys.path.insert(0, os.path.join(root, "bench"))
    from doc_section import write_section
    write_section(os.path.join(root, "docs/performance.md"), "<!-- bench_hosts:begin -->", "<!-- bench_hosts:end -->",
                  body, keep_previous=True, heading="## Across hosts (bench/bench_hosts.sh)",
                  intro="Emulated hosts on this machine (README, \"Many machines\"): what links of a given rate cost "
                        "and what overlap hides. Only ratios within one run compare.")
PY
