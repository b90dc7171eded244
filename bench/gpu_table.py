#!/usr/bin/env python3
"""gpu_table: joins bench_cuda_kernels' and torch_ops_cuda.py's JSON lines (same op, dtype, shape)
and prints one table, the GPU check's last output: megascale's median ms and rate (TFLOP/s for
GEMMs, GB/s for the rest, with GB/s as a share of the copy bandwidth measured in the same run),
PyTorch's, and speed = torch ms / megascale ms (above 1: megascale faster). Lines that are not
JSON objects are skipped. Optional --tests: gtest JSON reports, summarised above the table.
Usage: gpu_table.py MS.jsonl TORCH.jsonl [--tests a.json b.json ...]
"""
import argparse
import json


def read_lines(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass
    except OSError as e:
        print(f"gpu_table: cannot read {path}: {e}")
    return rows


def rate(r):
    if "tflops" in r:
        return f"{r['tflops']:8.1f} TFLOP/s"
    if "gbps" in r:
        return f"{r['gbps']:8.0f} GB/s   "
    return " " * 16


def tests_summary(paths):
    for p in paths:
        try:
            with open(p) as f:
                j = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            print(f"tests {p}: no report ({e})")
            continue
        cases = [t for s in j.get("testsuites", []) for t in s.get("testsuite", [])]
        failed = [t["name"] for t in cases if t.get("failures")]
        skipped = [t["name"] for t in cases if t.get("result") == "SKIPPED"]
        print(f"tests {p.split('/')[-1]}: {len(cases)} run, {len(failed)} failed, {len(skipped)} skipped"
              + (f"; FAILED: {', '.join(failed)}" if failed else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ms")
    ap.add_argument("torch")
    ap.add_argument("--tests", nargs="*", default=[])
    a = ap.parse_args()
    ms, th = read_lines(a.ms), read_lines(a.torch)
    dev = next((r for r in ms if r.get("op") == "device"), {})
    tdev = next((r for r in th if r.get("op") == "device"), {})
    tests_summary(a.tests)
    if dev:
        print(f"GPU: {dev.get('name')} ({dev.get('sms')} SMs, cc {dev.get('cc')}, max clock "
              f"{dev.get('clock_khz', 0) / 1e3:.0f} MHz, dense bf16 peak {dev.get('peak_bf16_tflops', 0):.0f} TFLOP/s); "
              f"torch {tdev.get('torch', '?')} cuda {tdev.get('cuda', '?')}")
    key = lambda r: (r.get("op"), r.get("dtype"), r.get("shape"))
    tmap = {key(r): r for r in th if r.get("op") != "device"}
    copy = next((r for r in ms if r.get("op") == "copy"), None)
    print(f"{'op':<22} {'dtype':<5} {'shape':<18} {'megascale':>9} {'rate':>16} {'torch':>9} {'rate':>16} {'speed':>6}  note")
    for r in ms:
        if r.get("op") == "device":
            continue
        t = tmap.get(key(r))
        note = ""
        if "gbps" in r and copy and r is not copy:
            note = f"{100 * r['gbps'] / copy['gbps']:.0f}% of copy"
        tms = f"{t['ms']:9.3f}" if t else f"{'-':>9}"
        trate = rate(t) if t else f"{'-':>16}"
        speed = f"{t['ms'] / r['ms']:6.2f}" if t else f"{'-':>6}"
        print(f"{r['op']:<22} {r['dtype']:<5} {r['shape']:<18} {r['ms']:9.3f} {rate(r)} {tms} {trate} {speed}  {note}")
    print("speed = torch ms / megascale ms (>1: megascale faster); ms = median of 20, CUDA events")


if __name__ == "__main__":
    main()
