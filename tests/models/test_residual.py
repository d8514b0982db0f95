"""model.residual_dtype (models/residual.py): the stream between decoder layers in bf16 under bf16 autocast,
nothing else changed; resolved by training/fast_path.py."""

from __future__ import annotations

import pytest
import torch

from hfpretrain.models import build_model, load_config
from hfpretrain.models.residual import cast_residual_stream, decoder_layers
from hfpretrain.training.fast_path import choose_residual_dtype

SHAPES = {"tiny": {}, "gpt2_124m": {"n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 512}}


def _stream_dtypes(model, ids, autocast: bool) -> list[torch.dtype]:
    """The dtype of the hidden states entering each decoder layer after the first, and of the final output."""
    seen = []
    hooks = [
        layer.register_forward_pre_hook(
            lambda m, a, k: seen.append((a[0] if a else k["hidden_states"]).dtype), with_kwargs=True
        )
        for layer in list(decoder_layers(model))[1:]
    ]
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        model(input_ids=ids, labels=ids).loss.backward()
    for h in hooks:
        h.remove()
    return seen


@pytest.mark.parametrize("shape", SHAPES)
def test_bfloat16_stream_under_autocast_only(shape):
    torch.manual_seed(0)
    model = build_model(load_config(shape, SHAPES[shape], vocab_size=512), attn_implementation="sdpa")
    ids = torch.randint(0, 512, (2, 16))
    assert set(_stream_dtypes(model, ids, autocast=True)) == {torch.float32}  # what fp32 embeddings give
    assert cast_residual_stream(model, "bfloat16")
    assert set(_stream_dtypes(model, ids, autocast=True)) == {torch.bfloat16}
    assert set(_stream_dtypes(model, ids, autocast=False)) == {torch.float32}  # no autocast: the hook does nothing
    assert all(p.dtype == torch.float32 for p in model.parameters())  # weights and their gradients stay fp32
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())


def test_same_loss_within_bf16_rounding_and_compiles():
    torch.manual_seed(0)
    ref = build_model(load_config("gpt2_124m", SHAPES["gpt2_124m"], vocab_size=512), attn_implementation="sdpa")
    model = build_model(ref.config, attn_implementation="sdpa")
    model.load_state_dict(ref.state_dict())
    cast_residual_stream(model, "bfloat16")
    model.base_model.compile(backend="aot_eager")  # the hook is traced into the graph
    ids = torch.randint(0, 512, (4, 32))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want, got = ref(input_ids=ids, labels=ids).loss, model(input_ids=ids, labels=ids).loss
    assert got.item() == pytest.approx(want.item(), rel=1e-2) and got.item() != want.item()


def test_float32_adds_nothing_and_bad_values_are_refused():
    model = build_model(load_config("tiny", {}, vocab_size=512))
    assert not cast_residual_stream(model, "float32")
    assert not decoder_layers(model)[0]._forward_pre_hooks
    with pytest.raises(ValueError, match="model.residual_dtype='fp16'"):
        cast_residual_stream(model, "fp16")


def test_auto_is_bfloat16_on_a_gpu_training_in_bf16_only():
    assert choose_residual_dtype("auto", gpu=True)[0] == "bfloat16"
    assert choose_residual_dtype("auto", gpu=False)[0] == "float32"
    assert choose_residual_dtype("float32", gpu=True) == ("float32", "set in the recipe")
    # fp16 or fp32 training: no bf16 autocast, so the plan (and the memory estimate) keep the fp32 stream
    assert choose_residual_dtype("auto", gpu=True, bf16=False)[0] == "float32"
    dtype, why = choose_residual_dtype("bfloat16", gpu=True, bf16=False)
    assert dtype == "float32" and "training.bf16 is off" in why


def test_decoder_layers_must_match_the_config():
    model = build_model(load_config("tiny", {}, vocab_size=512))
    assert len(decoder_layers(model)) == model.config.num_hidden_layers
    model.config.num_hidden_layers += 1
    with pytest.raises(ValueError, match="not the config's 3 decoder layers"):
        decoder_layers(model)
