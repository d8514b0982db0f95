"""Where a profiled window leaves the GPU idle: the gaps between device activities in a torch.profiler
Chrome trace (training/callbacks.py ProfilerCallback writes one), each classed as *starved* (the next
kernel was launched by the host only after the GPU had run dry: the host is the bottleneck there) or
*latency* (it was already queued: the gap is the device's own launch latency), with what the host was
doing during the largest starved gaps.

    python benchmarks/trace_gaps.py runs/x/profile/trace-steps20-22.json [--top 15] [--min-us 5]
"""
import argparse
import bisect
import gzip
import json
from collections import Counter


def load(path):
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
        return json.load(f)["traceEvents"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--min-us", type=float, default=5.0, help="gaps shorter than this are not counted")
    a = ap.parse_args()
    events = [e for e in load(a.trace) if e.get("ph") == "X"]
    device = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                    key=lambda e: e["ts"])
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    host_ops = sorted((e for e in events if e.get("cat") in ("cpu_op", "python_function", "user_annotation")),
                      key=lambda e: e["ts"])
    host_starts = [e["ts"] for e in host_ops]
    if not device:
        raise SystemExit(f"{a.trace}: no GPU activity in the trace")

    busy, gaps, end = 0.0, [], device[0]["ts"]
    for e in device:
        if e["ts"] - end >= a.min_us:
            launch = launches.get(e.get("args", {}).get("correlation"))
            starved = launch is not None and launch["ts"] + launch["dur"] > end
            gaps.append((e["ts"] - end, end, e, launch, starved))
        busy += max(0.0, e["ts"] + e["dur"] - max(e["ts"], end))
        end = max(end, e["ts"] + e["dur"])
    span = end - device[0]["ts"]
    starved = sum(g[0] for g in gaps if g[4])
    latency = sum(g[0] for g in gaps if not g[4])
    print(f"window {span / 1e3:.1f} ms: GPU busy {busy / 1e3:.1f} ms ({busy / span:.1%}); "
          f"{len(gaps)} gaps >= {a.min_us:g} us: host-starved {starved / 1e3:.2f} ms, "
          f"queued (launch latency) {latency / 1e3:.2f} ms; {len(device)} device activities")
    small = span - busy - starved - latency
    print(f"gaps under {a.min_us:g} us: {small / 1e3:.2f} ms in all")
    print(f"\nlargest {a.top} gaps:")
    for dur, start, nxt, launch, is_starved in sorted(gaps, key=lambda g: -g[0])[:a.top]:
        kind = "starved" if is_starved else "queued"
        print(f"  {dur / 1e3:8.3f} ms {kind:7s} before {nxt['name'][:70]}")
        if is_starved:  # the host ops running while the GPU waited, outermost first
            stop = launch["ts"]
            i = bisect.bisect_left(host_starts, start - 5e5)
            busy_host = Counter()
            for h in host_ops[i:]:
                if h["ts"] > stop:
                    break
                overlap = min(stop, h["ts"] + h["dur"]) - max(start, h["ts"])
                if overlap > 0.2 * dur:
                    busy_host[h["name"][:80]] = max(busy_host[h["name"][:80]], overlap)
            for name, ov in busy_host.most_common(6):
                print(f"           host: {ov / 1e3:7.3f} ms in {name}")


if __name__ == "__main__":
    main()
