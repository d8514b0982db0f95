"""GPU check: the project's losses (liger fused, chunked) against HF's own loss, under bf16 autocast.

    python benchmarks/loss_parity.py out/mix_qwen3_2048 [model] [micro_batch]
Prints loss values, relative gradient differences and whether everything is finite.
"""

import sys

import torch

from hfpretrain.models import build_model, load_config
from hfpretrain.data.order import collate_blocks, load_input_ids
from hfpretrain.training.loss import LossSpec, causal_lm_loss

data, name, mb = (
    sys.argv[1],
    (sys.argv[2] if len(sys.argv) > 2 else "scale_53m"),
    int(sys.argv[3] if len(sys.argv) > 3 else 4),
)
blocks = load_input_ids(data, "train")
batch = collate_blocks([blocks[i]["input_ids"] for i in range(mb)])
ids = batch["input_ids"].cuda()
config = load_config(name, vocab_size=151669)
torch.manual_seed(0)
model = build_model(config, attn_implementation="sdpa").cuda()
head = model.get_output_embeddings()
captured = {}
head.register_forward_pre_hook(lambda m, a: captured.__setitem__("h", a[0]))


def run(kind):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(input_ids=ids, labels=ids if kind == "hf" else None)
        loss = (
            out.loss
            if kind == "hf"
            else causal_lm_loss(
                captured["h"],
                head.weight,
                ids,
                None,
                # liger's own chunk sizing, as this benchmark measured before LossSpec (whose
                # default, loss.liger_min_chunk_tokens's, is 1024)
                LossSpec(kind, liger_min_chunk_tokens=0),
            )
        )
    loss.backward()
    grads = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
    return loss.item(), grads


ref_loss, ref_grad = run("hf")
print(f"hf      loss {ref_loss:.6f} grad finite {bool(torch.isfinite(ref_grad).all())}")
for kind in ("chunked", "liger"):
    try:
        loss, grad = run(kind)
    except Exception as err:  # report and go on: this is a diagnostic
        print(f"{kind:8s} failed: {type(err).__name__}: {err}")
        continue
    rel = ((grad - ref_grad).norm() / ref_grad.norm()).item()
    print(
        f"{kind:8s} loss {loss:.6f} (diff {loss - ref_loss:+.2e}) grad rel diff {rel:.2e} "
        f"finite {bool(torch.isfinite(grad).all())}"
    )
