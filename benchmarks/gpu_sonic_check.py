"""sonic-moe's experts kernels against our grouped_mm_gather_autocast, one Qwen3-MoE experts layer, on a GPU.

Run on the GPU machine after ``.carry_sonic/install.sh`` (benchmarks/sonic_kit.sh says how the kit is made):

    PYTHONPATH=/tmp/site:src python3 benchmarks/gpu_sonic_check.py [--tokens 16384] [--out $OUT/sonic_check.json]

Builds transformers' Qwen3MoeExperts (hidden 1024, 32 experts of 704, top-4 by default) with fp32 master weights,
routes ``--tokens`` tokens (softmax, top-k, renormalized, as Qwen3-MoE does), and runs forward + backward under bf16
autocast with each backend: ``grouped`` (models/speedups.py's grouped_mm_gather_autocast) and ``sonic``
(models/sonic.py's sonicmoe_autocast). Reports, against an fp32 reference (transformers' loop over the experts in
fp32, TF32 off), each backend's relative error (‖a−ref‖/‖ref‖) and max abs error of the output and of every gradient
(hidden states, gate_up_proj, down_proj, routing weights), sonic against grouped directly, the median forward and
forward+backward times (CUDA events), peak memory, sonic's first call (its CuTe kernels are compiled and autotuned
then), transformers' own ``sonicmoe`` backend on the same kernels, and torch.compile of router + experts with the
opaque and the traced function. One JSON line on stdout at the end (also written to ``--out`` after every stage, so
a run cut short leaves what it had). A failed import or a failed stage is one line naming it; an import failure
exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback

RESULT: dict = {"ok": False}
ARGS = None


def _save() -> None:
    if ARGS is not None and ARGS.out:
        os.makedirs(os.path.dirname(os.path.abspath(ARGS.out)), exist_ok=True)
        with open(ARGS.out, "w") as f:
            json.dump(RESULT, f, indent=1)


def log(msg: str) -> None:
    print(f"[sonic_check {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def fail_line(stage: str, error: BaseException) -> str:
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{stage}: {type(error).__name__}: {first}"[:400]


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--experts", type=int, default=32)
    p.add_argument("--intermediate", type=int, default=704)
    p.add_argument("--top-k", type=int, default=4)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile stage")
    p.add_argument("--no-reference", action="store_true", help="skip the fp32 loop reference")
    p.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "sonic_check.json"))
    return p.parse_args()


def main() -> int:
    global ARGS
    ARGS = args = parse()
    RESULT["shape"] = dict(
        tokens=args.tokens, hidden=args.hidden, experts=args.experts, intermediate=args.intermediate, top_k=args.top_k
    )
    # ---- imports: one line naming what is missing ----
    try:
        import torch
        import transformers

        RESULT["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA GPU")
        from transformers import Qwen3MoeConfig
        from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts

        from hfpretrain.models import sonic, speedups
    except Exception as error:
        RESULT["error"] = fail_line("import (torch/transformers/hfpretrain)", error)
        print(json.dumps(RESULT))
        _save()
        return 2
    try:
        t0 = time.perf_counter()
        sonic.load_sonicmoe()
        RESULT["import_s"] = round(time.perf_counter() - t0, 2)
        import importlib.metadata as md

        for dist in ("nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-cu13", "apache-tvm-ffi"):
            try:
                RESULT["versions"][dist] = md.version(dist)
            except md.PackageNotFoundError:
                RESULT["versions"][dist] = None
        RESULT["versions"]["sonic_moe"] = getattr(sys.modules.get("sonic_moe"), "__version__", "?")
    except Exception as error:
        RESULT["error"] = fail_line("import sonic-moe", error)
        print(f"SONIC IMPORT FAILED: {RESULT['error']}", file=sys.stderr)
        print(json.dumps(RESULT))
        _save()
        return 2
    log(f"imported sonic-moe in {RESULT['import_s']} s: {RESULT['versions']}")
    _save()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    config = Qwen3MoeConfig(
        hidden_size=args.hidden,
        moe_intermediate_size=args.intermediate,
        num_experts=args.experts,
        num_experts_per_tok=args.top_k,
        hidden_act="silu",
        norm_topk_prob=True,
    )
    torch.manual_seed(0)
    experts = Qwen3MoeExperts(config).to(dev)
    with torch.no_grad():
        experts.gate_up_proj.normal_(0, 0.02)
        experts.down_proj.normal_(0, 0.02)
    assert experts.has_gate and experts.is_concatenated and not experts.is_transposed and not experts.has_bias
    T, H, E, K = args.tokens, args.hidden, args.experts, args.top_k
    g = torch.Generator(device=dev).manual_seed(1)
    x0 = torch.randn(T, H, device=dev, generator=g)
    logits = torch.randn(T, E, device=dev, generator=g)
    probs = logits.softmax(-1)
    top_w0, top_i = probs.topk(K, dim=-1)
    top_w0 = top_w0 / top_w0.sum(-1, keepdim=True)
    grad_out = torch.randn(T, H, device=dev, generator=g)
    load = torch.bincount(top_i.reshape(-1), minlength=E)
    RESULT["load_min_max"] = [int(load.min()), int(load.max())]

    grouped = lambda h, i, w: speedups.grouped_experts_forward(experts, h, i, w, gather=True, autocast=True)  # noqa: E731
    sonic_fn = lambda h, i, w: sonic.sonic_experts_forward(experts, h, i, w)  # noqa: E731

    def run(fn, autocast=True, backward=True):
        x = x0.clone().requires_grad_(backward)
        w = top_w0.clone().requires_grad_(backward)
        experts.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            out = fn(x, top_i, w)
        if not backward:
            return out
        out.backward(grad_out)
        return {
            "out": out.detach().float(),
            "d_hidden": x.grad.float(),
            "d_gate_up_proj": experts.gate_up_proj.grad.float().clone(),
            "d_down_proj": experts.down_proj.grad.float().clone(),
            "d_routing_weights": w.grad.float(),
            "_dtypes": [str(out.dtype), str(x.grad.dtype), str(experts.gate_up_proj.grad.dtype), str(w.grad.dtype)],
        }

    def errors(a, b):
        res = {}
        for key in b:
            if key.startswith("_"):
                continue
            diff = (a[key] - b[key]).float()
            res[key] = {
                "rel": float(diff.norm() / b[key].float().norm().clamp_min(1e-30)),
                "max_abs": float(diff.abs().max()),
                "ref_max_abs": float(b[key].abs().max()),
            }
        return res

    # ---- correctness ----
    stage = "correctness"
    try:
        ref = None
        if not args.no_reference:
            loop = type(experts).forward.__wrapped__  # transformers' loop over the experts, under the dispatcher
            ref = run(lambda h, i, w: loop(experts, h, i, w), autocast=False)
            log("fp32 reference done")
        res_grouped = run(grouped)
        log("grouped done")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        res_sonic = run(sonic_fn)
        torch.cuda.synchronize()
        RESULT["sonic_first_call_s"] = round(time.perf_counter() - t0, 1)
        log(f"sonic first call (compile + autotune) {RESULT['sonic_first_call_s']} s")
        RESULT["dtypes"] = {"grouped": res_grouped["_dtypes"], "sonic": res_sonic["_dtypes"]}
        RESULT["sonic_vs_grouped"] = errors(res_sonic, res_grouped)
        if ref is not None:
            RESULT["grouped_vs_fp32"] = errors(res_grouped, ref)
            RESULT["sonic_vs_fp32"] = errors(res_sonic, ref)
            # the criterion: sonic no further from fp32 than our bf16 backend is (x2 slack for rounding order)
            RESULT["sonic_within_2x_of_grouped_error"] = all(
                RESULT["sonic_vs_fp32"][k]["rel"] <= 2 * RESULT["grouped_vs_fp32"][k]["rel"] + 1e-4
                for k in RESULT["sonic_vs_fp32"]
            )
        again = run(sonic_fn)
        RESULT["sonic_deterministic_out"] = bool(torch.equal(again["out"], res_sonic["out"]))
        del again
    except Exception as error:
        RESULT.setdefault("stage_errors", {})[stage] = fail_line(stage, error)
        log(traceback.format_exc())
    _save()

    # ---- transformers' own sonicmoe backend, handed the same module (weights must be bf16 there) ----
    stage = "transformers_sonicmoe"
    try:
        from transformers.integrations.sonicmoe import sonicmoe_experts_forward

        view = speedups.ExpertsInDtype(experts, torch.bfloat16)
        out_hf = sonicmoe_experts_forward(view, x0.bfloat16(), top_i, top_w0)
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            out_ours = sonic_fn(x0, top_i, top_w0)
        RESULT["transformers_sonicmoe_vs_ours_rel"] = float(
            (out_hf.float() - out_ours.float()).norm() / out_ours.float().norm()
        )
    except Exception as error:
        RESULT.setdefault("stage_errors", {})[stage] = fail_line(stage, error)
    _save()

    # ---- timing ----
    def timed(fn, backward):
        times = []
        for i in range(args.warmup + args.iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            if backward:
                run(fn)
            else:
                with torch.no_grad():
                    run(fn, backward=False)
            end.record()
            end.synchronize()
            if i >= args.warmup:
                times.append(start.elapsed_time(end))
        return round(statistics.median(times), 3)

    stage = "timing"
    try:
        timing = {}
        for name, fn in (
            ("grouped", grouped),
            ("sonic", sonic_fn),
            ("grouped_again", grouped),
            ("sonic_again", sonic_fn),
        ):
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            timing[name] = {
                "fwd_ms": timed(fn, backward=False),
                "fwd_bwd_ms": timed(fn, backward=True),
                "peak_extra_gib": round((torch.cuda.max_memory_allocated() - base) / 2**30, 3),
            }
            log(f"{name}: {timing[name]}")
        RESULT["timing"] = timing
        g_ms = min(timing["grouped"]["fwd_bwd_ms"], timing["grouped_again"]["fwd_bwd_ms"])
        s_ms = min(timing["sonic"]["fwd_bwd_ms"], timing["sonic_again"]["fwd_bwd_ms"])
        RESULT["fwd_bwd_speedup_sonic_over_grouped"] = round(g_ms / s_ms, 3)
        flops = 6 * T * K * 3 * H * args.intermediate  # fwd+bwd of the three expert matmuls
        RESULT["sonic_tflops"] = round(flops / (s_ms * 1e-3) / 1e12, 1)
        RESULT["grouped_tflops"] = round(flops / (g_ms * 1e-3) / 1e12, 1)
    except Exception as error:
        RESULT.setdefault("stage_errors", {})[stage] = fail_line(stage, error)
        log(traceback.format_exc())
    _save()

    # ---- torch.compile: router + experts as one compiled function, both registered variants ----
    if not args.no_compile:
        import torch._dynamo

        router_w = (torch.randn(E, H, device=dev, generator=g) * 0.02).requires_grad_()

        def layer(fn):
            def f(x):
                probs = torch.nn.functional.linear(x, router_w).float().softmax(-1)
                w, i = probs.topk(K, dim=-1)
                return fn(experts, x, i, w / w.sum(-1, keepdim=True))

            return f

        eager_out = None
        for name, traced in (("opaque", False), ("traced", True)):
            stage = f"compile_{name}"
            try:
                fn = lambda self, h, i, w, traced=traced: sonic.sonic_experts_forward(self, h, i, w, traced=traced)  # noqa: E731
                if eager_out is None:
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        eager_out = layer(fn)(x0).detach().float()
                torch._dynamo.reset()
                torch._dynamo.utils.counters.clear()
                compiled = torch.compile(layer(fn))
                t0 = time.perf_counter()
                x = x0.clone().requires_grad_()
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    out = compiled(x)
                out.backward(grad_out)
                torch.cuda.synchronize()
                breaks = dict(torch._dynamo.utils.counters["graph_break"])
                RESULT[stage] = {
                    "first_s": round(time.perf_counter() - t0, 1),
                    "rel_vs_eager": float((out.detach().float() - eager_out).norm() / eager_out.norm()),
                    "graph_breaks": {k[:120]: v for k, v in breaks.items()},
                    "d_hidden_finite": bool(torch.isfinite(x.grad).all()),
                }

                def step(compiled=compiled):
                    x = x0.clone().requires_grad_()
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        compiled(x).backward(grad_out)

                for _ in range(3):
                    step()
                times = []
                for _ in range(10):
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record()
                    step()
                    e.record()
                    e.synchronize()
                    times.append(s.elapsed_time(e))
                RESULT[stage]["fwd_bwd_ms"] = round(statistics.median(times), 3)
                log(f"{stage}: {RESULT[stage]}")
            except Exception as error:
                RESULT.setdefault("stage_errors", {})[stage] = fail_line(stage, error)
                log(traceback.format_exc())
            _save()

    RESULT["ok"] = "sonic_vs_grouped" in RESULT and "timing" in RESULT
    print(json.dumps(RESULT))
    _save()
    return 0 if RESULT["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
