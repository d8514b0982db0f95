"""Where a profiled window leaves the GPU idle: the gaps between device activities in a torch.profiler
Chrome trace (training/callbacks.py ProfilerCallback writes one), each classed as *starved* (the next
kernel was launched by the host only after the GPU had run dry: the host is the bottleneck there),
*queued* (it was already launched: the gap is the device's own latency) or *unknown* (no launch event
found), with what the host was doing during the largest starved gaps; and how much of the collectives' (NCCL)
kernel time ran beside other kernels (hidden) rather than alone on the GPU (exposed). Launches are runtime calls
(cudaLaunchKernel: aten, cuBLAS) or driver calls (cuLaunchKernel: inductor's Triton kernels).

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
    device = sorted(
        (e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"]
    )
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    host_ops = sorted(
        (e for e in events if e.get("cat") in ("cpu_op", "python_function", "user_annotation")), key=lambda e: e["ts"]
    )
    host_starts = [e["ts"] for e in host_ops]
    if not device:
        raise SystemExit(f"{a.trace}: no GPU activity in the trace")

    busy, gaps, end = 0.0, [], device[0]["ts"]
    for e in device:
        if e["ts"] - end >= a.min_us:
            launch = launches.get(e.get("args", {}).get("correlation"))
            kind = "unknown" if launch is None else "starved" if launch["ts"] + launch["dur"] > end else "queued"
            gaps.append((e["ts"] - end, end, e, launch, kind))
        busy += max(0.0, e["ts"] + e["dur"] - max(e["ts"], end))
        end = max(end, e["ts"] + e["dur"])
    span = end - device[0]["ts"]
    by_kind = {k: sum(g[0] for g in gaps if g[4] == k) for k in ("starved", "queued", "unknown")}
    print(
        f"window {span / 1e3:.1f} ms: GPU busy {busy / 1e3:.1f} ms ({busy / span:.1%}); "
        f"{len(gaps)} gaps >= {a.min_us:g} us: host-starved {by_kind['starved'] / 1e3:.2f} ms, "
        f"queued {by_kind['queued'] / 1e3:.2f} ms, launch not found {by_kind['unknown'] / 1e3:.2f} ms; "
        f"{len(device)} device activities"
    )
    small = span - busy - sum(by_kind.values())
    print(f"gaps under {a.min_us:g} us: {small / 1e3:.2f} ms in all")
    comm = [e for e in device if "nccl" in e["name"].lower()]
    if comm:
        compute = [(e["ts"], e["ts"] + e["dur"]) for e in device if "nccl" not in e["name"].lower()]
        merged = []  # the union of the other kernels' intervals, sorted
        for start, stop in compute:
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], stop)
            else:
                merged.append([start, stop])
        starts = [m[0] for m in merged]
        total = hidden = 0.0
        for e in comm:
            start, stop = e["ts"], e["ts"] + e["dur"]
            total += stop - start
            for m in merged[max(0, bisect.bisect_right(starts, start) - 1) :]:
                if m[0] >= stop:
                    break
                hidden += max(0.0, min(stop, m[1]) - max(start, m[0]))
        print(
            f"collectives (NCCL kernels): {total / 1e3:.1f} ms, {hidden / 1e3:.1f} ms of it beside other kernels "
            f"({hidden / total:.0%} hidden), {(total - hidden) / 1e3:.1f} ms exposed"
        )
    print(f"\nlargest {a.top} gaps:")
    for dur, start, nxt, launch, kind in sorted(gaps, key=lambda g: -g[0])[: a.top]:
        print(f"  {dur / 1e3:8.3f} ms {kind:7s} before {nxt['name'][:70]}")
        if kind == "starved":  # the host ops running while the GPU waited, outermost first
            stop = launch["ts"]
            i = bisect.bisect_left(host_starts, start - 5e5)  # from 0.5 s before: outer ops begun earlier
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
