"""A few optimizer steps of the tiny Qwen3 on the mini corpus, on one process or, under ``torchrun`` (gloo), sharded
by tensor parallelism through ``hfpretrain.models.parallel.load_tensor_parallel`` (transformers' tp_plan): what
``tests/training/test_parallel.py`` compares. Every rank of a tensor-parallel group reads the same batch.

    python tests/training/tp_steps.py DATA OUT [STEPS]
    torchrun --nproc_per_node 2 tests/training/tp_steps.py DATA OUT [STEPS]
    torchrun --nproc_per_node 4 tests/training/tp_steps.py DATA OUT STEPS 2   # tp 2 inside a (2, 2) mesh: FSDP2
    torchrun --nproc_per_node 2 tests/training/tp_steps.py DATA OUT STEPS 2 sp   # sequence parallelism

With ``sp`` the loss is the trainer's (training/loss.py ``sequence_parallel_loss``: the head and loss over each
rank's positions, from the base model's split output) and the layers are checkpointed (reentrant: their first
forward runs without gradients); else the loss is the model's own (transformers' gathered logits).

Each step accumulates the gradients of two micro-batches of 2 rows. Writes OUT/losses.json (step -> loss, rank 0),
OUT/norm_grads.json (every norm weight's gradient after step 1's two micro-batches, whole), OUT/final (save_pretrained:
gathered whole under tp) and, under tp, OUT/all_reduces.json: the all-reduces of activation-sized tensors
(micro-batch × seq × hidden) in the first micro-batch, and rank 0's tensor-parallel group as ``tp_group_name``
finds it."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import torch


def main() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hfpretrain.data.order import load_input_ids
    from hfpretrain.models import load_config
    from hfpretrain.models.parallel import load_tensor_parallel, tp_group_name
    from hfpretrain.training.loss import CausalLMLoss, HiddenStateTap, LossSpec, sequence_parallel_loss, shift_labels

    data, out = Path(sys.argv[1]), Path(sys.argv[2])
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    tp = int(sys.argv[4]) if len(sys.argv) > 4 else world  # under torchrun: every rank unless given
    sequence_parallel = sys.argv[5:] == ["sp"]
    config = load_config("tiny", vocab_size=len(AutoTokenizer.from_pretrained(data / "tokenizer")))
    init = out / "init"
    if world > 1:
        torch.distributed.init_process_group("gloo")
    if rank == 0:  # the same random initial weights for every run (seeded), in a folder both layouts load
        torch.manual_seed(1234)
        AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").save_pretrained(init)
    if world > 1:
        torch.distributed.barrier()
        model = load_tensor_parallel(
            str(init),
            config,
            tp=tp,
            world=world,
            device="cpu",
            sequence_parallel=sequence_parallel,
            attn_implementation="sdpa",
            dtype=torch.float32,
        )
    else:
        model = AutoModelForCausalLM.from_pretrained(init, attn_implementation="sdpa", dtype=torch.float32)
    blocks = torch.as_tensor(load_input_ids(data, "train")[: 4 * steps]["input_ids"].astype("int64"))
    model.train()  # from_pretrained leaves it in eval mode, where sequence parallelism's rules stand aside
    tap = HiddenStateTap(model.lm_head) if sequence_parallel else None
    if sequence_parallel:  # a reentrant checkpoint runs the training forward without gradients: the split holds
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    losses = {}
    for step in range(steps):
        ids = blocks[4 * step : 4 * step + 4]
        loss = 0.0
        for micro, rows in enumerate((ids[:2], ids[2:])):  # two micro-batches a step: gradients accumulated
            counted = step == 0 and micro == 0 and world > 1 and rank == 0
            profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True)
            with profiler if counted else contextlib.nullcontext() as prof:
                if sequence_parallel:  # as the trainer: the head's input tapped (FSDP2's root is the whole model)
                    tap.active = True
                    model(input_ids=rows)
                    tap.active, hidden = False, tap.hidden  # this rank's positions
                    count = (shift_labels(rows) != -100).sum()
                    loss_fn = CausalLMLoss(LossSpec("chunked"))
                    part = sequence_parallel_loss(loss_fn, hidden, model.lm_head.weight, rows, count) / 2
                else:
                    part = model(input_ids=rows, labels=rows).loss / 2
                part.backward()
            if counted:
                activation = [*rows.shape, config.hidden_size]
                count = sum(e.name == "gloo:all_reduce" and e.input_shapes == [activation] for e in prof.events())
                names = sorted({e.name for e in prof.events() if e.name.startswith("gloo:")})
                # the group async tp would enable symmetric memory for (models.parallel.enable_async_tp)
                group = torch.distributed.distributed_c10d._resolve_process_group(tp_group_name(model))
                ranks = torch.distributed.get_process_group_ranks(group)
                (out / "all_reduces.json").write_text(
                    json.dumps({"activation_all_reduces": count, "gloo": names, "tp_group_ranks": ranks})
                )
            loss += part.item()
        if step == 0:  # the norms' accumulated gradients, whole (full_tensor: a collective, on every rank)
            grads = {
                name: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).tolist()
                for name, p in model.named_parameters()
                if name.endswith("norm.weight")
            }
            if rank == 0:
                (out / "norm_grads.json").write_text(json.dumps(grads))
        optimizer.step()
        optimizer.zero_grad()
        losses[step + 1] = loss
    model.save_pretrained(out / "final")  # rank 0 writes the gathered weights
    if rank == 0:
        (out / "losses.json").write_text(json.dumps(losses))
    if world > 1:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
