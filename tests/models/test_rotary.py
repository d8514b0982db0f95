"""Rotary embeddings from a table (models/rotary.py): the same cos/sin and logits as transformers' forward, no cos or
sin left in a compiled decoder's graph, checkpoints unchanged."""

from __future__ import annotations

import copy
import itertools

import torch

from hfpretrain.models import build_model, load_config
from hfpretrain.models.rotary import tabulate_rotary

from compiled_graph import dynamo_graph_code

LLAMA = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 64,
    "vocab_size": 512,
}


def _model(name="tiny", overrides=None):
    torch.manual_seed(0)
    return build_model(load_config(name, overrides or {}, vocab_size=512), attn_implementation="sdpa")


def test_same_cos_sin_and_logits_as_transformers():
    yarn = {
        "rope_parameters": {
            "rope_type": "yarn",
            "factor": 2.0,
            "rope_theta": 10000.0,  # attention_scaling != 1
            "original_max_position_embeddings": 1024,
        }
    }
    for model in (_model(), _model("llama3_2p2b", LLAMA), _model("tiny", yarn)):
        reference = copy.deepcopy(model)
        assert tabulate_rotary(model)
        rotary, rotary_ref = model.model.rotary_emb, reference.model.rotary_emb
        inputs = (torch.randn(2, 16, 8), torch.randn(2, 16, 8, dtype=torch.bfloat16))  # the dtype follows x
        positions = (torch.arange(16)[None], torch.randint(0, model.config.max_position_embeddings, (2, 16)))
        for x, pos in itertools.product(inputs, positions):
            for got, want in zip(rotary(x, pos), rotary_ref(x, pos)):
                assert got.shape == want.shape and got.dtype == want.dtype == x.dtype
                torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
        ids = torch.randint(0, 512, (2, 16))
        torch.testing.assert_close(model(input_ids=ids).logits, reference(input_ids=ids).logits, rtol=0, atol=1e-5)


def test_a_compiled_decoder_reads_the_table():
    """The reason for the table: compiled whole, the decoder's graph computes no cos or sin (inductor would inline
    them into every layer's rotary kernel)."""

    def graph_code(model) -> str:
        return dynamo_graph_code(model.model, input_ids=torch.randint(0, 512, (2, 16)))

    model = _model()
    assert ".cos()" in graph_code(model) and ".sin()" in graph_code(model)
    tabulate_rotary(model)
    code = graph_code(model)
    assert ".cos()" not in code and ".sin()" not in code and "cos_table" in code


def test_checkpoints_and_other_models_unchanged(tmp_path):
    model = _model()
    keys = set(model.state_dict())
    assert tabulate_rotary(model)
    assert set(model.state_dict()) == keys  # non-persistent buffers: save_pretrained writes what it wrote before
    model.save_pretrained(tmp_path)
    torch.save(model, tmp_path / "whole.pt")  # a whole-model pickle still works (a bound method would not pickle)
    loaded = torch.load(tmp_path / "whole.pt", weights_only=False)
    ids = torch.randint(0, 512, (1, 8))
    torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    assert "cos_table" not in (tmp_path / "model.safetensors").read_bytes()[:20000].decode("latin-1")
    gpt2 = build_model(
        load_config("gpt2_124m", {"n_layer": 1, "n_embd": 64, "n_head": 2, "vocab_size": 512}, vocab_size=512),
        attn_implementation="sdpa",
    )
    assert not tabulate_rotary(gpt2)  # learned positions: nothing to tabulate
    dynamic = _model("tiny", {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}})
    assert not tabulate_rotary(dynamic)  # its frequencies change with the length


def test_the_table_covers_a_training_length_past_the_config():
    """Training blocks longer than max_position_embeddings: transformers' forward extrapolates, so must the table."""
    model = _model("llama3_2p2b", LLAMA)  # 64 positions
    reference = copy.deepcopy(model)
    assert tabulate_rotary(model, min_length=128)
    assert model.model.rotary_emb.cos_table.shape[0] == 128
    ids = torch.randint(0, 512, (1, 128))
    torch.testing.assert_close(model(input_ids=ids).logits, reference(input_ids=ids).logits, rtol=0, atol=1e-5)
