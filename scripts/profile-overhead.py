#!/usr/bin/env python3
"""scripts/profile-overhead.py DB TAG: the profiling overhead of an A/B made by scripts/gpu-ab.sh with
A = profiling off ([profile] enabled = false) and B = profiling on (a CUPTI window inside the run),
read back from the receipts. Prints, per run, the median steady step time and, for B, the medians
inside and outside the window that the run recorded (runs.summary_json: profile); then the two overheads
the profiling issue sets targets for:
  outside the window = median over B runs of their outside-window median / median over A runs - 1
                       (target < 0.5 %)
  inside the window  = median over B runs of (inside median / outside median - 1)   (target < 10 %)
Only runs with status ok count. Exit 2 on bad arguments or when a side has no run.
  python3 scripts/profile-overhead.py receipts-gpu.db profiling
"""
import json
import sqlite3
import statistics
import sys


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    db, tag = argv[1], argv[2]
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = con.execute("SELECT id, tags, median_step_ms, summary_json FROM runs WHERE status = 'ok' ORDER BY id").fetchall()
    off, on = [], []
    for run_id, tags, median, summary in rows:
        tags = json.loads(tags)
        if f"{tag}-a" in tags and median is not None:
            off.append(median)
            print(f"run {run_id} off: median step {median:.2f} ms")
        elif f"{tag}-b" in tags:
            profile = json.loads(summary or "{}").get("profile") or {}  # summary_json holds RunSummary::extra
            inside, outside = profile.get("median_step_ms_inside_window"), profile.get("median_step_ms_outside_window")
            if inside is None or outside is None:
                print(f"run {run_id} on: no window medians ({profile.get('status')}: {profile.get('reason')})")
                continue
            on.append((inside, outside))
            print(f"run {run_id} on: median step {median:.2f} ms, inside window {inside:.2f} ms, "
                  f"outside {outside:.2f} ms, records {profile.get('records')}, dropped {profile.get('dropped_records')}")
    if not off or not on:
        print(f"need ok runs tagged {tag}-a (off) and {tag}-b (on): found {len(off)} and {len(on)}", file=sys.stderr)
        return 2
    base = statistics.median(off)
    outside = statistics.median(o for _, o in on)
    inside_pct = statistics.median(100.0 * (i / o - 1.0) for i, o in on)
    print(f"outside the window vs off: {100.0 * (outside / base - 1.0):+.2f} % "
          f"({outside:.2f} vs {base:.2f} ms, {len(on)} vs {len(off)} runs; target < 0.5 %)")
    print(f"inside the window vs outside: {inside_pct:+.2f} % (median over {len(on)} runs; target < 10 %)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
