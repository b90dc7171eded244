#!/usr/bin/python3
"""A stand-in training rank for the dashboard tests (tests/launch/test_dashboard.cpp): started by
`megascale launch`, it writes what a training rank writes for the launcher (docs/observability.md):
rank 0 publishes run.json in $MEGASCALE_LAUNCH_DIR (atomically), every rank appends a header and
one step record per interval to OUT_DIR/records/rank-RRRRR.jsonl, each line flushed whole (the last
one written in two pieces, as a reader may see it). Rank SLOW_RANK's forward takes (1 + RATIO)x.

usage: fake_rank.py OUT_DIR STEPS INTERVAL_S SLOW_RANK RATIO
"""
import json
import os
import socket
import sys
import time

out_dir, steps, interval, slow_rank, ratio = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
records = os.path.join(os.path.abspath(out_dir), "records")
os.makedirs(records, exist_ok=True)
if rank == 0 and os.environ.get("MEGASCALE_LAUNCH_DIR"):
    run = {"out_dir": os.path.abspath(out_dir), "records_dir": records, "world": world, "config": "[train]\nsteps = %d\n" % steps}
    tmp = os.path.join(os.environ["MEGASCALE_LAUNCH_DIR"], "run.json.tmp")
    with open(tmp, "w") as f:
        json.dump(run, f)
    os.replace(tmp, os.path.join(os.environ["MEGASCALE_LAUNCH_DIR"], "run.json"))

dp = world // 2 if world % 2 == 0 and world > 1 else world
coord = {"tp": 0, "dp": rank % dp, "pp": rank // dp}
header = {"type": "header", "format": 1, "rank": rank, "world": world, "coord": coord, "order": "tp-dp-pp",
          "shape": {"tp": 1, "dp": dp, "pp": world // dp}, "host": socket.gethostname(), "pid": os.getpid(),
          "backend": "fake", "groups": {}, "clock": {"offset_ns": 0, "rtt_ns": 0}, "unix_ns": time.time_ns()}
t = 0
with open(os.path.join(records, "rank-%05d.jsonl" % rank), "w") as f:
    f.write(json.dumps(header) + "\n")
    f.flush()
    for step in range(steps):
        fwd = 10.0 * (1 + ratio if rank == slow_rank else 1) + 0.01 * rank
        ms = {"data": 0.5, "forward": fwd, "backward": 20.0 + 0.01 * rank, "optimizer": 3.0, "dp-reduce-scatter": 4.0}
        dur = int(sum(ms.values()) * 1e6)
        line = json.dumps({"type": "step", "step": step, "t0": t, "t1": t + dur,
                           "loss": 6.0 - 0.05 * step if rank == 0 else None, "lr": 1e-3,
                           "tokens_per_s": 1000.0 + step, "mfu": 0.1, "ms": ms}) + "\n"
        t += dur
        f.write(line[:10])  # a partial line first: a reader must wait for its newline
        f.flush()
        time.sleep(0.01)
        f.write(line[10:])
        f.flush()
        time.sleep(interval)
