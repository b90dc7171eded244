#!/usr/bin/env python3
"""gpu_train_table: the training part of the GPU check's output (scripts/gpu/check.sh), printed
last: one row per run of bench_train --train.device=cuda (megascale) and of torch_gpt.py --device
cuda (PyTorch eager / torch.compile) on the same card in the same command: tokens/s, median step ms,
model TFLOP/s and MFU against the card's dense peak for the precision (megascale's gpu_peak_tflops:
SMs x clock x FLOP/SM/clock, the same denominator for both engines), and speed = tokens/s over
PyTorch compile's at the same precision (above 1: megascale faster). Lines that are not JSON objects
(or carry "error") are listed as failures. Optional --tests: gtest JSON reports, summarised first.
Usage: gpu_train_table.py MS.jsonl TORCH.jsonl [--tests a.json ...]
"""
import argparse

from gpu_table import read_lines, tests_summary


def name(r):
    if r.get("engine") == "megascale":
        return "megascale"
    return "torch compile" if r.get("compile") else "torch eager"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ms")
    ap.add_argument("torch")
    ap.add_argument("--tests", nargs="*", default=[])
    a = ap.parse_args()
    ms, th = read_lines(a.ms), read_lines(a.torch)
    tests_summary(a.tests)
    for r in ms + th:
        if "error" in r:
            print(f"FAILED run: {r['error']}")
    rows = [r for r in ms + th if "tokens_per_s_median" in r]
    peak = {r["precision"]: r.get("gpu_peak_tflops", 0) for r in ms if "gpu_peak_tflops" in r}
    gpu = next((r.get("gpu") for r in rows if r.get("gpu")), "?")
    print(f"GPT training on {gpu}: dense peak " + ", ".join(f"{p} {v:.0f} TFLOP/s" for p, v in sorted(peak.items())))
    base = {r["precision"]: r["tokens_per_s_median"] for r in th if r.get("compile") and "tokens_per_s_median" in r}
    print(f"{'engine':<14} {'prec':<5} {'B':>3} {'T':>5} {'tokens/s':>10} {'step ms':>9} {'TFLOP/s':>8} {'MFU':>6} "
          f"{'vs compile':>10}  note")
    for r in rows:
        p = r["precision"]
        tf = r["flops_per_token"] * r["tokens_per_s_median"] / 1e12
        mfu = f"{100 * tf / peak[p]:5.1f}%" if peak.get(p) else f"{'-':>6}"
        vs = f"{r['tokens_per_s_median'] / base[p]:10.2f}" if base.get(p) else f"{'-':>10}"
        note = []
        if r.get("warmup_s") and r.get("compile"):
            note.append(f"warm-up {r['warmup_s']:.0f} s")
        if r.get("peak_gpu_mem_mb"):
            note.append(f"{r['peak_gpu_mem_mb'] / 1024:.1f} GiB")
        if "device_allocations" in r:
            note.append(f"{r['device_allocations']} cudaMalloc")
        print(f"{name(r):<14} {p:<5} {r['B']:>3} {r['T']:>5} {r['tokens_per_s_median']:10.0f} "
              f"{r['step_ms_median']:9.1f} {tf:8.1f} {mfu} {vs}  {', '.join(note)}")
    print("MFU = model FLOPs/token x tokens/s / the card's dense peak; step ms = median of the timed steps")


if __name__ == "__main__":
    main()
