import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hfpretrain.models import (
    CONFIG_DIR,
    build_model,
    load_config,
    pad_vocab,
    scaling_config_dict,
    scaling_name,
    zoo_names,
)
from hfpretrain.models.zoo import SCALING_DEPTHS

REFERENCE = ["qwen3_1p8b", "gpt2_1p29b", "llama3_2p2b", "llama2_1p36b"]


def _scaled_down(name):
    cfg = json.loads((CONFIG_DIR / f"{name}.json").read_text())
    if cfg["model_type"] == "gpt2":
        return {"n_layer": 2, "n_embd": 64, "n_head": 4, "n_inner": 128, "vocab_size": 300}
    small = {
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "head_dim": 16,
        "num_key_value_heads": min(cfg.get("num_key_value_heads", 4), 4)
        if cfg.get("num_key_value_heads", 4) != cfg.get("num_attention_heads")
        else 4,
        "intermediate_size": 96,
        "vocab_size": 300,
    }
    if "moe_intermediate_size" in cfg:  # MoE: 4 narrow experts, top-2
        experts_key = "num_experts" if "num_experts" in cfg else "n_routed_experts"
        small.update({"moe_intermediate_size": 32, experts_key: 4, "num_experts_per_tok": 2})
    return small


def test_zoo_has_the_documented_shapes():
    names = set(zoo_names())
    assert set(REFERENCE) | {"tiny"} <= names
    assert {scaling_name(L) for L in SCALING_DEPTHS} <= names


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIG_DIR.glob("*.json")))
def test_every_config_parses_and_builds_scaled_down(name):
    cfg = load_config(name)
    assert cfg.model_type == json.loads((CONFIG_DIR / f"{name}.json").read_text())["model_type"]
    small = load_config(name, _scaled_down(name))
    model = build_model(small, attn_implementation="sdpa")
    ids = torch.randint(0, 300, (2, 16))
    out = model(input_ids=ids, labels=ids)
    assert out.logits.shape == (2, 16, 300)
    assert torch.isfinite(out.loss)


def test_scaling_family_json_follows_the_rule():
    for L in SCALING_DEPTHS:
        on_disk = json.loads((CONFIG_DIR / f"{scaling_name(L)}.json").read_text())
        assert on_disk == scaling_config_dict(L)
        assert on_disk["hidden_size"] == 64 * L and on_disk["intermediate_size"] == 3 * on_disk["hidden_size"]


def test_vocab_from_tokenizer_is_padded(gpt2_tokenizer):
    n = len(AutoTokenizer.from_pretrained(gpt2_tokenizer))
    assert n == 50257
    cfg = load_config("tiny", vocab_size=n)
    assert cfg.vocab_size == 50304 == pad_vocab(n)
    assert load_config("tiny", {"pad_vocab_multiple": 64}, vocab_size=n).vocab_size == 50304
    assert load_config("tiny", {"pad_vocab_multiple": 1}, vocab_size=n).vocab_size == 50257
    # an explicit vocab that fits is padded too (a misaligned LM head is slow), unless asked not to
    assert load_config("gpt2_1p29b", vocab_size=n).vocab_size == 50304
    assert load_config("gpt2_1p29b", {"pad_vocab_multiple": 1}, vocab_size=n).vocab_size == 50257
    assert load_config("gpt2_1p29b").vocab_size == 50257  # no tokenizer: the config as written


def test_vocab_mismatch_is_refused(gpt2_tokenizer):
    with pytest.raises(ValueError, match="tokenizer has 151669 tokens but model vocab_size is 50257"):
        load_config("gpt2_1p29b", vocab_size=151669)
    with pytest.raises(ValueError, match="tokenizer has 50257 tokens but model vocab_size is 151680"):
        load_config("qwen3_1p8b", vocab_size=50257)
    with pytest.raises(ValueError, match="tokenizer has 1000 tokens but model vocab_size is 500"):
        load_config("tiny", {"vocab_size": 500}, vocab_size=1000)


def test_unknown_override_names_the_nearest_field():
    with pytest.raises(ValueError, match="num_hiden_layers.*did you mean 'num_hidden_layers'"):
        load_config("tiny", {"num_hiden_layers": 3})
    cfg = load_config("tiny", {"num_hidden_layers": 3, "tie_word_embeddings": False, "hidden_act": "gelu"})
    assert cfg.num_hidden_layers == 3 and len(cfg.layer_types) == 3
    assert cfg.tie_word_embeddings is False and cfg.hidden_act == "gelu"


def test_spec_can_be_path_or_dir(tmp_path):
    cfg = load_config("tiny", vocab_size=1000)
    cfg.save_pretrained(tmp_path)
    assert load_config(tmp_path).vocab_size == 1024
    assert load_config(tmp_path / "config.json").hidden_size == 64
    with pytest.raises(ValueError, match="did you mean"):
        load_config("qwen3_1p8")
    with pytest.raises(ValueError, match="does not exist"):
        load_config(tmp_path / "missing.json")


def test_architecture_choices_are_config_fields():
    untied = build_model(load_config("tiny", {"tie_word_embeddings": False}, vocab_size=256), "eager")
    tied = build_model(load_config("tiny", vocab_size=256), "eager")
    assert untied.lm_head.weight.data_ptr() != untied.get_input_embeddings().weight.data_ptr()
    assert tied.lm_head.weight.data_ptr() == tied.get_input_embeddings().weight.data_ptr()
    qk = build_model(load_config("tiny", vocab_size=256), "eager")  # qwen3: QK-norm
    no_qk = build_model(load_config("tiny", {"model_type": "llama"}, vocab_size=256), "eager")
    assert any("q_norm" in n for n, _ in qk.named_parameters())
    assert not any("q_norm" in n for n, _ in no_qk.named_parameters())


@pytest.mark.parametrize("name", ["tiny", "gpt2_1p29b"])
def test_save_pretrained_round_trip_gives_identical_logits(tmp_path, name):
    torch.manual_seed(0)
    cfg = load_config(name, _scaled_down(name) if name != "tiny" else None, vocab_size=300)
    model = build_model(cfg, attn_implementation="eager").eval()
    model.save_pretrained(tmp_path)
    again = AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    ids = torch.randint(0, 300, (2, 12))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, again(ids).logits)
    assert load_config(tmp_path).vocab_size == cfg.vocab_size


def test_overriding_width_or_heads_says_when_head_dim_no_longer_matches(caplog):
    """Qwen3 reads head_dim from its config: 8 heads on a 512 width keep qwen3_103m's 128, an attention twice
    the residual stream's width (more parameters than the user meant). Said once; an explicit head_dim is not."""
    with caplog.at_level("WARNING", logger="hfpretrain.models.zoo"):
        config = load_config("qwen3_103m", {"hidden_size": 512, "num_attention_heads": 8})
    assert config.head_dim == 128
    assert "8 x head_dim 128" in caplog.text and "set model.overrides.head_dim=64" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="hfpretrain.models.zoo"):
        load_config("qwen3_103m", {"hidden_size": 512, "num_attention_heads": 8, "head_dim": 64})
        load_config("qwen3_103m", {"num_hidden_layers": 2})
    assert "head_dim" not in caplog.text
