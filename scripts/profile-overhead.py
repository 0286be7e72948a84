#!/usr/bin/env python3
"""scripts/profile-overhead.py DB TAG: the profiling overhead of an A/B made by scripts/gpu-ab.sh with
A = profiling off ([profile] enabled = false) and B = profiling on (a CUPTI window inside the run),
read back from the receipts (runs, steps, summary_json).

Step times drift as training goes (on nam56r-small the early steps are slower while the MoE load
evens out), so each side is compared with the other on the SAME step indices:
  inside the window  = median of B's window steps / median of A's steps at those indices - 1 (target < 10 %)
  outside the window = median of B's other steady steps / median of A's at those indices - 1 (target < 0.5 %)
It also prints what each B run recorded itself (summary profile: inside vs around the window).
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
    runs = con.execute("SELECT id, tags, summary_json FROM runs WHERE status = 'ok' ORDER BY id").fetchall()
    off, on, window, warmup = [], [], None, None
    for run_id, tags, summary in runs:
        tags, extra = json.loads(tags), json.loads(summary or "{}")
        steps = dict(con.execute("SELECT step, wall_ms FROM steps WHERE run_id = ? AND rank = 0", (run_id,)).fetchall())
        warmup = extra.get("warmup_steps", warmup)
        if f"{tag}-a" in tags:
            off.append(steps)
        elif f"{tag}-b" in tags:
            profile = extra.get("profile") or {}
            if profile.get("status") != "ok":
                print(f"run {run_id} on: profiling {profile.get('status')} ({profile.get('reason')}): not counted")
                continue
            window = tuple(profile["window"])
            on.append(steps)
            print(f"run {run_id} on: recorded inside {profile.get('median_step_ms_inside_window'):.2f} ms, around "
                  f"{profile.get('median_step_ms_around_window') or float('nan'):.2f} ms "
                  f"({profile.get('overhead_pct'):+.2f} %), records {profile.get('records')}, "
                  f"dropped {profile.get('dropped_records')}")
    if not off or not on:
        print(f"need ok runs tagged {tag}-a (off) and {tag}-b (on): found {len(off)} and {len(on)}", file=sys.stderr)
        return 2
    common = set.intersection(*(set(s) for s in off + on))
    steady = sorted(s for s in common if s >= (warmup or 0))
    inside = [s for s in steady if window[0] <= s < window[1]]
    outside = [s for s in steady if not window[0] <= s < window[1]]

    def median_of(group, indices):
        return statistics.median(run[s] for run in group for s in indices)

    for name, indices, target in (("inside", inside, "< 10 %"), ("outside", outside, "< 0.5 %")):
        a, b = median_of(off, indices), median_of(on, indices)
        print(f"{name} the window (steps {indices[0]}-{indices[-1]}, {len(indices)} a run): on {b:.2f} ms vs off "
              f"{a:.2f} ms = {100.0 * (b / a - 1.0):+.2f} % ({len(on)} vs {len(off)} runs; target {target})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
