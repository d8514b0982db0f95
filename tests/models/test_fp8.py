"""model.precision=fp8: which layers torchao converts and the one-line errors (a real emulated run:
tests/training/test_fp8_training.py)."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

pytest.importorskip("torchao.float8", reason="torchao is in the [fp8] and [test] extras")

from hfpretrain.models import build_model, load_config  # noqa: E402
from hfpretrain.models.fp8 import check_fp8_available, convert_to_fp8  # noqa: E402
from hfpretrain.training.config import ModelSection, RecipeError, load_recipe  # noqa: E402


def _float8(model) -> list[str]:
    return [name for name, m in model.named_modules() if type(m).__name__ == "Float8Linear"]


def test_the_decoder_linears_are_converted_not_the_head():
    model = build_model(load_config("tiny", {}, vocab_size=50304))
    assert convert_to_fp8(model, "fp8", emulate=True) == 14  # 2 layers x (q, k, v, o, gate, up, down)
    names = _float8(model)
    assert len(names) == 14 and all(n.startswith("model.layers.") for n in names)
    assert type(model.lm_head) is nn.Linear
    ids = torch.randint(0, 50304, (2, 16))
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss) and model.model.layers[0].mlp.up_proj.weight.grad is not None


def test_dimensions_not_multiple_of_16_stay_in_bf16():
    model = build_model(load_config("tiny", {"intermediate_size": 200}, vocab_size=50304))
    assert convert_to_fp8(model, "fp8_rowwise", emulate=True) == 8  # attention only: 200 is not a multiple of 16
    assert not any(".mlp." in n for n in _float8(model))
    assert convert_to_fp8(build_model(load_config("tiny", {}, vocab_size=50304)), "bf16") == 0


def test_errors_are_one_line(monkeypatch):
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="compute capability >= 8.9"):
            check_fp8_available("fp8")
    check_fp8_available("fp8", emulate=True)  # emulation runs anywhere
    check_fp8_available("bf16")
    monkeypatch.setitem(sys.modules, "torchao.float8", None)  # as if torchao were not installed
    with pytest.raises(ValueError, match=r"pip install 'hfpretrain\[fp8\]'"):
        check_fp8_available("fp8", emulate=True)
    with pytest.raises(RecipeError, match="model.precision"):
        load_recipe(None, ["data.path=x", "model.precision=fp4"])


def test_a_model_without_nn_linear_is_refused_not_run_in_bf16():
    """GPT-2's layers are transformers' Conv1D: nothing converts, and an fp8 label on a bf16 run is refused."""
    model = build_model(load_config("gpt2_124m", {"n_layer": 1, "n_embd": 64, "n_head": 2, "vocab_size": 512}))
    with pytest.raises(ValueError, match="Conv1D"):
        convert_to_fp8(model, "fp8", emulate=True)


@pytest.mark.parametrize(
    "name,overrides,planning,want",
    [
        ("tiny", {}, False, ("bf16", "hidden size 64 < 2048")),
        ("gpt2_124m", {"vocab_size": 512}, True, ("bf16", "Conv1D")),
        (
            "qwen3_1p8b",
            {"vocab_size": 512},
            True,
            ("fp8", ">= 2048"),
        ),  # a dry run on a login node plans the GPU's choice
    ],
)
def test_auto_precision_by_width(name, overrides, planning, want):
    from types import SimpleNamespace

    from hfpretrain.training.fast_path import choose_precision

    section = SimpleNamespace(precision="auto", fp8_emulate=False)
    precision, reason = choose_precision(section, load_config(name, overrides, vocab_size=512), planning)
    assert precision == want[0] and want[1] in reason
    if not torch.cuda.is_available() and name == "qwen3_1p8b":  # a real run here: no float8 GPU, so bf16
        precision, reason = choose_precision(section, load_config(name, overrides, vocab_size=512))
        assert precision == "bf16" and "compute capability" in reason
    section.precision = "fp8_rowwise"
    if name == "gpt2_124m":  # refused already in the plan (a dry run), not only at conversion
        with pytest.raises(RecipeError, match="Conv1D"):
            choose_precision(section, load_config(name, overrides, vocab_size=512), planning=True)
        return
    assert choose_precision(section, load_config(name, overrides, vocab_size=512)) == (
        "fp8_rowwise",
        "set in the recipe",
    )


def test_fast_accumulation_choices():
    """model.fp8_fast_accum: forward (torchao's recipes), input_grad adds the input gradients' matmuls, all (the
    default) the weight gradients' too; a model trains with each; a misspelt value is refused by name."""
    assert ModelSection().fp8_fast_accum == "all"
    expected = {"forward": (False, False), "input_grad": (True, False), "all": (True, True)}
    for fast_accum, (grad_input, grad_weight) in expected.items():
        model = build_model(load_config("tiny", {}, vocab_size=50304))
        convert_to_fp8(model, "fp8", emulate=True, fast_accum=fast_accum)
        layer = model.model.layers[0].mlp.up_proj
        assert layer.config.gemm_config_output.use_fast_accum
        assert layer.config.gemm_config_grad_input.use_fast_accum == grad_input
        assert layer.config.gemm_config_grad_weight.use_fast_accum == grad_weight
        ids = torch.randint(0, 50304, (2, 16))
        model(input_ids=ids, labels=ids).loss.backward()
        assert layer.weight.grad is not None and torch.isfinite(layer.weight.grad).all()
    with pytest.raises(ValueError, match="model.fp8_fast_accum='backward': one of forward, input_grad, all"):
        convert_to_fp8(build_model(load_config("tiny", {}, vocab_size=512)), "fp8", emulate=True, fast_accum="backward")
