# exposed_by_kind.py TRACE.json.gz: each NCCL kernel's time not overlapped by any other kernel, memcpy or memset of
# the same trace (rank 0's profile window), summed by collective; then the compute gaps over 50 us and the
# collectives running across them. How the numbers in README.md were read from the returned rank-0 traces.
import bisect, collections, gzip, json, sys

trace = json.load(gzip.open(sys.argv[1], "rt"))
events = sorted((e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                key=lambda e: e["ts"])
t0 = events[0]["ts"]
is_nccl = lambda e: "nccl" in e["name"].lower()
busy = []
for a, b in ((e["ts"], e["ts"] + e["dur"]) for e in events if not is_nccl(e)):
    if busy and a <= busy[-1][1]: busy[-1][1] = max(busy[-1][1], b)
    else: busy.append([a, b])
starts = [m[0] for m in busy]

def covered(a, b):
    total, i = 0, max(0, bisect.bisect_right(starts, a) - 1)
    while i < len(busy) and busy[i][0] < b:
        total += max(0, min(b, busy[i][1]) - max(a, busy[i][0])); i += 1
    return total

kinds = collections.defaultdict(lambda: [0, 0.0, 0.0])
for e in filter(is_nccl, events):
    k = kinds[e["name"].split("(")[0].replace("ncclDevKernel_", "")]
    k[0] += 1; k[1] += e["dur"]; k[2] += e["dur"] - covered(e["ts"], e["ts"] + e["dur"])
print(f"window {(events[-1]['ts'] + events[-1]['dur'] - t0) / 1e3:.2f} ms, compute busy {sum(b - a for a, b in busy) / 1e3:.2f} ms")
for name, (n, total, exposed) in kinds.items(): print(f"  {name}: {n} kernels, {total / 1e3:.2f} ms, exposed {exposed / 1e3:.2f} ms")
for a, b in ((busy[i][1], busy[i + 1][0]) for i in range(len(busy) - 1) if busy[i + 1][0] - busy[i][1] > 50):
    running = {e["name"].split("(")[0].replace("ncclDevKernel_", "") for e in filter(is_nccl, events) if e["ts"] < b and e["ts"] + e["dur"] > a}
    print(f"  gap at {(a - t0) / 1e3:8.2f} ms: {b - a:6.0f} us {sorted(running)}")
