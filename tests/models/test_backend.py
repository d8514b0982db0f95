import logging

import pytest

from hfpretrain.models import backend, build_model, choose_attn_implementation, load_config


def _fake(monkeypatch, flash: bool, cuda: bool, sdpa: bool = True):
    monkeypatch.setattr(backend, "_flash_attn_importable",
                        lambda: (flash, "flash-attn imports" if flash else "flash-attn is not installed"))
    monkeypatch.setattr(backend, "_cuda_available", lambda: cuda)
    monkeypatch.setattr(backend, "_sdpa_available", lambda: sdpa)


def test_auto_prefers_flash_with_cuda(monkeypatch):
    _fake(monkeypatch, flash=True, cuda=True)
    impl, reason = choose_attn_implementation("auto")
    assert impl == "flash_attention_2" and "CUDA" in reason


def test_auto_falls_back_to_sdpa_then_eager(monkeypatch):
    _fake(monkeypatch, flash=True, cuda=False)
    assert choose_attn_implementation()[0] == "sdpa"
    _fake(monkeypatch, flash=False, cuda=True)
    impl, reason = choose_attn_implementation()
    assert impl == "sdpa" and "not installed" in reason
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


def test_cpu_choice_is_real():
    # this machine has no flash-attn / GPU: the real probes pick sdpa
    impl, _ = choose_attn_implementation()
    assert impl in ("sdpa", "eager")


def test_build_model_logs_one_line_and_honours_config(caplog, monkeypatch):
    _fake(monkeypatch, flash=False, cuda=False)
    with caplog.at_level(logging.INFO, logger="hfpretrain.models.zoo"):
        m = build_model(load_config("tiny", vocab_size=256))
    lines = [r.getMessage() for r in caplog.records if r.name == "hfpretrain.models.zoo"]
    assert lines == ["attention backend: sdpa (auto: flash-attn is not installed; torch sdpa available)"]
    assert m.config._attn_implementation == "sdpa"
    forced = build_model(load_config("tiny", {"attn_implementation": "eager"}, vocab_size=256))
    assert forced.config._attn_implementation == "eager"
