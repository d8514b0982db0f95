"""Measure peak GPU memory of real training steps and compare with :func:`estimate_memory`.

    python benchmarks/check_memory.py qwen3_1p8b:2:2048 scale_218m:8:2048 ...

Each step is what ``Trainer(bf16=True)`` does: fp32 model, autocast bf16 forward + loss, backward,
AdamW (foreach) step, ``zero_grad(set_to_none=True)``. Prints one JSON line per case.
"""

from __future__ import annotations

import json
import sys

import torch

from hfpretrain.models.memory import GIB, TrainingLayout, estimate_memory
from hfpretrain.models.zoo import build_model, load_config


def measure(name: str, micro_batch: int, seq_len: int, attn: str = "sdpa", ckpt: bool = False, steps: int = 3) -> dict:
    cfg = load_config(name, vocab_size=151669 if name.startswith(("scale_", "tiny")) else None)
    model = build_model(cfg, attn_implementation=attn).cuda().train()
    if ckpt:
        model.gradient_checkpointing_enable()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (micro_batch, seq_len), device="cuda")
    torch.cuda.reset_peak_memory_stats()
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    est = estimate_memory(cfg, TrainingLayout(micro_batch, seq_len, attn_implementation=attn, grad_checkpointing=ckpt))
    del model, opt
    torch.cuda.empty_cache()
    return {
        "shape": name,
        "micro_batch": micro_batch,
        "seq_len": seq_len,
        "attn": attn,
        "grad_ckpt": ckpt,
        "measured_gib": round(peak / GIB, 2),
        "estimated_gib": round(est.total / GIB, 2),
        "error": round(est.total / peak - 1, 3),
        "device": torch.cuda.get_device_name(),
    }


def main(argv=None) -> int:
    for spec in argv or sys.argv[1:]:
        parts = spec.split(":")
        name, mb, s = parts[0], int(parts[1]), int(parts[2])
        attn = parts[3] if len(parts) > 3 else "sdpa"
        ckpt = len(parts) > 4 and parts[4] == "ckpt"
        try:
            print(json.dumps(measure(name, mb, s, attn, ckpt)), flush=True)
        except torch.OutOfMemoryError:
            print(json.dumps({"shape": name, "micro_batch": mb, "seq_len": s, "attn": attn, "oom": True}), flush=True)
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
