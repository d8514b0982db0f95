"""The chunked loss equals the HF model's own loss (and gradients), with and without
``num_items_in_batch``, whatever the chunk size."""

from __future__ import annotations

import pytest
import torch

from hfpretrain.models import build_model, load_config
from hfpretrain.training.loss import (
    IGNORE_INDEX,
    CausalLMLoss,
    HiddenStateTap,
    LossSpec,
    causal_lm_loss,
    liger_chunk_mem_const,
    loss_chunk_tokens,
    shift_labels,
)

VOCAB = 512


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    config = load_config("tiny", {}, vocab_size=VOCAB)
    model = build_model(config, attn_implementation="sdpa")
    model.train()
    ids = torch.randint(0, VOCAB, (3, 40), generator=torch.Generator().manual_seed(1))
    return model, ids


def _hidden(model, ids):
    return model.model(input_ids=ids, use_cache=False).last_hidden_state


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("chunk", [7, 64, 8192])
def test_chunked_loss_equals_hf_loss(tiny, chunk):
    model, ids = tiny
    model.zero_grad()
    ref = model(input_ids=ids, labels=ids).loss
    ref.backward()
    ref_grads = _grads(model)

    model.zero_grad()
    loss = causal_lm_loss(
        _hidden(model, ids), model.get_output_embeddings().weight, ids, spec=LossSpec("chunked", chunk_tokens=chunk)
    )
    loss.backward()
    torch.testing.assert_close(loss, ref, rtol=1e-6, atol=1e-6)
    grads = _grads(model)
    assert grads.keys() == ref_grads.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.parametrize("as_tensor", [False, True])
def test_num_items_in_batch(tiny, as_tensor):
    """sum / num_items_in_batch, as HF's ForCausalLMLoss: e.g. two micro-batches of an accumulated
    batch each divide by the token count of both."""
    model, ids = tiny
    n = 3 * 39 * 2  # predicted tokens of this batch, counted twice (a 2-micro-batch accumulation)
    num = torch.tensor(n) if as_tensor else n
    model.zero_grad()
    ref = model(input_ids=ids, labels=ids, num_items_in_batch=num).loss
    ref.backward()
    ref_grads = _grads(model)

    model.zero_grad()
    loss = causal_lm_loss(
        _hidden(model, ids),
        model.get_output_embeddings().weight,
        ids,
        num_items_in_batch=num,
        spec=LossSpec("chunked", chunk_tokens=50),
    )
    loss.backward()
    torch.testing.assert_close(loss, ref, rtol=1e-6, atol=1e-6)
    mean = causal_lm_loss(_hidden(model, ids), model.get_output_embeddings().weight, ids)
    torch.testing.assert_close(loss, mean / 2, rtol=1e-6, atol=1e-6)
    for name, g in _grads(model).items():
        torch.testing.assert_close(g, ref_grads[name], rtol=1e-5, atol=1e-7, msg=name)


def test_ignored_labels(tiny):
    model, ids = tiny
    labels = ids.clone()
    labels[0, 10:] = IGNORE_INDEX
    labels[2, :5] = IGNORE_INDEX
    ref = model(input_ids=ids, labels=labels).loss
    loss = causal_lm_loss(
        _hidden(model, ids), model.get_output_embeddings().weight, labels, spec=LossSpec("chunked", chunk_tokens=16)
    )
    torch.testing.assert_close(loss, ref, rtol=1e-6, atol=1e-6)


def test_shift_labels():
    labels = torch.tensor([[1, 2, 3, 4]])
    assert shift_labels(labels).tolist() == [[2, 3, 4, IGNORE_INDEX]]


def test_shifted_labels_in_two_halves_sum_to_the_whole_sequence_loss(tiny):
    """Context parallelism hands each rank a part of the sequence with the Trainer's shifted labels (``shifted``):
    the two halves' sums over the whole sequence's token count add up to the one-process loss, where shifting each
    half again would drop the token at the cut and misalign the rest."""
    model, ids = tiny
    hidden, weight = _hidden(model, ids), model.get_output_embeddings().weight
    whole = causal_lm_loss(hidden, weight, ids)
    targets, count = shift_labels(ids), (shift_labels(ids) != IGNORE_INDEX).sum()
    halves = sum(
        causal_lm_loss(hidden[:, part], weight, targets[:, part], num_items_in_batch=count, shifted=True)
        for part in (slice(0, 17), slice(17, None))
    )
    torch.testing.assert_close(halves, whole, rtol=1e-6, atol=1e-6)
    unshifted = sum(
        causal_lm_loss(hidden[:, part], weight, ids[:, part], num_items_in_batch=count)
        for part in (slice(0, 17), slice(17, None))
    )
    assert not torch.allclose(unshifted, whole, atol=1e-3)


def test_hidden_state_tap_gives_the_final_hidden_states(tiny):
    """The trainer's pre-hook on the LM head hands over the final (normed) hidden states and
    computes no logits; the loss from them equals HF's."""
    model, ids = tiny
    with torch.no_grad():
        ref = model(input_ids=ids, labels=ids).loss
        tap = HiddenStateTap(model.get_output_embeddings())
        tap.active = True
        try:
            out = model(input_ids=ids, use_cache=False)
        finally:
            tap.active = False
        assert out.logits.shape[1] == 0  # the head saw an empty sequence
        hidden = tap.hidden
        assert hidden.shape == (3, 40, 64)
        torch.testing.assert_close(hidden, _hidden(model, ids))
        loss = causal_lm_loss(hidden, model.get_output_embeddings().weight, ids)
        torch.testing.assert_close(loss, ref, rtol=1e-6, atol=1e-6)
        # inactive: the model is untouched
        assert model(input_ids=ids).logits.shape == (3, 40, VOCAB)


def _liger_chunk(tokens, vocab, hidden, mem_const):
    """liger-kernel 0.8.5's own chunk size, as written there (liger_kernel/ops/fused_linear_cross_entropy.py)."""
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    inc_factor = cdiv(vocab, mem_const * hidden)
    next_power_of_2 = 1 << (cdiv(tokens, inc_factor) - 1).bit_length()
    return min(next_power_of_2, tokens)


@pytest.mark.parametrize(
    "tokens,hidden,floor",
    [
        (16384, 320, 0),
        (16384, 320, 1024),
        (16384, 320, 4096),
        (40960, 2048, 1024),
        (65536, 896, 1024),
        (2048, 64, 8192),
    ],
)
def test_liger_chunks_at_least_the_floor(tokens, hidden, floor):
    """A small model with a large vocabulary gets 64-token chunks from liger by default (256 kernel
    rounds per step): the floor raises liger's chunk_mem_const, to the smallest value that reaches it."""
    vocab = 151680
    mem_const = liger_chunk_mem_const(tokens, vocab, hidden, floor)
    chunk = _liger_chunk(tokens, vocab, hidden, mem_const)
    assert chunk == loss_chunk_tokens("liger", tokens, vocab, hidden, 8192, floor)  # what the memory plan uses
    assert chunk >= min(floor, tokens)
    assert mem_const == 1 or _liger_chunk(tokens, vocab, hidden, mem_const - 1) < floor
    if (tokens, hidden) == (40960, 2048):  # the 1.8B recipe at micro-batch 20: liger's own 1024, unchanged
        assert mem_const == 1 and chunk == 1024


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_loss_equals_hf_loss(tiny, backend):
    """fused_loss=compiled: the LM head and cross-entropy as one compiled function, same value and
    gradients as HF's loss (ignored labels included)."""
    model, ids = tiny
    labels = ids.clone()
    labels[0, 5:9] = IGNORE_INDEX
    model.zero_grad()
    ref = model(input_ids=ids, labels=labels).loss
    ref.backward()
    ref_grads = _grads(model)

    model.zero_grad()
    torch._dynamo.reset()
    loss = causal_lm_loss(
        _hidden(model, ids),
        model.get_output_embeddings().weight,
        labels,
        spec=LossSpec("compiled", compile_backend=backend),
    )
    loss.backward()
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-5)
    for name, grad in _grads(model).items():
        torch.testing.assert_close(grad, ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    torch._dynamo.reset()


def test_auto_loss_by_logits_size():
    """auto: head + loss compiled whole while a micro-batch's logits are at most 1/5 of the GPU,
    liger (or chunked without it) above; chunked on a CPU."""
    from hfpretrain.training import loss as loss_mod

    h200 = 141 * 10**9
    gpt2 = 32 * 1024 * 50304 * 2  # GPT-2 124M, micro-batch 32 x 1024: 3.3 GB
    assert loss_mod.choose_fused_loss("auto", gpt2, h200)[0] == "compiled"
    qwen_32k = 32768 * 151680 * 2  # 9.9 GB: measured faster compiled than liger on an H200
    assert loss_mod.choose_fused_loss("auto", qwen_32k, h200)[0] == "compiled"
    gpt2_folded = 128 * 1024 * 50304 * 2  # GPT-2 124M folded to 128 x 1024: 13.2 GB, whole on an 80 GB GPU too
    assert loss_mod.choose_fused_loss("auto", gpt2_folded, 80 * 10**9)[0] == "compiled"
    big = 131072 * 151680 * 2  # 64 x 2048 tokens of Qwen3's vocabulary: 39.8 GB
    assert loss_mod.choose_fused_loss("auto", big, h200)[0] in ("liger", "chunked")
    assert loss_mod.choose_fused_loss("compiled", big, h200)[0] == "compiled"  # asked for: kept
    if not torch.cuda.is_available():
        assert loss_mod.choose_fused_loss("auto", gpt2)[0] == "chunked"


@pytest.mark.parametrize("impl,chunk", [("chunked", 7), ("chunked", 8192), ("compiled", 8192)])
def test_z_loss_matches_its_definition(tiny, impl, chunk):
    """loss.z_loss: value and gradients equal cross-entropy + z * logsumexp(logits)^2 per predicted token, written
    out with autograd on the full logits (the chunked path's hand-written gradient included). The run's loss object
    adds it in training only: an evaluation reports the cross-entropy."""
    model, ids = tiny
    labels = ids.clone()
    labels[1, 3:11] = IGNORE_INDEX
    z = 0.05  # large, so that a wrong gradient term shows
    model.zero_grad()
    logits = model(input_ids=ids).logits.float()
    targets = shift_labels(labels)
    keep = targets != IGNORE_INDEX
    ce = torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX, reduction="sum"
    )
    ref = (ce + z * (torch.logsumexp(logits, dim=-1).square() * keep).sum()) / keep.sum()
    ref.backward()
    ref_grads = _grads(model)

    model.zero_grad()
    torch._dynamo.reset()
    spec = LossSpec(impl, chunk_tokens=chunk, compile_backend="aot_eager", z_loss=z)
    loss = causal_lm_loss(_hidden(model, ids), model.get_output_embeddings().weight, labels, spec=spec)
    loss.backward()
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-5)
    hidden, weight = _hidden(model, ids).detach(), model.get_output_embeddings().weight.detach()
    without = causal_lm_loss(
        hidden, weight, labels, spec=LossSpec(impl, chunk_tokens=chunk, compile_backend="aot_eager")
    )
    assert loss.item() > without.item()  # the term is there
    run_loss = CausalLMLoss(spec)
    torch.testing.assert_close(run_loss(hidden, weight, labels, training=True), loss.detach(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(run_loss(hidden, weight, labels, training=False), without, rtol=1e-6, atol=1e-6)
    for name, grad in _grads(model).items():
        torch.testing.assert_close(grad, ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    torch._dynamo.reset()


def test_z_loss_recipe_checks(mini_blocks, tmp_path):
    from hfpretrain.training import RecipeError, pretrain

    from train_utils import TINY_RECIPE

    base = [f"data.path={mini_blocks}", f"training.output_dir={tmp_path / 'run'}", "loss.z_loss=1e-4"]
    plan = pretrain(TINY_RECIPE, base, dry_run=True)["recipe"]
    assert plan["loss"]["z_loss"] == 1e-4
    with pytest.raises(RecipeError, match="loss.z_loss needs the project's loss"):
        pretrain(TINY_RECIPE, [*base, "loss.implementation=none"], dry_run=True)
    with pytest.raises(RecipeError, match="must be >= 0"):
        pretrain(TINY_RECIPE, [*base, "loss.z_loss=-1"], dry_run=True)


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("write_grad", [True, False])
def test_fused_head_loss_equals_hf_loss(autocast, write_grad):
    """loss._HeadCrossEntropy (a GPU's path for fused_loss=compiled, kernels.fused_head): value and both gradients
    equal the plain head + cross-entropy, scaled by the incoming gradient; under bf16 autocast the matmuls are bf16.
    Without write_grad (evaluation) the same loss."""
    import torch.nn.functional as F

    from hfpretrain.kernels.cross_entropy import IGNORE_INDEX
    from hfpretrain.training.loss import _HeadCrossEntropy

    torch.manual_seed(0)
    hidden, weight = torch.randn(40, 16, requires_grad=True), torch.randn(96, 16, requires_grad=True)
    targets = torch.randint(0, 96, (40,))
    targets[:3] = IGNORE_INDEX
    h2, w2 = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        total = _HeadCrossEntropy.apply(hidden, weight, targets, 1e-3, None, write_grad)
        logits = (h2 @ w2.T).float()
    ref = (
        F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="sum")
        + 1e-3 * (torch.logsumexp(logits, -1).square() * (targets != IGNORE_INDEX)).sum()
    )
    tol = {"rtol": 2e-2, "atol": 2e-2} if autocast else {}
    torch.testing.assert_close(total, ref, **tol)
    if write_grad:
        (total / 37).backward()
        (ref / 37).backward()
        torch.testing.assert_close(hidden.grad, h2.grad, **tol)
        torch.testing.assert_close(weight.grad, w2.grad, **tol)
        assert hidden.grad.dtype == weight.grad.dtype == torch.float32


@pytest.mark.parametrize("autocast", [False, True])
def test_training_loss_through_the_fused_head_equals_the_compiled_one(monkeypatch, autocast):
    """causal_lm_loss with fused_loss=compiled takes _HeadCrossEntropy on a GPU with kernels.fused_head (forced
    here on a CPU): on a tied GPT-2 with ignored labels, num_items_in_batch and a z-loss, the loss and every
    parameter's gradient equal the compiled path's (kernels.fused_head=false)."""
    from hfpretrain.kernels.cross_entropy import IGNORE_INDEX
    from hfpretrain.training import loss as L

    monkeypatch.setattr(L, "uses_triton", lambda tensor: True)
    torch.manual_seed(0)
    config = load_config("gpt2_124m", {"n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 512}, vocab_size=512)
    models = [build_model(config, attn_implementation="sdpa") for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    assert models[0].lm_head.weight is models[0].transformer.wte.weight
    ids = torch.randint(0, 512, (2, 16))
    labels = ids.clone()
    labels[0, :5] = IGNORE_INDEX
    results = []
    for model, fused in zip(models, (True, False)):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            hidden = model.transformer(input_ids=ids).last_hidden_state
            loss = L.causal_lm_loss(
                hidden,
                model.lm_head.weight,
                labels,
                num_items_in_batch=torch.tensor(20),
                spec=L.LossSpec("compiled", compile_backend="eager", z_loss=1e-3, fused_head=fused),
            )
        loss.backward()
        results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (fused_loss, fused_grads), (ref_loss, ref_grads) = results
    tol = {"rtol": 2e-2, "atol": 2e-3} if autocast else {}
    torch.testing.assert_close(fused_loss, ref_loss, **tol)
    for name, grad in ref_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, **tol, msg=name)
