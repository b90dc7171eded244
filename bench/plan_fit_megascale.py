#!/usr/bin/env python3
"""plan_fit_megascale.py: stages 2-5 of the planner's calibration (planner.md §5) on MegaScale's
Table 3 (nine ablation rows, 175B on 256 A100s) and Table 2 (the visible rows: 256-1,024 GPUs at
batch 768, 12,288 at 6144; Megatron-LM and MegaScale), with stage 1's compute constants
(bench/plan_fit_table5.py) held fixed. A grid over the communication and kernel constants that these
rows isolate: NVLink's and the NIC's large-message efficiency (TP; PP and DP), FlashAttention-2's
share of the peak (row 7) and the compute slowdown while overlapped DP traffic runs (gamma: the rows
whose step shrinks at a fixed batch). Presets as planner.md §8.4 fixes them: Megatron-LM = sequential block,
full attention, SP, selective recomputation, ZeRO-2, tp-bwd overlap, paired p2p, unfused kernels,
sync data, Adam; MegaScale = parallel block, sliding window 1024, no recomputation, tp/pp/dp
overlap, FlashAttention, async data, LAMB; the Table 3 rows add one technique at a time
(recomputation goes with "efficient operators": FlashAttention stores no s x s scores).
MFU = eq. 7's FLOPs over the predicted step at 312 TFLOP/s (the acceptance's convention).
Prints every row's error, the RMS, leave-one-out errors and the best constants.
Usage: bench/plan_fit_megascale.py [--build DIR] [--quick]
"""
import argparse, itertools, json, math, os, subprocess, tempfile

STAGE1 = {"gemm_eta_inf": 0.8, "attention_eta": 0.75, "mem_eta": 0.9, "host_sync_s": 0.05,
          "optimizer_bytes_per_param": 56}
GRID = {"intra_eta": [0.4, 0.5, 0.6], "nic_eta": [0.6, 0.8], "flash_eta": [0.55, 0.7], "overlap_gamma": [0.0, 0.15, 0.25, 0.4]}
F = 72 * 96 * 12288 ** 2 * (1 + 2048 / (6 * 12288) + 64000 / (12 * 96 * 12288))  # eq. 7
# name, block, sliding, overlap, kernels, data, optimizer, recompute, gpus, batch, published MFU %
T3 = [("T3.1 Megatron-LM", "sequential", 0, "tp-bwd", "megatron", "sync", "adam", "selective", 47.7),
      ("T3.2 +parallel block", "parallel", 0, "tp-bwd", "megatron", "sync", "adam", "selective", 52.3),
      ("T3.3 +sliding window", "parallel", 1, "tp-bwd", "megatron", "sync", "adam", "selective", 53.3),
      ("T3.4 +TP overlap", "parallel", 1, "tp", "megatron", "sync", "adam", "selective", 55.5),
      ("T3.5 +PP overlap", "parallel", 1, "tp,pp", "megatron", "sync", "adam", "selective", 58.0),
      ("T3.6 +DP overlap", "parallel", 1, "tp,pp,dp", "megatron", "sync", "adam", "selective", 59.5),
      ("T3.7 +efficient operators", "parallel", 1, "tp,pp,dp", "megascale", "sync", "adam", "none", 61.2),
      ("T3.8 +misc", "parallel", 1, "tp,pp,dp", "megascale", "async", "adam", "none", 62.3)]
ROWS = [r[:8] + (256, 256, r[8]) for r in T3]
ROWS.append(("T3.9 +LAMB, batch x3", "parallel", 1, "tp,pp,dp", "megascale", "async", "lamb", "none", 256, 768, 65.3))
for gpus, batch, meg, ms in [(256, 768, 53.0, 65.3), (512, 768, 49.9, 63.5), (768, 768, 46.7, 61.3),
                             (1024, 768, 44.7, 59.0), (12288, 6144, 41.2, 55.2)]:
    ROWS.append((f"T2 {gpus} Megatron-LM", "sequential", 0, "tp-bwd", "megatron", "sync", "adam", "selective",
                 gpus, batch, meg))
    if gpus != 256:  # MegaScale's 256-GPU row of Table 2 is Table 3's row 9
        ROWS.append((f"T2 {gpus} MegaScale", "parallel", 1, "tp,pp,dp", "megascale", "async", "lamb", "none",
                     gpus, batch, ms))


def main():
    ap = argparse.ArgumentParser()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--quick", action="store_true", help="only the grid's middle point")
    ap.add_argument("--point", help='evaluate one point only, JSON: \'{"intra_eta": 0.5, ...}\' (over stage 1)')
    args = ap.parse_args()
    binary, tmp = os.path.join(args.build, "megascale"), tempfile.mkdtemp(prefix="plan_fit_ms_")
    base = open(os.path.join(root, "configs/clusters/a100-80g.toml")).read()
    base = base.split("[efficiency]")[0]

    def model(block, sliding):
        path = os.path.join(tmp, f"m_{block}_{sliding}.toml")
        window = 'attention = "sliding"\nwindow = 1024\n' if sliding else ""
        open(path, "w").write(f'[model]\nn_layer = 96\nn_embd = 12288\nn_head = 128\nvocab_size = 64000\n'
                              f'max_seq_len = 2048\nblock = "{block}"\n{window}[train]\nseq_len = 2048\n')
        return path

    def predict(eff):
        cluster = os.path.join(tmp, "c.toml")
        open(cluster, "w").write(base + "\n[efficiency]\n" + "".join(f"{k} = {v}\n" for k, v in eff.items()))
        out = []
        for name, block, sliding, overlap, kernels, data, opt, rec, gpus, batch, published in ROWS:
            cmd = [binary, "plan", "--model", model(block, sliding), "--cluster", cluster, "--gpus", str(gpus),
                   "--batch", str(batch), "--tp", "8", "--pp", "8", "--virtual-stages", "6", "--schedule",
                   "interleaved", "--micro-batch", "1", "--dtype", "bf16", "--overlap", overlap, "--kernels", kernels,
                   "--data-pipeline", data, "--optimizer", opt, "--recompute", rec, "--json"]
            j = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
            out.append((name, 100 * F * batch * 2048 / j["step_time_s"] / (gpus * 312e12), published))
        return out

    grid = [dict(zip(GRID, v)) for v in itertools.product(*GRID.values())]
    if args.quick:
        grid = [{k: v[len(v) // 2] for k, v in GRID.items()}]
    if args.point:
        grid = [json.loads(args.point)]
    fits = [(g, predict(dict(STAGE1, **g))) for g in grid]  # a point's keys override stage 1's
    err = lambda o: [p - q for _, p, q in o]  # MFU points
    rms = lambda e: math.sqrt(sum(x * x for x in e) / len(e))
    g, out = min(fits, key=lambda f: rms(err(f[1])))
    print("best:", ", ".join(f"{k} {v}" for k, v in g.items()), f"(stage 1: {STAGE1}) - RMS {rms(err(out)):.1f} points")
    print("| row | predicted MFU | published MFU | error (points) | leave-one-out error |\n|---|---|---|---|---|")
    for i, (name, p, q) in enumerate(out):
        others = min(fits, key=lambda f: rms([x for k, x in enumerate(err(f[1])) if k != i]))
        print(f"| {name} | {p:.1f}% | {q:.1f}% | {p - q:+.1f} | {others[1][i][1] - q:+.1f} |")


if __name__ == "__main__":
    main()
