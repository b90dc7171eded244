"""record_times: wall-clock times from a rank's record file (docs/observability.md "Record files").

The header's aligned_ns and unix_ns were read together when the file was opened, so a record's wall
time is unix_ns + (t - aligned_ns). The benches use it to time the end of the first step after a
restart on the rank's own clock, instead of when the driver learned of it (records flushed every
obs.flush_ms, tailed at each heartbeat: up to ~0.4 s later in the recovery benches).
"""
import json


def first_step_end_unix(path):
    """Unix seconds at which the file's first "step" record ended; None when the file, its header's
    aligned_ns or a step record is missing."""
    try:
        with open(path) as fh:
            header = json.loads(fh.readline())
            if "aligned_ns" not in header or "unix_ns" not in header:
                return None
            for line in fh:
                if '"type":"step"' in line:
                    step = json.loads(line)
                    return (header["unix_ns"] + (step["t1"] - header["aligned_ns"])) / 1e9
    except (OSError, ValueError, KeyError):
        return None
    return None
