"""MoE shapes through the recipe path on a CPU: a tiny Qwen3-MoE trains (transformers' auxiliary loss added in
training only), saves a checkpoint that loads with from_pretrained, and model.experts_implementation is resolved
with its reason and refused on a dense model."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from hfpretrain.training import RecipeError

from train_utils import REPO, read_log, run_pretrain

TINY_MOE = {
    "model.config": "qwen3_moe_109m_a21m",
    "model.overrides.num_hidden_layers": "2",
    "model.overrides.hidden_size": "64",
    "model.overrides.num_attention_heads": "2",
    "model.overrides.num_key_value_heads": "2",
    "model.overrides.head_dim": "32",
    "model.overrides.moe_intermediate_size": "32",
    "model.overrides.num_experts": "4",
    "model.overrides.num_experts_per_tok": "2",
    "training.max_steps": "3",
    "training.save_steps": "3",
    "training.logging_steps": "1",
}


def test_a_tiny_moe_trains_and_reloads(mini_blocks, tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "moe"
    summary = run_pretrain(mini_blocks, out, TINY_MOE)
    assert summary["global_step"] == 3 and summary["plan"]["fast_path"]["experts_implementation"] == "eager"
    params = summary["plan"]["parameters"]
    assert params["active"] < params["total"]  # 2 of 4 experts per token
    losses = [e["loss"] for e in read_log(out) if e.get("event") == "log" and "loss" in e]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    model = AutoModelForCausalLM.from_pretrained(out / "final")
    assert model.config.model_type == "qwen3_moe" and model.config.num_experts == 4


def test_the_aux_loss_is_added_to_the_training_loss(mini_blocks, tmp_path):
    """The trainer computes its own loss from the hidden states, so transformers' load-balancing loss must be added
    by it: a large router_aux_loss_coef raises the first step's training loss (same seed, same weights)."""
    base = {**TINY_MOE, "training.max_steps": "1", "training.save_strategy": "no"}
    first = {}
    for coef in ("0.0", "10.0"):
        run_pretrain(mini_blocks, tmp_path / coef, {**base, "model.overrides.router_aux_loss_coef": coef})
        first[coef] = next(e["loss"] for e in read_log(tmp_path / coef) if e.get("event") == "log" and "loss" in e)
    assert first["10.0"] > first["0.0"] + 1.0  # aux >= 1 at any routing: coefficient 10 adds >= 10 x 1


def test_the_aux_loss_weight_does_not_depend_on_the_micro_batch_split(mini_blocks, tmp_path):
    """The same 4 samples per step as 4 x 1 and 2 x 2 (batch.micro_batch=auto changes the split with the GPU): the
    same logged losses and weights. transformers adds the aux loss whole to every micro-batch, which weighted it
    twice here, and world-size times more on several GPUs."""
    base = {**TINY_MOE, "training.max_steps": "2", "training.save_steps": "2", "moe.aux_loss_coef": "5.0"}
    runs = {
        "4x1": {},
        "2x2": {"training.per_device_train_batch_size": "2", "training.gradient_accumulation_steps": "2"},
    }
    for name, split in runs.items():
        run_pretrain(mini_blocks, tmp_path / name, {**base, **split})
    losses = [
        [e["loss"] for e in read_log(tmp_path / name) if e.get("event") == "log" and "loss" in e] for name in runs
    ]
    # the load-balancing loss of two halves is not quite that of the whole (a product of per-expert shares): 0.005
    # to 0.1 apart on the two corpora here, where a doubled weight adds at least 5 (aux >= 1 at any routing, x 5)
    assert losses[0] == pytest.approx(losses[1], abs=0.5)


def test_experts_implementation_checks(mini_blocks, tmp_path):
    with pytest.raises(RecipeError, match="model.experts_implementation=grouped_mm: .* dense model"):
        run_pretrain(mini_blocks, tmp_path / "dense", {"model.experts_implementation": "grouped_mm"})
    with pytest.raises(RecipeError, match="model.experts_implementation='loop' is not one of"):
        run_pretrain(mini_blocks, tmp_path / "bad", {**TINY_MOE, "model.experts_implementation": "loop"})
    # sonic-moe's kernels cannot load on a CPU (nor without the kernels package, nor offline): one line naming what
    # is missing, before anything is written; and before that, a recipe they would stop in (no bf16 autocast)
    sonic = {**TINY_MOE, "model.experts_implementation": "sonicmoe"}
    with pytest.raises(RecipeError, match=r"sonicmoe: its kernels take 16-bit inputs, and training.bf16 is off"):
        run_pretrain(mini_blocks, tmp_path / "sonic", sonic)
    with pytest.raises(RecipeError, match=r"model.experts_implementation=sonicmoe: .*CUDA.*; use grouped_mm"):
        run_pretrain(mini_blocks, tmp_path / "sonic", {**sonic, "training.bf16": "true"})
    assert not any((tmp_path / name).exists() for name in ("dense", "bad", "sonic"))


def test_forced_balance_gives_every_expert_the_same_rows(mini_blocks, tmp_path):
    """moe.forced_balance (the speed of perfect balance, beside dropless routing): the load logged is exactly
    even, every step, and the run still trains and saves."""
    out = tmp_path / "balanced"
    run_pretrain(mini_blocks, out, {**TINY_MOE, "moe.forced_balance": "true"})
    logs = [e for e in read_log(out) if e.get("event") == "log" and "loss" in e]
    assert len(logs) == 3
    assert all(e["expert_load_max_mean"] == 1.0 == e["expert_load_min_mean"] and e["dead_experts"] == 0 for e in logs)


def test_dry_run_prints_the_choice_and_its_reason(mini_blocks, tmp_path):
    from hfpretrain.training import pretrain

    from train_utils import TINY_RECIPE, make_overrides

    plan = pretrain(str(TINY_RECIPE), make_overrides(mini_blocks, tmp_path / "x", TINY_MOE), dry_run=True)["plan"]
    fast = plan["fast_path"]
    assert fast["experts_implementation"] in ("grouped_mm", "eager")
    assert "experts" in fast["reasons"]["experts_implementation"]
    json.dumps(plan, default=str)


TINY_GLM = {
    **TINY_MOE,
    "model.config": "glm4_moe_101m_a24m",
    "model.overrides.n_routed_experts": "4",
    "model.overrides.intermediate_size": "64",
}
del TINY_GLM["model.overrides.num_experts"]


def _bias(folder):
    from safetensors.torch import load_file

    weights = load_file(str(folder / "model.safetensors"))
    return {k: v for k, v in weights.items() if k.endswith("e_score_correction_bias")}


def test_aux_loss_free_balancing_moves_the_bias_logs_the_load_and_resumes_exactly(mini_blocks, tmp_path):
    """moe.bias_update_rate: the correction bias moves by rate x sign(mean - load) each step (saved with the
    weights); every training log carries the experts' load; killed after checkpoint-2 and resumed, steps 3..4
    and the final bias are bitwise those of the uninterrupted run."""
    import shutil

    run = {
        **TINY_GLM,
        "moe.bias_update_rate": "0.01",
        "training.max_steps": "4",
        "training.save_steps": "2",
        "training.save_strategy": "steps",
        "training.save_total_limit": "3",
    }
    ref = tmp_path / "ref"
    run_pretrain(mini_blocks, ref, run)
    (bias,) = _bias(ref / "final").values()
    steps = torch.round(bias.abs() / 0.01)
    assert bias.abs().max() > 0 and torch.allclose(bias.abs(), steps * 0.01, atol=1e-6) and steps.max() <= 4
    logs = [e for e in read_log(ref) if e.get("event") == "log" and "loss" in e]
    assert all(
        0 <= e["dead_experts"] <= 1 and e["expert_load_max_mean"] >= 1 >= e["expert_load_min_mean"] for e in logs
    )
    assert "expert_load_max_mean/0" in logs[0]  # one MoE layer (GLM's first layer is dense)
    _check_the_plot_has_the_load(ref / "log.jsonl", tmp_path)

    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(ref / "checkpoint-2", resumed / "checkpoint-2")
    run_pretrain(mini_blocks, resumed, {**run, "training.resume_from_checkpoint": "auto"})
    losses = {e["step"]: e["loss"] for e in read_log(ref) if e.get("event") == "log" and "loss" in e}
    again = {e["step"]: e["loss"] for e in read_log(resumed) if e.get("event") == "log" and "loss" in e}
    assert sorted(again) == [3, 4] and all(again[s] == losses[s] for s in again)
    assert torch.equal(_bias(resumed / "final")[next(iter(_bias(ref / "final")))], bias)


def _check_the_plot_has_the_load(log, tmp_path):
    """The run's plot gains a row for the experts' load (a dense run's log, the same without those keys, not)."""
    import matplotlib.image

    from hfpretrain.study.plots import plot_run

    dense_log = tmp_path / "dense.jsonl"
    dense_log.write_text(
        "".join(json.dumps({k: v for k, v in e.items() if "expert" not in k}) + "\n" for e in read_log(log.parent))
    )
    moe_png, dense_png = plot_run(log, tmp_path / "moe.png"), plot_run(dense_log, tmp_path / "dense.png")
    moe_height, dense_height = (matplotlib.image.imread(p).shape[0] for p in (moe_png, dense_png))
    assert moe_height == pytest.approx(1.5 * dense_height, rel=0.02)


def test_moe_settings_the_model_cannot_take(mini_blocks, tmp_path):
    cases = [
        ({"moe.bias_update_rate": "0.001"}, "dense model"),
        ({**TINY_MOE, "moe.bias_update_rate": "0.001"}, "no correction bias"),
        ({**TINY_GLM, "moe.aux_loss_coef": "0.01"}, "no auxiliary loss for glm4_moe"),
        ({**TINY_MOE, "moe.bias_update_rate": "-1"}, "must be >= 0"),
        ({"moe.forced_balance": "true"}, "moe.forced_balance: .* dense model"),
        ({"moe.aux_loss_scope": "per_layer"}, "moe.aux_loss_scope: .* dense model"),
        ({**TINY_MOE, "moe.aux_loss_scope": "layer"}, "moe.aux_loss_scope"),
    ]
    for k, (extra, message) in enumerate(cases):
        with pytest.raises(RecipeError, match=message):
            run_pretrain(mini_blocks, tmp_path / str(k), extra)
        assert not (tmp_path / str(k)).exists()


def test_load_figures_and_the_dead_expert_warning(caplog):
    from hfpretrain.training.moe import ExpertBalanceCallback, load_figures

    counts = torch.tensor([[4, 4, 4, 4], [8, 8, 0, 0]])
    figures = load_figures(counts)
    assert figures["expert_load_max_mean"] == 2.0 and figures["expert_load_min_mean"] == 0.0
    assert figures["dead_experts"] == 0.25 and figures["expert_load_max_mean/0"] == 1.0

    class Load:  # the callback reads only take() and counts from ExpertLoad
        counts = torch.zeros(2, 4, dtype=torch.int64)
        biases = [None, None]
        available = True

        def take(self):
            return counts.clone()

    callback = ExpertBalanceCallback(Load(), rate=0.0, dead_windows=2)
    with caplog.at_level("WARNING", logger="hfpretrain"):
        for window in range(3):
            callback.on_step_end(None, None, None)
            logs = {"loss": 1.0}
            callback.on_log(None, None, None, logs=logs)
            assert logs["dead_experts"] == 0.25
            assert ("2 experts got no token" in caplog.text) == (window >= 1)
    assert caplog.text.count("got no token") == 1  # once


def test_a_checkpoint_whose_weights_do_not_fit_is_refused_not_resumed_with_fresh_ones(mini_blocks, tmp_path):
    """transformers writes MoE experts one by one (the Hub's layout) unless asked not to; the Trainer's resume then
    found none of the model's expert tensors and trained on with freshly initialised experts, with a warning.
    Checkpoints are now in the model's layout (the resume test above); one in the other layout is refused."""
    from safetensors.torch import load_file
    from transformers import AutoConfig

    from hfpretrain.models import build_model

    run = {
        **TINY_MOE,
        "training.max_steps": "2",
        "training.save_steps": "1",
        "training.save_strategy": "steps",
        "training.save_total_limit": "3",
    }
    run_pretrain(mini_blocks, tmp_path / "run", run)
    checkpoint = tmp_path / "run" / "checkpoint-1"
    model = build_model(AutoConfig.from_pretrained(checkpoint))  # a model built, not loaded, saves the Hub's layout
    model.load_state_dict(load_file(str(checkpoint / "model.safetensors")))
    model.save_pretrained(checkpoint)
    assert "model.layers.0.mlp.experts.0.up_proj.weight" in load_file(str(checkpoint / "model.safetensors"))
    with pytest.raises(ValueError, match="weights do not fit the model: .* missing .*experts"):
        run_pretrain(
            mini_blocks,
            tmp_path / "run",
            {**run, "training.max_steps": "3", "training.resume_from_checkpoint": str(checkpoint)},
        )


def _tiny_glm(experts="eager", **overrides):
    from hfpretrain.models import build_model, load_config

    config = load_config(
        "glm4_moe_101m_a24m",
        {
            "num_hidden_layers": 3,
            "hidden_size": 64,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "moe_intermediate_size": 32,
            "n_routed_experts": 8,
            "num_experts_per_tok": 2,
            "intermediate_size": 64,
            **overrides,
        },
        vocab_size=100,
    )
    return build_model(config, attn_implementation="eager", experts_implementation=experts)


def test_balancing_acts_on_the_model_after_it_moved():
    """The Trainer moves the model to its device after the callbacks are made, which replaces every buffer: the
    bias updates must reach the moved model's buffers (they went to the stale CPU copies), and the counts follow the
    indices' device (on a GPU: 'index is on cuda:0, ... other tensors on cpu'). A dtype move stands in for it here."""
    from hfpretrain.training.moe import ExpertBalanceCallback, ExpertLoad, find_routers

    model = _tiny_glm(num_hidden_layers=2).train()  # float64 runs
    load = ExpertLoad(find_routers(model))
    callback = ExpertBalanceCallback(load, rate=0.5)
    model.to(torch.float64)  # a new tensor for every buffer, as .to(device) makes
    model(input_ids=torch.randint(0, 100, (2, 8)))
    load.count()
    callback.on_step_end(None, None, None)
    (router,) = find_routers(model)
    assert router.e_score_correction_bias.abs().sum() > 0  # the moved model's buffer moved


@pytest.mark.parametrize("compiled", [False, True])
def test_the_load_is_each_routers_own_choice_without_router_logits(compiled):
    """The hooks count what each router chose (group-limited routing and the correction bias included) with no
    output_router_logits, which transformers 5.17's GLM-4-MoE ignores; evaluation forwards are not counted; under
    torch.compile the hooks trace without a graph break (fullgraph) and count the same."""
    from hfpretrain.training.moe import ExpertLoad, find_routers

    torch.manual_seed(0)
    # batched_mm: eager's loop over the experts that got tokens is data-dependent, no full graph
    model = _tiny_glm("batched_mm" if compiled else "eager", n_group=2, topk_group=1).train()
    routers = find_routers(model)
    for r in routers:
        r.e_score_correction_bias.copy_(torch.linspace(-0.3, 0.3, 8))
    load = ExpertLoad(routers)
    seen = []
    hooks = [r.register_forward_hook(lambda m, a, out: seen.append(out[2])) for r in routers]
    ids = torch.randint(0, 100, (2, 16))
    run = torch.compile(model, backend="eager", fullgraph=True) if compiled else model
    run(input_ids=ids)
    load.count()
    for h in hooks:
        h.remove()
    counts = load.take()
    assert counts.shape == (2, 8) and counts.sum(dim=1).tolist() == [32 * 2] * 2  # GLM's first layer is dense
    expected = torch.stack([torch.bincount(s.reshape(-1), minlength=8) for s in seen])
    assert torch.equal(counts, expected)
    assert all(((s // 4) == (s[:, :1] // 4)).all() for s in seen)  # topk_group=1: one group of 4 per token
    model.eval()
    run(input_ids=ids)
    load.count() if load.chosen else None
    assert not load.chosen and load.take().sum() == 0


def test_a_model_whose_routers_return_no_choice():
    """Routers that return no (logits, weights, indices) (a transformers that changed them): the load is not
    logged, with one warning; balancing, which needs it, stops with one line."""
    from hfpretrain.models import build_model, load_config
    from hfpretrain.training.moe import ExpertBalanceCallback, ExpertLoad, find_routers

    model = build_model(
        load_config(
            "qwen3_moe_109m_a21m",
            {
                "num_hidden_layers": 1,
                "hidden_size": 64,
                "num_attention_heads": 2,
                "num_key_value_heads": 2,
                "head_dim": 32,
                "moe_intermediate_size": 32,
                "num_experts": 4,
                "num_experts_per_tok": 2,
            },
            vocab_size=100,
        )
    )
    load = ExpertLoad(find_routers(model))
    callback = ExpertBalanceCallback(load)
    load.count()  # a training step whose routers returned nothing the hooks could read
    logs = {"loss": 1.0}
    callback.on_step_end(None, None, None)
    callback.on_log(None, None, None, logs=logs)
    assert logs == {"loss": 1.0}
    ExpertBalanceCallback(load, rate=0.001)
    with pytest.raises(RuntimeError, match="moe.bias_update_rate: transformers .* returned 0 expert choices"):
        load.count()


def test_best_small_moe_is_best_small_with_experts_at_equal_flops():
    """recipes/best_small_moe.yaml changes the MLP into 32 experts (top-4) of a quarter of the dense width and
    nothing else: the same active shape (within the router's weights), FLOPs per token, data and schedule."""
    import dataclasses

    from hfpretrain.models import count_params, flops_per_token, load_config
    from hfpretrain.training.config import load_recipe

    dense = load_recipe(REPO / "recipes" / "best_small.yaml", [])
    moe = load_recipe(REPO / "recipes" / "best_small_moe.yaml", [])
    assert moe.model.config == "qwen3_moe_587m_a103m" and moe.moe.aux_loss_coef == 0.001
    for section in ("training", "data"):
        a, b = (
            dict(x) if isinstance(x, dict) else dataclasses.asdict(x)
            for x in (getattr(dense, section), getattr(moe, section))
        )
        a.pop("output_dir", None), b.pop("output_dir", None)
        assert a == b, section
    assert dense.training_flops == moe.training_flops
    d, m = (load_config(r.model.config, vocab_size=8192) for r in (dense, moe))
    assert m.num_experts_per_tok * m.moe_intermediate_size == d.intermediate_size
    dc, mc = count_params(d), count_params(m)
    router = m.num_hidden_layers * m.num_experts * m.hidden_size
    assert mc.active_non_embedding - dc.non_embedding == router
    assert mc.non_embedding > 5 * dc.non_embedding
    fd, fm = flops_per_token(d, 1024).total, flops_per_token(m, 1024).total
    assert fm - fd == 6 * router  # 0.2% more: the routers' matmuls


def test_the_aux_loss_from_the_hooks_is_transformers_and_compiles_whole():
    """The trainer computes transformers' load-balancing loss from the logits the routers' hooks keep and calls
    the model with output_router_logits=False: the same loss and gradient, and the forward compiles as one graph
    (transformers collects router logits through a ContextVar, which split the compiled decoder at every router)."""
    from hfpretrain.models import build_model, load_config
    from hfpretrain.training.moe import ExpertLoad, aux_loss_function, find_routers

    torch.manual_seed(0)
    config = load_config(
        "qwen3_moe_109m_a21m",
        {
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "moe_intermediate_size": 32,
            "num_experts": 8,
            "num_experts_per_tok": 2,
        },
        vocab_size=100,
    )
    model = build_model(config, attn_implementation="sdpa", experts_implementation="batched_mm").train()
    load = ExpertLoad(find_routers(model), aux_loss_function(model))
    assert load.aux_loss is not None
    ids = torch.randint(0, 100, (2, 16))
    want = model(input_ids=ids, output_router_logits=True).aux_loss
    (want_grad,) = torch.autograd.grad(want, model.model.layers[0].mlp.gate.weight)
    load.logits.clear()
    torch.compile(model, backend="eager", fullgraph=True)(input_ids=ids, output_router_logits=False)
    got = load.take_aux_loss()
    torch.testing.assert_close(got, want)
    (got_grad,) = torch.autograd.grad(got, model.model.layers[0].mlp.gate.weight)
    torch.testing.assert_close(got_grad, want_grad)
    assert load.take_aux_loss() is None  # taken once per forward
    glm = _tiny_glm()
    assert aux_loss_function(glm) is None  # no auxiliary loss in transformers for GLM-4-MoE


def test_the_per_layer_aux_loss_is_each_layers_loss_averaged():
    """moe.aux_loss_scope=per_layer: the mean of transformers' loss taken on each layer alone. Two layers that send
    every token to two different experts each: pooled, their counts add up to half the experts evenly loaded and the
    loss reads better balance than either layer has; per layer it reads each layer's collapse."""
    from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

    from hfpretrain.training.moe import switch_balancing_loss

    torch.manual_seed(0)
    experts, k, tokens = 8, 2, 64

    def choices(logits):
        return logits.softmax(-1).topk(k, dim=-1).indices

    logits = [torch.randn(tokens, experts) for _ in range(3)]
    got = switch_balancing_loss(logits, [choices(x) for x in logits], experts, per_layer=True)
    want = torch.stack([load_balancing_loss_func((x,), experts, k) for x in logits]).mean()
    torch.testing.assert_close(got, want)
    pooled = switch_balancing_loss(logits, [choices(x) for x in logits], experts)
    torch.testing.assert_close(pooled, load_balancing_loss_func(tuple(logits), experts, k))

    collapsed = [torch.full((tokens, experts), -9.0) for _ in range(2)]
    collapsed[0][:, :2], collapsed[1][:, 2:4] = 9.0, 9.0  # layer 0 sends all to experts 0-1, layer 1 to 2-3
    chosen = [choices(x) for x in collapsed]
    per_layer = switch_balancing_loss(collapsed, chosen, experts, per_layer=True)
    pooled = switch_balancing_loss(collapsed, chosen, experts)
    assert per_layer.item() == pytest.approx(experts, rel=1e-3)  # k * experts / k: the worst a layer can do
    assert pooled.item() == pytest.approx(experts / 2, rel=1e-3)


def test_the_per_layer_aux_loss_trains(mini_blocks, tmp_path):
    """Through the recipe: the key is saved with the run and changes the first step's loss only through the aux
    term (same seed, same weights, the same cross-entropy)."""
    base = {**TINY_MOE, "training.max_steps": "1", "training.save_strategy": "no", "moe.aux_loss_coef": "10"}
    first = {}
    for scope in ("pooled", "per_layer"):
        run_pretrain(mini_blocks, tmp_path / scope, {**base, "moe.aux_loss_scope": scope})
        assert yaml.safe_load((tmp_path / scope / "recipe.yaml").read_text())["moe"]["aux_loss_scope"] == scope
        first[scope] = next(e["loss"] for e in read_log(tmp_path / scope) if e.get("event") == "log" and "loss" in e)
    assert first["per_layer"] > first["pooled"]  # each layer's loss >= the pooled one's share (convexity)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_count_choices_is_bincount(device):
    """The load counts (histc on a GPU, integer adds on a CPU) are torch.bincount's, the last bin included."""
    from hfpretrain.training.moe import count_choices

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    generator = torch.Generator().manual_seed(0)
    for bins in (4, 256, 512):
        indices = torch.randint(0, bins, (8, 4096, 4), generator=generator)
        indices[0, 0, 0] = bins - 1
        counts = count_choices(indices.to(device), bins)
        assert counts.dtype == torch.int64 and torch.equal(
            counts.cpu(), torch.bincount(indices.reshape(-1), minlength=bins)
        )
