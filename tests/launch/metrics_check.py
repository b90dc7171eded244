#!/usr/bin/python3
"""Scrapes a dashboard's /metrics twice and checks it (tests/launch/test_dashboard.cpp): each scrape
parses with prometheus_client's text-format parser (Debian's python3-prometheus-client), every
family has HELP and TYPE, the expected families are there, and every counter sample of the first
scrape is present in the second with a value at least as large; with --expect-growth
megascale_steps_total must have grown. Prints one line per check; exit 0 when all hold.

usage: metrics_check.py URL [--gap S] [--expect-growth]
"""
import argparse
import sys
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        ctype = r.headers.get("Content-Type", "")
        text = r.read().decode("utf-8")
    if not ctype.startswith("text/plain"):
        sys.exit(f"FAIL: {url} answered Content-Type {ctype!r}, not text/plain")
    families = list(text_string_to_metric_families(text))
    for fam in families:
        if not fam.documentation:
            sys.exit(f"FAIL: family {fam.name} has no HELP line")
        if fam.type == "unknown":
            sys.exit(f"FAIL: family {fam.name} has no TYPE line")
    return families


def counters(families):
    out = {}
    for fam in families:
        if fam.type != "counter":
            continue
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


ap = argparse.ArgumentParser()
ap.add_argument("url")
ap.add_argument("--gap", type=float, default=2.0)
ap.add_argument("--expect-growth", action="store_true")
a = ap.parse_args()
first = scrape(a.url)
names = {f.name for f in first}
for want in ["megascale_steps", "megascale_tokens", "megascale_records", "megascale_loss", "megascale_tokens_per_second",
             "megascale_mfu", "megascale_segment_ms", "megascale_rank_running"]:
    if want not in names:
        sys.exit(f"FAIL: family {want} missing; have {sorted(names)}")
print(f"ok: first scrape parsed, {len(first)} families, {sum(len(f.samples) for f in first)} samples")
time.sleep(a.gap)
second = scrape(a.url)
c1, c2 = counters(first), counters(second)
if not c1:
    sys.exit("FAIL: no counter samples")
for key, v in c1.items():
    if key not in c2:
        sys.exit(f"FAIL: counter {key} vanished in the second scrape")
    if c2[key] < v:
        sys.exit(f"FAIL: counter {key} went down: {v} -> {c2[key]}")
print(f"ok: {len(c1)} counter samples, none went down")
steps = ("megascale_steps_total", ())
if a.expect_growth:
    if c2.get(steps, 0) <= c1.get(steps, 0):
        sys.exit(f"FAIL: megascale_steps_total did not grow: {c1.get(steps)} -> {c2.get(steps)}")
    print(f"ok: megascale_steps_total grew {c1[steps]:g} -> {c2[steps]:g}")
print("metrics ok")
