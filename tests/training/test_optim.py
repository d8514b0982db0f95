"""optimizer.name=muon: Muon for the hidden matrices, AdamW for the rest, as one optimizer.

Its steps equal torch.optim.Muon + torch.optim.AdamW built separately (also under an LR schedule),
its state_dict round trip is exact, a real tiny run trains, saves a loadable final/ and resumes
exactly, and the recipe rejects unknown choices naming the key."""

from __future__ import annotations

import copy
import io
import logging
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.optim.lr_scheduler import LambdaLR

from hfpretrain.training import RecipeError, load_recipe
from hfpretrain.training.config import OptimizerSection
from hfpretrain.training.optim import MuonWithAdamW, build_muon_adamw, hidden_matrices
from hfpretrain.training.trainer import PretrainTrainer
from train_utils import load_weights, run_pretrain, step_losses

ARGS = SimpleNamespace(
    learning_rate=3e-3, weight_decay=0.1, adam_beta1=0.9, adam_beta2=0.95, adam_epsilon=1e-8, optim="adamw_torch"
)


def _model(**config):
    """The tiny Qwen3 shape, untied by default (the head must stay with AdamW even then)."""
    from hfpretrain.models import build_model, load_config

    torch.manual_seed(0)
    cfg = load_config("tiny", {"tie_word_embeddings": False, **config}, vocab_size=512)
    return build_model(cfg, attn_implementation="eager")


def _decay_names(model) -> list[str]:
    return PretrainTrainer.get_decay_parameter_names(SimpleNamespace(decay_embeddings=False), model)


def _reference(model, section: OptimizerSection):
    """torch.optim.Muon on the hidden matrices + torch.optim.AdamW on the rest, built separately."""
    hidden, decay = hidden_matrices(model), set(_decay_names(model))
    named = list(model.named_parameters())
    muon = torch.optim.Muon(
        [p for _, p in named if id(p) in hidden],
        lr=section.muon_learning_rate or ARGS.learning_rate,
        weight_decay=ARGS.weight_decay,
        momentum=section.muon_momentum,
        nesterov=section.muon_nesterov,
        ns_steps=section.muon_ns_steps,
        adjust_lr_fn=section.muon_lr_scale,
    )
    adamw = torch.optim.AdamW(
        [
            {"params": [p for n, p in named if id(p) not in hidden and n in decay], "weight_decay": ARGS.weight_decay},
            {"params": [p for n, p in named if id(p) not in hidden and n not in decay], "weight_decay": 0.0},
        ],
        lr=ARGS.learning_rate,
        betas=(ARGS.adam_beta1, ARGS.adam_beta2),
        eps=ARGS.adam_epsilon,
    )
    return muon, adamw


def _set_grads(models, step: int) -> None:
    gen = torch.Generator().manual_seed(100 + step)
    for params in zip(*(m.parameters() for m in models)):
        grad = torch.randn(params[0].shape, generator=gen)
        for p in params:
            p.grad = grad.clone()


def _assert_same(a, b, atol=1e-6) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p, q, atol=atol, rtol=0, msg=name)


def test_the_split():
    """Muon: the 7 matrices of each decoder layer; AdamW: embeddings, the untied head, norms."""
    model = _model()
    hidden = hidden_matrices(model)
    names = {n for n, p in model.named_parameters() if id(p) in hidden}
    assert len(names) == 2 * 7
    assert all(".layers." in n and n.endswith("proj.weight") for n in names)
    assert id(model.get_output_embeddings().weight) not in hidden
    assert id(model.get_input_embeddings().weight) not in hidden
    assert all(p.ndim == 2 for p in model.parameters() if id(p) in hidden)
    # GPT-2: Conv1D matrices in the blocks; wte, wpe (embeddings), biases and norms stay with AdamW
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16))
    names = {n for n, p in gpt2.named_parameters() if id(p) in hidden_matrices(gpt2)}
    assert names == {
        f"transformer.h.{i}.{m}.weight"
        for i in range(2)
        for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
    }


@pytest.mark.parametrize("scale,muon_lr", [("match_rms_adamw", None), ("original", 0.02)])
def test_steps_equal_muon_plus_adamw(scale, muon_lr):
    """One step, then a LambdaLR schedule over 3 more: the same parameters as the two torch
    optimizers built separately, each with its own scheduler of the same factor."""
    section = OptimizerSection(name="muon", muon_lr_scale=scale, muon_learning_rate=muon_lr)
    ours_model = _model()
    ref_model = copy.deepcopy(ours_model)
    ours = build_muon_adamw(ours_model, ARGS, _decay_names(ours_model), section)
    refs = _reference(ref_model, section)
    assert {g["use_muon"] for g in ours.param_groups} == {True, False}

    _set_grads([ours_model, ref_model], 0)
    ours.step()
    for opt in refs:
        opt.step()
    _assert_same(ours_model, ref_model)

    factor = lambda step: (step + 1) / 3  # noqa: E731
    schedules = [LambdaLR(ours, factor)] + [LambdaLR(opt, factor) for opt in refs]
    for step in range(1, 4):
        _set_grads([ours_model, ref_model], step)
        for opt in (ours, *refs):
            opt.step()
        for sched in schedules:
            sched.step()
        _assert_same(ours_model, ref_model)
    assert [g["lr"] for g in ours.param_groups if g["use_muon"]][0] == pytest.approx((muon_lr or 3e-3) * 4 / 3)
    assert ours.param_groups[0]["lr"] == pytest.approx(3e-3 * 4 / 3)  # the logged LR: training.learning_rate's


def test_state_dict_round_trip_is_exact():
    """2 steps, save (through torch.save / weights_only load, as a checkpoint), a fresh optimizer
    and scheduler load it, then one more step on both: identical parameters."""
    section = OptimizerSection(name="muon")
    model = _model()
    opt = build_muon_adamw(model, ARGS, _decay_names(model), section)
    sched = LambdaLR(opt, lambda step: 0.5**step)
    for step in range(2):
        _set_grads([model], step)
        opt.step()
        sched.step()
    buf = io.BytesIO()
    torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}, buf)
    buf.seek(0)
    saved = torch.load(buf, weights_only=True)
    kinds = [set(s) for s in saved["optimizer"]["state"].values()]
    assert sum("momentum_buffer" in k for k in kinds) == 2 * 7 and sum("exp_avg" in k for k in kinds) > 0

    twin = copy.deepcopy(model)
    fresh = build_muon_adamw(twin, ARGS, _decay_names(twin), section)
    fresh_sched = LambdaLR(fresh, lambda step: 0.5**step)
    fresh.load_state_dict(saved["optimizer"])
    fresh_sched.load_state_dict(saved["scheduler"])
    assert fresh._muon.state is fresh.state and fresh._muon.param_groups[0] is fresh.param_groups[2]
    _set_grads([model, twin], 2)
    opt.step()
    fresh.step()
    _assert_same(model, twin, atol=0)


def test_empty_groups_are_dropped_and_groups_are_needed():
    w = torch.nn.Parameter(torch.randn(4, 3))
    opt = MuonWithAdamW([{"params": [w], "use_muon": True}, {"params": [], "use_muon": False}])
    assert len(opt.param_groups) == 1 and opt._adamw is None
    with pytest.raises(ValueError, match="use_muon"):
        MuonWithAdamW([{"params": [w]}])


# ---- a real run --------------------------------------------------------------------------------

MUON_RUN = {
    "optimizer.name": "muon",
    "training.max_steps": "4",
    "training.save_strategy": "steps",
    "training.save_steps": "2",
    "nan_policy": "skip",
}  # skip: its step wrapper around our optimizer


def test_tiny_run_trains_saves_and_resumes_exactly(mini_blocks, tmp_path, caplog):
    from transformers import AutoModelForCausalLM

    full = tmp_path / "full"
    with caplog.at_level(logging.INFO, logger="hfpretrain"):
        summary = run_pretrain(mini_blocks, full, MUON_RUN)
    assert summary["global_step"] == 4 and summary["skipped_steps"] == 0
    assert any("Muon" in r.getMessage() and "14 hidden matrices" in r.getMessage() for r in caplog.records)
    losses = step_losses(full)
    assert sorted(losses) == [1, 2, 3, 4] and all(np.isfinite(list(losses.values())))
    assert losses[4] < losses[1]
    state = torch.load(full / "checkpoint-2" / "optimizer.pt", weights_only=True)["state"].values()
    assert sum("momentum_buffer" in s for s in state) == 14  # Muon's state went into the checkpoint
    model = AutoModelForCausalLM.from_pretrained(full / "final")
    assert sum(p.numel() for p in model.parameters()) > 0

    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(full / "checkpoint-2", resumed / "checkpoint-2")
    summary = run_pretrain(mini_blocks, resumed, {**MUON_RUN, "training.resume_from_checkpoint": "auto"})
    assert summary["global_step"] == 4
    again = step_losses(resumed)
    assert sorted(again) == [3, 4] and [again[s] for s in (3, 4)] == [losses[s] for s in (3, 4)]  # bitwise
    a, b = load_weights(full / "final"), load_weights(resumed / "final")
    for name in a:
        assert torch.equal(a[name], b[name]), name


# ---- the recipe ----------------------------------------------------------------------------------


def test_recipe_section():
    assert load_recipe(None, ["data.path=x"]).optimizer.name == "adamw_torch_fused"  # TrainingArguments' default
    recipe = load_recipe(None, ["data.path=x", "optimizer.name=muon", "optimizer.muon_learning_rate=0.02"])
    assert recipe.optimizer.name == "muon" and recipe.optimizer.muon_learning_rate == 0.02
    for item, key in [
        ("optimizer.name=bogus", "optimizer.name"),
        ("optimizer.muon_lr_scale=x", "optimizer.muon_lr_scale"),
    ]:
        with pytest.raises(RecipeError, match="is not one of") as info:
            load_recipe(None, ["data.path=x", item])
        assert key in str(info.value)
    with pytest.raises(RecipeError, match="muon_momentum"):
        load_recipe(None, ["data.path=x", "optimizer.muon_momentum=fast"])


def test_adamw_by_mesh_steps_a_half_sharded_model_as_one_adamw():
    """Under tensor parallelism the sharded projections are DTensors and the norms plain tensors, which one fused or
    foreach AdamW call cannot span (transformers 5.17 then steps every parameter alone): ``build_adamw_by_mesh`` gives
    each mesh its own group, per weight decay, and its steps equal one AdamW over the same model undistributed."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    from hfpretrain.training.optim import build_adamw_by_mesh, param_meshes

    started = not torch.distributed.is_initialized()
    if started:  # a one-process group, enough for DTensors on a one-rank mesh
        torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0, world_size=1)
    try:

        class Net(torch.nn.Sequential):
            def forward(self, x):  # a sharded weight is used whole (a one-rank mesh: its gradient is the DTensor's)
                for layer in self:
                    if isinstance(layer, torch.nn.Linear) and isinstance(layer.weight, DTensor):
                        x = torch.nn.functional.linear(x, layer.weight.full_tensor(), layer.bias)
                    else:
                        x = layer(x)
                return x

        torch.manual_seed(0)
        plain = Net(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
        sharded = copy.deepcopy(plain)
        mesh = init_device_mesh("cpu", (1,))
        for linear in (sharded[0], sharded[2]):
            linear.weight = torch.nn.Parameter(distribute_tensor(linear.weight.detach(), mesh, [Shard(0)]))
        assert len(param_meshes(sharded)) == 2
        decay = ["0.weight", "2.weight"]
        ours = build_adamw_by_mesh(sharded, ARGS, decay)
        groups = [(g["weight_decay"], {isinstance(p, DTensor) for p in g["params"]}) for g in ours.param_groups]
        assert groups == [(0.1, {True}), (0.0, {False})], groups  # the two matrices; biases and norm
        reference = torch.optim.AdamW(
            [
                {"params": [p for n, p in plain.named_parameters() if n in decay], "weight_decay": 0.1},
                {"params": [p for n, p in plain.named_parameters() if n not in decay], "weight_decay": 0.0},
            ],
            lr=ARGS.learning_rate,
            betas=(ARGS.adam_beta1, ARGS.adam_beta2),
            eps=ARGS.adam_epsilon,
        )
        x = torch.randn(32, 8)
        for _ in range(3):
            for model, optimizer in ((plain, reference), (sharded, ours)):
                model(x).square().mean().backward()
                optimizer.step()
                optimizer.zero_grad()
        for (name, a), b in zip(plain.named_parameters(), sharded.parameters()):
            b = b.full_tensor() if isinstance(b, DTensor) else b
            torch.testing.assert_close(a, b, msg=name)
    finally:
        if started:
            torch.distributed.destroy_process_group()
