#!/usr/bin/env bash
# run_bench.sh: megascale vs PyTorch CPU training speed, in one invocation on one machine.
#
# For each model config and precision (fp32, bf16) it runs, interleaved and each in its own process
# (so peak RSS is per run): bench_train (megascale) then bench/torch_gpt.py (PyTorch 1.13 via
# /usr/bin/python3, 2 threads, OMP_WAIT_POLICY=PASSIVE, ATEN_CPU_CAPABILITY=avx512). It probes the
# hardware peak (measured clock and FLOP/cycle, `bench_train --probe`, kernels/hw_peak.h) and the best
# fp32/bf16 GEMM throughput before and after, prints a table (tokens/s, ratio, model FLOP/s, MFU over
# the hardware peak, model FLOP/s over the best measured GEMM, share of step time outside GEMMs, peak
# RSS) and a second one (megascale's per-kernel ms per step and share of the step, per config and
# precision), and writes both into docs/performance.md between the bench markers.
#
# Usage: bench/run_bench.sh [--quick] [--no-doc] [--build DIR]
#   --quick   2 configs (small T=256, GPT-2 124M T=256), fewer steps (minutes instead of ~30 min)
#   --no-doc  print only; do not touch docs/performance.md
#   --build   CMake build dir (default: $MS_BUILD_DIR or <repo>/build); bench_train is (re)built there
# Env: MS_TORCH_BLAS_LIBDIR=<dir with an OpenBLAS libblas.so.3> for PyTorch fp32 (see below).
# Results (JSON lines) are kept in <build>/bench_results/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MS_BUILD_DIR:-$ROOT/build}
MODE=full
WRITE_DOC=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) MODE=quick ;;
    --no-doc) WRITE_DOC=0 ;;
    --build) BUILD=$2; shift ;;
    --build=*) BUILD=${1#--build=} ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "run_bench.sh: unknown argument '$1' (see --help)" >&2; exit 1 ;;
  esac
  shift
done

PY=/usr/bin/python3
if [[ ! -f "$BUILD/build.ninja" && ! -f "$BUILD/Makefile" ]]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$BUILD" --target bench_train >/dev/null
BENCH="$BUILD/bench_train"

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUTDIR="$BUILD/bench_results"
mkdir -p "$OUTDIR"
RES="$OUTDIR/$STAMP-$MODE.jsonl"
: >"$RES"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

export OMP_NUM_THREADS=2
TORCH_ENV=(env OMP_WAIT_POLICY=PASSIVE ATEN_CPU_CAPABILITY=avx512)
# PyTorch's fp32 GEMMs go through the system libblas.so.3 (Debian's torch: BLAS_INFO=generic). The
# netlib reference BLAS there is ~1 GFLOP/s, which would make any comparison meaningless, so point
# PyTorch at OpenBLAS (OpenMP build: one threading runtime with torch's libgomp):
# MS_TORCH_BLAS_LIBDIR=<dir with libblas.so.3>, else the installed openblas-openmp folder if any.
# Without OpenBLAS installed: apt-get download libopenblas0-openmp && dpkg -x libopenblas0-openmp_*.deb DIR
# and MS_TORCH_BLAS_LIBDIR=DIR/usr/lib/x86_64-linux-gnu/openblas-openmp.
TORCH_BLAS=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 || echo unknown)
if [[ -n ${MS_TORCH_BLAS_LIBDIR:-} ]]; then
  TORCH_ENV+=(LD_LIBRARY_PATH="$MS_TORCH_BLAS_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  TORCH_BLAS=$(readlink -f "$MS_TORCH_BLAS_LIBDIR/libblas.so.3")
elif [[ $TORCH_BLAS == */blas/libblas.so.3* && -e /usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3 ]]; then
  TORCH_ENV+=(LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  TORCH_BLAS=$(readlink -f /usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3)
fi
if [[ $TORCH_BLAS == */blas/libblas.so.3* ]]; then
  echo "run_bench: WARNING: PyTorch fp32 will use the netlib reference BLAS ($TORCH_BLAS): ~100x slower than" \
       "OpenBLAS; set MS_TORCH_BLAS_LIBDIR (see the comment in this script)" >&2
fi
export MS_BENCH_TORCH_BLAS=$TORCH_BLAS

# name | megascale overrides | torch_gpt.py arguments
SMALL_MS="--model.n_layer=6 --model.n_embd=384 --model.n_head=6 --model.vocab_size=8192 --train.batch_size=4 --train.seq_len=256"
SMALL_PT="--n-layer 6 --n-embd 384 --n-head 6 --vocab-size 8192 --batch-size 4 --seq-len 256"
G2_MS="--model.n_layer=12 --model.n_embd=768 --model.n_head=12 --model.vocab_size=50257 --train.batch_size=4"
G2_PT="--n-layer 12 --n-embd 768 --n-head 12 --vocab-size 50257 --batch-size 4"
CONFIGS=(
  "small-T256|$SMALL_MS|$SMALL_PT"
  "gpt2-124M-T256|$G2_MS --train.seq_len=256|$G2_PT --seq-len 256"
)
if [[ $MODE == full ]]; then
  CONFIGS+=(
    "gpt2-124M-T1024|$G2_MS --train.seq_len=1024|$G2_PT --seq-len 1024"
    "gpt2-124M-T1024-parallel-swa256|$G2_MS --train.seq_len=1024 --model.block=parallel --model.attention=sliding --model.window=256|$G2_PT --seq-len 1024 --block parallel --attention sliding --window 256"
  )
fi
steps_for() {  # config name -> "warmup steps"
  if [[ $MODE == quick ]]; then echo "1 3"; return; fi
  case "$1" in small-*) echo "2 10" ;; *T256) echo "2 6" ;; *) echo "1 5" ;; esac
}

tag() {  # adds {"config":..., "engine":..., "precision":...} to one JSON line (or wraps an error)
  "$PY" -c '
import json, sys
cfg, eng, prec, line = sys.argv[1:5]
try:
    j = json.loads(line)
except Exception:
    j = {"error": "no JSON output: " + line[-300:]}
j.setdefault("engine", eng); j.setdefault("precision", prec); j["config"] = cfg
print(json.dumps(j))' "$@"
}

probe() {
  local line
  line=$("$BENCH" --probe 2>/dev/null | tail -n1 || true)
  tag probe probe - "$line" >>"$RES"
}

echo "run_bench: mode=$MODE, results -> $RES, load average at start: $LOAD_START"
probe
for entry in "${CONFIGS[@]}"; do
  IFS='|' read -r name ms_args pt_args <<<"$entry"
  read -r warm steps <<<"$(steps_for "$name")"
  for prec in fp32 bf16; do
    prec_arg=()
    [[ $prec == bf16 ]] && prec_arg=(--train.precision=bf16)
    echo "  $name $prec: megascale ..." >&2
    # shellcheck disable=SC2086
    line=$("$BENCH" $ms_args "${prec_arg[@]}" --bench.warmup="$warm" --bench.steps="$steps" 2>&1 | tail -n1 || true)
    tag "$name" megascale "$prec" "$line" >>"$RES"
    echo "  $name $prec: pytorch ..." >&2
    # shellcheck disable=SC2086
    line=$("${TORCH_ENV[@]}" "$PY" "$ROOT/bench/torch_gpt.py" $pt_args --precision "$prec" --threads 2 \
             --warmup "$warm" --steps "$steps" 2>&1 | tail -n1 || true)
    tag "$name" pytorch "$prec" "$line" >>"$RES"
  done
done
probe
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

DOC_ARG=""
[[ $WRITE_DOC == 1 ]] && DOC_ARG="$ROOT/docs/performance.md"
"$PY" - "$RES" "$MODE" "$LOAD_START" "$LOAD_END" "$DOC_ARG" <<'PYEOF'
import datetime, json, math, os, re, sys

res_path, mode, load_start, load_end, doc = sys.argv[1:6]
rows = [json.loads(l) for l in open(res_path) if l.strip()]
probes = [r for r in rows if r["config"] == "probe" and "error" not in r]
runs = [r for r in rows if r["config"] != "probe"]

def best(key):
    v = [p[key] for p in probes if p.get(key)]
    return max(v) if v else None

def first(key):
    v = [p[key] for p in probes if p.get(key) is not None]
    return v[0] if v else None

# Hardware peaks (the MFU denominators, as MegaScale counts MFU): cores x FLOP/cycle x clock, all
# measured by `bench_train --probe` (kernels/hw_peak.h) except AMX-BF16 (the specification's 1024).
# The best of the probes: interference on a shared machine only lowers a measurement.
clock = best("clock_ghz_measured")
mhz_load = best("cpuinfo_mhz_under_load")
cores = first("threads") or 2
fpc = {"fp32": best("fp32_flop_per_cycle"), "bf16": best("bf16_flop_per_cycle")}
unit = {"fp32": first("fp32_unit") or "?", "bf16": first("bf16_unit") or "?"}
ipc = {"fp32": best("fp32_issue_per_cycle"), "bf16": best("bf16_issue_per_cycle")}
bf16_source = first("bf16_flop_per_cycle_source") or "?"
peak = {k: (cores * fpc[k] * clock * 1e9 if clock and fpc[k] else None) for k in ("fp32", "bf16")}
gemm = {"fp32": best("sgemm_peak_gflops"), "bf16": best("bf16_gemm_peak_gflops")}
gemm = {k: (v * 1e9 if v else None) for k, v in gemm.items()}
cpu = "unknown"
for line in open("/proc/cpuinfo"):
    if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip(); break
flags = open("/proc/cpuinfo").read()
isa = ", ".join(f for f in ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if re.search(r"\b%s\b" % f, flags))

def fmt(x, spec="{:.0f}", na="n/a"):
    return na if x is None else spec.format(x)

by = {(r["config"], r["engine"], r["precision"]): r for r in runs}
configs = []
for r in runs:
    if r["config"] not in configs:
        configs.append(r["config"])

lines = []
lines.append("| config | precision | engine | tokens/s | step ms | megascale / PyTorch | tokens per CPU-s (ratio) | model GFLOP/s | MFU (hardware peak) | model FLOP/s / best measured GEMM | step time outside GEMMs | peak RSS MB |")
lines.append("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
notes = []
for c in configs:
    for prec in ("fp32", "bf16"):
        ms, pt = by.get((c, "megascale", prec)), by.get((c, "pytorch", prec))
        for eng, r in (("megascale", ms), ("PyTorch", pt)):
            if r is None:
                continue
            if "error" in r:
                lines.append(f"| {c} | {prec} | {eng} | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a |")
                notes.append(f"{c} {prec} {eng}: {r['error'][:200]}")
                continue
            tps = r["tokens_per_s_median"]
            fl = r["flops_per_token"] * tps
            ratio = ""
            if eng == "megascale":
                ratio = fmt(tps / pt["tokens_per_s_median"], "{:.2f}x") if pt and "error" not in pt else "n/a"
            tpc = r.get("tokens_per_cpu_s_median")
            cpu_col = fmt(tpc)
            if eng == "megascale" and pt and "error" not in pt and tpc and pt.get("tokens_per_cpu_s_median"):
                cpu_col += f" ({tpc / pt['tokens_per_cpu_s_median']:.2f}x)"
            share = fmt(r.get("non_gemm_share_median"), "{:.0%}") if eng == "megascale" else "—"
            lines.append(
                f"| {c} | {prec} | {eng} | {tps:.0f} | {r['step_ms_median']:.0f} | {ratio} | {cpu_col} | {fl / 1e9:.1f} | "
                f"{fmt(fl / peak[prec] if peak[prec] else None, '{:.1%}')} | "
                f"{fmt(fl / gemm[prec] if gemm[prec] else None, '{:.1%}')} | {share} | {r['peak_rss_mb']:.0f} |")
table = "\n".join(lines)

# Per-kernel time of megascale's step (bench_train "kernel_ms": median exclusive ms per step of each
# kernel, base/kernel_timing.h, and "other" = the step less the kernels): one column per config x
# precision, each cell "ms (share of the median step)".
kcols = [(c, prec, by[(c, "megascale", prec)]) for c in configs for prec in ("fp32", "bf16")
         if (c, "megascale", prec) in by and "kernel_ms" in by[(c, "megascale", prec)]]
kernels = []
for _, _, r in kcols:
    for k in r["kernel_ms"]:
        if k not in kernels:
            kernels.append(k)
if "other" in kernels:  # last
    kernels.remove("other"); kernels.append("other")
klines = ["| kernel | " + " | ".join(f"{c} {prec}" for c, prec, _ in kcols) + " |",
          "|---|" + "---:|" * len(kcols)]
silent = []
for k in kernels:
    vals = [r["kernel_ms"].get(k) for _, _, r in kcols]
    if k != "other" and not any(vals):
        silent.append(k)
        continue
    cells = []
    for v, (_, _, r) in zip(vals, kcols):
        if v is None:
            cells.append("n/a")
        elif v == 0:
            cells.append("—")  # not run in this config and precision
        else:
            cells.append(f"{v:.1f} ({v / r['step_ms_median']:.1%})" if abs(v) < 10 else f"{v:.0f} ({v / r['step_ms_median']:.0%})")
    label = "other (outside the timed kernels)" if k == "other" else k
    klines.append(f"| {label} | " + " | ".join(cells) + " |")
klines.append("| step (median) | " + " | ".join((f"{r['step_ms_median']:.0f}" if r['step_ms_median'] >= 10 else
                                                  f"{r['step_ms_median']:.1f}") for _, _, r in kcols) + " |")
ktable = "\n".join(klines) if kcols else "(no megascale run reported kernel times)"
if silent:
    ktable += "\n\nNo time reported (no timing scope in this build, or not run by these configs): " + \
              ", ".join(f"`{k}`" for k in silent) + "."

# Sliding window vs full attention at T=1024: the attention kernels' time (forward + backward, from
# the per-kernel table) of the windowed config over the full one, per precision. The windowed config
# also uses the parallel block, which changes the GEMM grouping but not the attention work.
swa_lines = []
for prec in ("fp32", "bf16"):
    full, swa = by.get(("gpt2-124M-T1024", "megascale", prec)), by.get(("gpt2-124M-T1024-parallel-swa256", "megascale", prec))
    att = lambda r: (r or {}).get("kernel_ms", {}).get("attention_fwd", 0) + (r or {}).get("kernel_ms", {}).get("attention_bwd", 0)
    if att(full) and att(swa):
        swa_lines.append(f"- {prec}: attention {att(swa):.0f} ms (window 256) vs {att(full):.0f} ms (full causal) per step "
                         f"= {att(swa) / att(full):.2f}x; whole step {swa['step_ms_median'] / full['step_ms_median']:.2f}x")
swa_text = ("Sliding window 256 vs full causal attention at T=1024 (issue 14 target: <= 0.8x):\n" + "\n".join(swa_lines)
            if swa_lines else "")

def peak_desc(k):
    if not peak[k]:
        return f"{k}: unknown ({unit[k]})"
    if k == "bf16" and bf16_source != "measured":
        how = "from the specification: TDPBF16PS, 16x16x32 multiply-adds per 16 cycles; no issue loop measures it"
    else:
        per_cycle = 2 ** round(math.log2(ipc[k])) if ipc[k] else None
        what = "VDPBF16PS" if unit[k] == "AVX512-BF16" else "FMA"
        how = (f"measured: {fmt(ipc[k], '{:.2f}')} {what} instructions/cycle from independent chains, rounded to "
               f"{fmt(per_cycle, '{:g}')}, x {fmt(per_cycle and fpc[k] / per_cycle, '{:g}')} flop per instruction")
    return (f"{k} {peak[k] / 1e9:.0f} GFLOP/s = {cores} cores x {fpc[k]:g} flop/cycle ({unit[k]}; {how}) x "
            f"{clock:.2f} GHz")

now = datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC")
steps_desc = "; ".join(sorted({f"{r['config']}: {r.get('warmup','?')} warm-up + {r.get('steps','?')} timed steps"
                               for r in runs if "error" not in r}))
p0 = probes[0] if probes else {}
body = f"""Generated by `bench/run_bench.sh{' --quick' if mode == 'quick' else ''}` on {now} ({mode} mode).

- CPU: {cpu}, {os.cpu_count()} cores ({isa}); 2 threads for both engines.
- Clock: {fmt(clock, '{:.2f}')} GHz **measured** (dependent 64-bit multiply chain on all {cores} threads at once, in
  thread CPU time: `ms::measure_core_clock_ghz`); /proc/cpuinfo "cpu MHz" says {fmt(mhz_load, '{:.0f}')} MHz even under
  load (the VM reports a fixed nominal value), so it is not used.
- Hardware peaks at that clock, the denominators of "MFU (hardware peak)" (MFU as MegaScale counts it:
  cores x FLOP/cycle per core x measured clock, for the precision in use; `ms::hardware_peak`):
  {peak_desc('fp32')};
  {peak_desc('bf16')}.
- Best measured GEMM (better of the probes before and after the runs): fp32 `ms::measure_sgemm_peak_gflops()`
  {fmt(gemm['fp32'] and gemm['fp32'] / 1e9, '{:.0f}')} GFLOP/s; bf16 oneDNN matmul (bf16 in, f32 out, 1024x768 @ 768x3072, best of
  plain and pre-packed weights, measured by `bench_train --probe`) {fmt(gemm['bf16'] and gemm['bf16'] / 1e9, '{:.0f}')} GFLOP/s: the denominators of
  "model FLOP/s / best measured GEMM", how close a step comes to the GEMM ceiling oneDNN reaches here (not
  an MFU: above 100% means the GEMM probe itself was slowed by other load).
- PyTorch fp32 GEMMs: system BLAS `libblas.so.3` resolved to `{os.environ.get("MS_BENCH_TORCH_BLAS", "?")}` for
  the PyTorch processes (Debian's torch uses the generic `libblas.so.3`; netlib's reference BLAS there
  would be ~1 GFLOP/s, so the script points PyTorch at OpenBLAS, OpenMP build). bf16 autocast GEMMs
  go through oneDNN inside torch.
- Model FLOPs: megascale's `GPT::flops_per_token` (3x forward matmuls, attention over the keys actually
  attended, LM head with the real vocabulary), the same count for both engines.
- "Step time outside GEMMs": 1 - (time inside fp32 and bf16 GEMMs, `ms::KernelId::kGemmFp32` and
  `kGemmBf16` of `ms::set_kernel_timing`) / step time, median over the timed steps (megascale only).
- Per-kernel table (megascale only): median ms per step charged to each kernel by its
  `ms::KernelTimeScope` (exclusive time: a kernel called inside another, e.g. a bf16 conversion inside a
  linear layer, is charged to itself, not to both), and in brackets the share of the median step; "other"
  is the step less the timed kernels (embedding, residual adds, gradient zeroing, the data feed, untimed
  code); "—": the kernel did not run in that config and precision. Medians of parts need not add up to
  the median step exactly.
- Medians over timed steps after warm-up ({steps_desc}). Each run is its own process (peak RSS
  = `getrusage` ru_maxrss of that process); megascale and PyTorch alternate per config and precision.
- "tokens per CPU-s": tokens / process CPU time (all threads) of the step, a second view that other
  processes on the cores skew less than wall time (spin-waiting still counts as CPU time).
- Load average (1/5/15 min) at start: {load_start}; at end: {load_end}. **Other engineers use this
  machine**: a load above ~0.5 means the numbers are pessimistic and noisy; rerun on an idle machine before
  drawing fine conclusions.

{table}

Per-kernel time of megascale's training step, ms per step (share of the step):

{ktable}

{swa_text}
"""
if notes:
    body += "\nn/a rows:\n" + "\n".join(f"- {n}" for n in notes) + "\n"
print(body)

if doc:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(doc)), "..", "bench"))
    from doc_section import write_section
    write_section(doc, "<!-- bench:begin (written by bench/run_bench.sh) -->", "<!-- bench:end -->", body,
                  keep_previous=True)
    print(f"run_bench: wrote {doc}")
PYEOF
