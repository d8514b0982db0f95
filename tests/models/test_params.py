import pytest

from hfpretrain.models import build_model, count_params, load_config

# (name, total, layers, d_model, heads) from the reference report
REFERENCE = [("qwen3_1p8b", 1.83e9), ("gpt2_1p29b", 1.29e9), ("llama3_2p2b", 2.2e9), ("llama2_1p36b", 1.36e9)]


@pytest.mark.parametrize("name,expected", REFERENCE)
def test_reference_shapes_match_report(name, expected):
    counts = count_params(load_config(name))
    assert abs(counts.total - expected) / expected < 0.01, counts
    assert counts.total == counts.embedding + counts.non_embedding


def test_reference_architecture_fields():
    q = load_config("qwen3_1p8b")
    assert (q.num_hidden_layers, q.hidden_size, q.num_attention_heads, q.num_key_value_heads) == (24, 2048, 16, 8)
    assert q.intermediate_size == 6144 and q.vocab_size == 151680 and q.vocab_size % 128 == 0
    assert not q.attention_bias
    g = load_config("gpt2_1p29b")
    assert (g.n_layer, g.n_embd, g.n_head, g.vocab_size) == (18, 2304, 18, 50257)
    l3 = load_config("llama3_2p2b")
    assert (l3.num_hidden_layers, l3.hidden_size, l3.num_attention_heads, l3.num_key_value_heads) == (30, 2048, 16, 8)
    l2 = load_config("llama2_1p36b")
    assert (l2.num_hidden_layers, l2.hidden_size, l2.num_attention_heads) == (18, 2304, 18)


def test_tied_and_untied_counts_match_a_real_model():
    for tie in (True, False):
        cfg = load_config("tiny", {"tie_word_embeddings": tie}, vocab_size=1000)
        model = build_model(cfg, "eager")
        real = sum(p.numel() for p in model.parameters())
        counts = count_params(cfg)
        assert counts == count_params(model)
        assert counts.total == real
        v, d = cfg.vocab_size, cfg.hidden_size
        assert counts.embedding == (v * d if tie else 2 * v * d)


def test_gpt2_position_embeddings_are_embedding():
    cfg = load_config(
        "gpt2_1p29b", {"n_layer": 1, "n_embd": 64, "n_head": 4, "n_inner": 256, "vocab_size": 100, "n_positions": 128}
    )
    c = count_params(cfg)
    assert c.embedding == 100 * 64 + 128 * 64  # tied LM head counted once
    assert c.non_embedding == 64 * 64 * 12 + 13 * 64 + 256 - 4 * 64 + 2 * 64  # blocks (n_inner=4d here) + ln_f
