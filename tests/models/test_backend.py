import logging
import sys

import pytest
import torch

from hfpretrain.models import backend, build_model, choose_attn_implementation, load_config


def _fake(monkeypatch, flash: bool, cuda: bool, sdpa: bool = True):
    monkeypatch.setattr(
        backend,
        "_flash_attn_importable",
        lambda: (flash, "flash-attn imports" if flash else "flash-attn is not installed"),
    )
    monkeypatch.setattr(backend, "_cuda_available", lambda: cuda)
    monkeypatch.setattr(backend, "_sdpa_available", lambda: sdpa)


def test_auto_prefers_flash_with_cuda(monkeypatch):
    _fake(monkeypatch, flash=True, cuda=True)
    impl, reason = choose_attn_implementation("auto")
    assert impl == "flash_attention_2" and "CUDA" in reason


def test_auto_falls_back_to_sdpa_then_eager(monkeypatch):
    _fake(monkeypatch, flash=True, cuda=False)
    assert choose_attn_implementation()[0] == "sdpa_packed"
    _fake(monkeypatch, flash=False, cuda=True)
    impl, reason = choose_attn_implementation()
    assert impl == "sdpa_packed" and "not installed" in reason
    _fake(monkeypatch, flash=False, cuda=False, sdpa=False)
    assert choose_attn_implementation()[0] == "eager"


def test_forced_backend(monkeypatch):
    _fake(monkeypatch, flash=False, cuda=False)
    assert choose_attn_implementation("eager") == ("eager", "forced by config")
    with pytest.raises(ValueError, match="flash_attention_2 was forced but flash-attn is not installed"):
        choose_attn_implementation("flash_attention_2")
    _fake(monkeypatch, flash=True, cuda=False)
    with pytest.raises(ValueError, match="no CUDA GPU"):
        choose_attn_implementation("flash_attention_2")
    with pytest.raises(ValueError, match="unknown attention implementation"):
        choose_attn_implementation("flash")


def test_flex_attention_fa4_is_refused_without_its_package_or_a_gpu(monkeypatch):
    """flash-attention 4 is a beta that auto never picks; forced, it needs the package and a CUDA GPU. The real
    probes first, where this machine lacks either."""
    if not (backend._flash_cute_importable()[0] and torch.cuda.is_available()):
        with pytest.raises(ValueError, match=r"flex_attention_fa4 was forced but (flash-attn-4|no CUDA GPU)"):
            choose_attn_implementation("flex_attention_fa4")
    monkeypatch.setattr(backend, "_flash_cute_importable", lambda: (True, "flash-attn-4 imports"))
    monkeypatch.setattr(backend, "_cuda_available", lambda: False)
    with pytest.raises(ValueError, match="flex_attention_fa4 was forced but no CUDA GPU"):
        choose_attn_implementation("flex_attention_fa4")
    monkeypatch.setattr(backend, "_cuda_available", lambda: True)
    assert choose_attn_implementation("flex_attention_fa4") == ("flex_attention_fa4", "forced by config")


def test_models_built_from_one_config_keep_their_own_backend():
    """transformers writes the backend into the config it is given: without a copy, a second model built from the
    same config switched the first one's attention too (an A/B of two backends then compared one with itself)."""
    cfg = load_config("tiny", vocab_size=64)
    plain = build_model(cfg, attn_implementation="sdpa")
    packed = build_model(cfg, attn_implementation="sdpa_packed")
    assert plain.config is not packed.config
    assert (plain.config._attn_implementation, packed.config._attn_implementation) == ("sdpa", "sdpa_packed")
    assert plain.model.layers[0].self_attn.config._attn_implementation == "sdpa"


def test_cpu_choice_is_real():
    # this machine has no flash-attn / GPU: the real probes pick sdpa
    impl, _ = choose_attn_implementation()
    assert impl in ("sdpa_packed", "eager")


def test_build_model_logs_one_line_and_honours_config(caplog, monkeypatch):
    _fake(monkeypatch, flash=False, cuda=False)
    with caplog.at_level(logging.INFO, logger="hfpretrain.models.zoo"):
        m = build_model(load_config("tiny", vocab_size=256))
    lines = [r.getMessage() for r in caplog.records if r.name == "hfpretrain.models.zoo"]
    assert lines == [
        "attention backend: sdpa_packed (auto: flash-attn is not installed; torch sdpa, causal without "
        "a mask (packed blocks))"
    ]
    assert m.config._attn_implementation == "sdpa_packed"
    forced = build_model(load_config("tiny", {"attn_implementation": "eager"}, vocab_size=256))
    assert forced.config._attn_implementation == "eager"


@pytest.mark.parametrize("name", ["tiny", "gpt2_124m"])
def test_packed_sdpa_equals_sdpa_and_builds_no_mask(name, tmp_path):
    """sdpa_packed gives sdpa's outputs, compiled too, with no mask in the graph (a dense mask keeps
    SDPA off its flash kernel); padded batches and cached decoding still get transformers' mask;
    a saved checkpoint does not name it, so plain transformers loads it."""
    import torch
    from transformers import AutoModelForCausalLM

    overrides = {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256} if name.startswith("gpt2") else {}
    cfg = load_config(name, overrides, vocab_size=256)
    torch.manual_seed(0)
    plain = build_model(cfg, attn_implementation="sdpa").eval()
    packed = build_model(cfg, attn_implementation="sdpa_packed").eval()
    packed.load_state_dict(plain.state_dict())
    ids = torch.randint(0, 256, (2, 32))
    ref = plain(ids).logits
    torch.testing.assert_close(packed(ids).logits, ref)

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(packed, backend=backend)
    torch.testing.assert_close(compiled(ids).logits, ref)
    code = "\n".join(g.code for g in graphs)
    assert "scaled_dot_product_attention" in code and "is_causal = True" in code
    assert "attn_mask = None" in code or "attn_mask" not in code
    torch._dynamo.reset()

    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # left padding: the mask must be honoured
    torch.testing.assert_close(packed(ids, attention_mask=mask).logits, plain(ids, attention_mask=mask).logits)
    out_plain = plain.generate(ids[:, :8], max_new_tokens=4, do_sample=False, use_cache=True)
    out_packed = packed.generate(ids[:, :8], max_new_tokens=4, do_sample=False, use_cache=True)
    assert torch.equal(out_plain, out_packed)

    packed.save_pretrained(tmp_path)
    assert "sdpa_packed" not in (tmp_path / "config.json").read_text()
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert reloaded.config._attn_implementation == "sdpa"


def test_flash_attn_4_alone_is_not_flash_attention_2(tmp_path, monkeypatch):
    """flash-attn-4 installs flash_attn/cute only: a namespace package without flash_attn_func, which auto must not
    take for flash-attention 2; and a cute package that fails to import is refused by name, not left to inductor."""
    (tmp_path / "flash_attn" / "cute").mkdir(parents=True)
    (tmp_path / "flash_attn" / "cute" / "__init__.py").write_text("import no_such_cute_dsl\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("flash_attn", "flash_attn.cute"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    try:
        assert backend._flash_attn_importable() == (False, "flash-attn (2) is not installed, only flash_attn.cute")
        ok, why = backend._flash_cute_importable()
        assert not ok and why.startswith("flash-attn-4 fails to import (ModuleNotFoundError")
        assert "no_such_cute_dsl" in why
        (tmp_path / "flash_attn" / "cute" / "__init__.py").write_text("")
        sys.modules.pop("flash_attn.cute", None)
        assert backend._flash_cute_importable() == (True, "flash-attn-4 imports")
    finally:  # the fake package must not outlive the test in this worker's module cache
        for name in [n for n in sys.modules if n == "flash_attn" or n.startswith("flash_attn.")]:
            del sys.modules[name]


def test_flex_attention_fa4_asks_torch_for_the_flash_backend():
    """Registered (twice: idempotent) under its own name for attention and mask, and its calls reach torch's flex
    attention with BACKEND "FLASH": torch refuses that beside the legacy FORCE_USE_FLEX_ATTENTION, which shows the
    option arrived (on a CPU torch's reference otherwise ignores the backend)."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flex_attention_mask as mask_fn
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    backend.register_flex_fa4()
    backend.register_flex_fa4()
    assert ALL_ATTENTION_FUNCTIONS["flex_attention_fa4"] is backend.flex_fa4_attention_forward
    assert ALL_MASK_ATTENTION_FUNCTIONS["flex_attention_fa4"] is mask_fn
    model = build_model(
        load_config(
            "tiny",
            {
                "num_hidden_layers": 1,
                "hidden_size": 64,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "head_dim": 16,
                "intermediate_size": 64,
            },
            vocab_size=64,
        ),
        attn_implementation="sdpa",
    ).eval()
    attention = model.model.layers[0].self_attn
    q = torch.randn(1, 4, 128, 16)
    with pytest.raises(Exception, match="BACKEND cannot be combined"):
        backend.flex_fa4_attention_forward(attention, q, q, q, None, kernel_options={"FORCE_USE_FLEX_ATTENTION": True})


@pytest.mark.gpu
def test_flex_attention_fa4_on_a_gpu_matches_triton():
    """With flash-attn-4 on a GPU (benchmarks/gpu_tests.sh): a document-masked training step gives flex attention's
    Triton logits and attention gradients (bf16), and the calls a run makes besides training work under it: a
    forward at a length that is no multiple of the kernels' tiles (a passkey prompt) and a cached decoding step.
    Each difference is held against what a broken mask or cache would cost: the same step without the mask (and
    its positions), the last token without its context."""
    from hfpretrain.data.order import document_positions

    ok, why = backend._flash_cute_importable()
    if not ok:
        pytest.skip(why)

    def rel(a, b):
        return float((a.float() - b.float()).norm() / b.float().norm())

    cfg = load_config(
        "tiny",
        {
            "hidden_size": 256,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 64,
            "intermediate_size": 512,
        },
        vocab_size=512,
    )
    torch.manual_seed(0)
    triton = build_model(cfg, attn_implementation="flex_attention").cuda().to(torch.bfloat16)
    fa4 = build_model(cfg, attn_implementation="flex_attention_fa4").cuda().to(torch.bfloat16)
    fa4.load_state_dict(triton.state_dict())
    eos = 7
    ids = torch.randint(8, 512, (2, 1024), device="cuda")
    ids[:, [100, 450, 700]] = eos  # four documents a row
    positions = document_positions(ids, eos)

    def step(model, position_ids):
        model.train()
        model.zero_grad(set_to_none=True)
        out = model(input_ids=ids, position_ids=position_ids, labels=ids)
        out.loss.backward()
        grads = torch.cat([p.grad.float().flatten() for n, p in model.named_parameters() if "self_attn" in n])
        return out.logits.detach(), grads

    (logits_t, grads_t), (logits_f, grads_f) = step(triton, positions), step(fa4, positions)
    logits_u, grads_u = step(triton, None)  # attention across the documents: what a lost mask would give
    assert rel(logits_f, logits_t) < 0.1 * rel(logits_u, logits_t)
    assert rel(grads_f, grads_t) < 0.1 * rel(grads_u, grads_t)

    prompt = ids[:1, :777]
    with torch.no_grad():
        triton.eval(), fa4.eval()
        full_t, full_f = triton(input_ids=prompt).logits[:, -1], fa4(input_ids=prompt).logits[:, -1]
        alone = fa4(input_ids=prompt[:, -1:]).logits[:, -1]  # the last token without its context
        assert rel(full_f, full_t) < 0.1 * rel(alone, full_t)
        cache = fa4(input_ids=prompt[:, :-1], use_cache=True).past_key_values
        cached = fa4(input_ids=prompt[:, -1:], past_key_values=cache, use_cache=True).logits[:, -1]
        assert rel(cached, full_f) < 0.1 * rel(alone, full_f)
