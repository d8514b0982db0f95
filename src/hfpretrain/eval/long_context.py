"""Long-context evaluation of a checkpoint: loss by token position on long validation documents, and passkey
retrieval accuracy at several lengths (``hfpretrain long-context``; its JSON is read by the run's report).

**Loss by position.** Each validation block goes through the model once (with the document positions the run
trained with, under ``document_mask``); each target token's loss is binned by its position in its document, the
number of tokens of its own document the model has before it. Only documents that start in a block count: after an
end-of-text inside it, or at its start when the blocks are read in order and the block before ends with one (the
split's first block starts its first document; a first segment after a block that does not end with end-of-text
continues a document whose start is elsewhere, and its positions are not its own). Documents longer than a block
start at a block's start, so without that rule none of them counted. And only tokens of documents of at least
``min_document_tokens`` in the block: "does the loss keep falling out to the new length?" is a question
about long documents. Bins are powers of two, ``[1, 2), [2, 4), ..., [S/2, S)``.

**Passkey retrieval** (Mohtashami & Jaggi 2023, as in the long-context reports of Llama, Qwen and Nemotron): a
5-digit key hidden at a random depth in repeated filler text, followed by "What is the pass key? The pass key is";
a prompt of exactly ``length`` tokens with the key's tokens last. One forward pass per prompt: the answer is right
when the model's most likely next token is the key's at every one of its positions. That is exactly the greedy
decoding of the key (each greedy step sees the same prefix the forced one does), without a generation loop.

**Retrieval on held-out documents**: the passkey prompt is one template, and a model can learn or miss a template
apart from the skill. Documents of ``hfpretrain retrieval-docs`` made from held-out text (its ``--input`` the
validation file: values and haystacks never trained on, but the facts' forms those an extension phase with
retrieval documents trains on) ask for facts at every distance; each answer is scored as the passkey is (every
token of its value the most likely one, in one forward pass per document) and binned by the distance in tokens
from its fact to its answer. Read beside the passkey: retrieval within the trained forms against retrieval across
templates.
"""

from __future__ import annotations

import bisect
import math
import random
from collections import Counter

import numpy as np
import torch

from hfpretrain.data.order import document_positions
from hfpretrain.data.retrieval import asked_facts

DEFAULT_LENGTHS = (2048, 4096, 8192, 16384)
PREFIX = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there."
)
FILLER = " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
QUESTION = " What is the pass key? The pass key is"


def _device(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def token_losses(model, ids: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
    """(rows, S - 1) losses in nats of predicting token t + 1 from the tokens up to t."""
    logits = model(input_ids=ids, position_ids=position_ids, use_cache=False).logits[:, :-1].float()
    return torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")


def position_bins(seq_len: int) -> list[tuple[int, int]]:
    """``[1, 2), [2, 4), ...`` up to ``seq_len``: position 0 (a document's first token) has no context of its own."""
    return [(2**k, min(2 ** (k + 1), seq_len)) for k in range(int(math.ceil(math.log2(seq_len)))) if 2**k < seq_len]


def loss_by_position(
    model, blocks, eos_id: int, document_mask: bool = False, min_document_tokens: int = 0, batch_size: int = 1
) -> dict:
    """Mean loss per position bin over ``blocks`` (an (N, S) array or dataset of input_ids): ``{"bins": [{"from",
    "to", "loss", "tokens"}], "tokens", "documents", "seq_len"}``. See the module notes for what counts."""
    model.eval()
    device = _device(model)

    def row(i):
        return blocks[i]["input_ids"] if isinstance(blocks[i], dict) else blocks[i]

    seq_len = len(row(0))
    bins = position_bins(seq_len)
    sums, counts = np.zeros(len(bins)), np.zeros(len(bins), dtype=np.int64)
    documents = 0
    ends_document = True  # whether the block before this batch ends with end-of-text (the first has none before)
    for start in range(0, len(blocks), batch_size):
        rows = [row(i) for i in range(start, min(start + batch_size, len(blocks)))]
        ids = torch.as_tensor(np.stack(rows).astype(np.int64), device=device)
        positions = document_positions(ids, eos_id)
        losses = token_losses(model, ids, positions if document_mask else None)
        target_pos = positions[:, 1:]  # the predicted token's position in its document
        # the block's first segment starts a document where the block before ends with end-of-text (or there is
        # none); otherwise it may continue one from elsewhere, whose positions are not its own
        starts = torch.zeros_like(ids, dtype=torch.bool)
        starts[:, 1:] = ids[:, :-1] == eos_id
        starts[0, 0] = ends_document
        starts[1:, 0] = ids[:-1, -1] == eos_id
        ends_document = bool(ids[-1, -1] == eos_id)
        own = starts.cumsum(dim=1)[:, 1:] > 0
        # each token's document length inside the block, to keep the long documents only
        doc_index = starts.cumsum(dim=1)
        for r in range(ids.shape[0]):
            lengths = torch.bincount(doc_index[r])
            keep = own[r] & (lengths[doc_index[r, 1:]] >= max(min_document_tokens, 1))
            documents += int((lengths[1:] >= max(min_document_tokens, 1)).sum())
            pos, loss = target_pos[r][keep].cpu().numpy(), losses[r][keep].cpu().numpy()
            for b, (lo, hi) in enumerate(bins):
                inside = (pos >= lo) & (pos < hi)
                sums[b] += loss[inside].sum()
                counts[b] += int(inside.sum())
    rows = [
        {"from": lo, "to": hi, "loss": (sums[b] / counts[b]) if counts[b] else None, "tokens": int(counts[b])}
        for b, (lo, hi) in enumerate(bins)
    ]
    return {
        "seq_len": seq_len,
        "blocks": len(blocks),
        "documents": documents,
        "tokens": int(counts.sum()),
        "min_document_tokens": min_document_tokens,
        "document_mask": document_mask,
        "bins": rows,
    }


def mean_loss(model, blocks, eos_id: int, document_mask: bool = False, batch_size: int = 1) -> dict:
    """The plain validation loss over every target token of ``blocks`` (``{"loss", "tokens"}``): the short-context
    check of an extended model, on the blocks of its training length, against the model before the extension."""
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(blocks), batch_size):
        rows = [blocks[i] for i in range(start, min(start + batch_size, len(blocks)))]
        ids = torch.as_tensor(
            np.stack([r["input_ids"] if isinstance(r, dict) else r for r in rows]).astype(np.int64),
            device=_device(model),
        )
        losses = token_losses(model, ids, document_positions(ids, eos_id) if document_mask else None)
        total, count = total + float(losses.sum()), count + losses.numel()
    return {"loss": total / count, "tokens": count}


def passkey_prompt(tokenizer, length: int, depth: float, key: str) -> tuple[list[int], list[int]]:
    """``(input ids, answer ids)`` of one passkey prompt of exactly ``length`` tokens, the answer's last: the key
    after ``depth`` (0..1) of the filler. ValueError when ``length`` cannot hold the prompt without its filler."""
    enc = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    prefix, question = enc(PREFIX), enc(QUESTION)
    needle = enc(f" The pass key is {key}. Remember it. {key} is the pass key.")
    answer = enc(f" {key}")
    room = length - len(prefix) - len(needle) - len(question) - len(answer)
    if room < 0:
        raise ValueError(
            f"a passkey prompt needs more than {length} tokens with this tokenizer ({length - room} without filler)"
        )
    unit = enc(FILLER)
    filler = (unit * (room // len(unit) + 1))[:room]
    before = int(round(depth * room))
    ids = prefix + filler[:before] + needle + filler[before:] + question + answer
    assert len(ids) == length
    return ids, answer


@torch.no_grad()
def passkey_accuracy(
    model, tokenizer, lengths=DEFAULT_LENGTHS, samples: int = 20, seed: int = 0, batch_size: int = 1
) -> dict:
    """``{str(length): {"accuracy", "samples", "by_depth": {depth: accuracy}, "wrong_answers": {text: count}}}`` over
    ``samples`` prompts per length, the keys random 5-digit numbers and the depths spread evenly over 0..1 (the same
    for every length). A wrong answer is what greedy decoding says: the key's tokens up to the first wrong one, that
    one included (" green": the model went on with the filler; " 71499": it found the key and lost it)."""
    model.eval()
    device = _device(model)
    rng = random.Random(seed)
    depths = [i / max(1, samples - 1) for i in range(samples)]
    out = {}
    for length in lengths:
        prompts = [passkey_prompt(tokenizer, length, d, str(rng.randint(10000, 99999))) for d in depths]
        right, wrong = [], Counter()
        for start in range(0, len(prompts), batch_size):
            chunk = prompts[start : start + batch_size]
            ids = torch.tensor([p[0] for p in chunk], device=device)
            logits = model(input_ids=ids, use_cache=False).logits
            for row, (prompt, answer) in enumerate(chunk):
                k = len(answer)
                guess = logits[row, length - k - 1 : length - 1].argmax(dim=-1).tolist()
                right.append(guess == answer)
                if guess != answer:
                    first = next(i for i, (g, a) in enumerate(zip(guess, answer)) if g != a)
                    wrong[tokenizer.decode(guess[: first + 1])] += 1
        by_depth = {}
        for d, ok in zip(depths, right):
            by_depth.setdefault(round(d, 2), []).append(ok)
        out[str(length)] = {
            "accuracy": sum(right) / len(right),
            "samples": len(right),
            "by_depth": {str(d): sum(v) / len(v) for d, v in by_depth.items()},
            "wrong_answers": dict(wrong.most_common()),
        }
    return out


def distance_bins(longest: int) -> list[tuple[int, int]]:
    """``[0, 1024), [1024, 2048), [2048, 4096), ...`` until one holds ``longest``."""
    bins = [(0, 1024)]
    while bins[-1][1] <= longest:
        bins.append((bins[-1][1], 2 * bins[-1][1]))
    return bins


def tokenized_questions(tokenizer, document: str) -> tuple[list[int], list[list[int]], list[int]]:
    """``(ids, answers, distances)`` of a retrieval document (data/retrieval.py's format) tokenized whole: for each
    question the tokens that spell its answer's value (BPE may join it to the space before it) and the distance in
    tokens from its fact to the answer's first token."""
    asked = asked_facts(document)
    encoded = tokenizer(document, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
    starts = [start for start, _ in offsets]
    answers = [[t for t, (s, e) in enumerate(offsets) if e > lo and s < hi] for _, lo, hi in asked]
    distances = [tokens[0] - (bisect.bisect_right(starts, fact) - 1) for (fact, _, _), tokens in zip(asked, answers)]
    return ids, answers, distances


@torch.no_grad()
def retrieval_accuracy(model, tokenizer, documents: list[str]) -> dict:
    """``{"documents", "questions", "accuracy", "bins": [{"from", "to", "questions", "accuracy"}]}`` over the
    questions of ``documents`` (data/retrieval.py's format, each tokenized whole), binned by the distance in tokens
    from the fact to its answer."""
    model.eval()
    device = _device(model)
    scored = []  # (distance, right)
    for document in documents:
        ids, answers, distances = tokenized_questions(tokenizer, document)
        keep = sorted({t - 1 for tokens in answers for t in tokens})
        logits = model(
            input_ids=torch.tensor([ids], device=device),
            use_cache=False,
            logits_to_keep=torch.tensor(keep, device=device),
        ).logits[0]
        guess = dict(zip(keep, logits.argmax(dim=-1).tolist()))
        for tokens, distance in zip(answers, distances):
            scored.append((distance, all(guess[t - 1] == ids[t] for t in tokens)))
    if not scored:
        raise ValueError("no retrieval documents to score")
    bins = []
    for lo, hi in distance_bins(max(d for d, _ in scored)):
        inside = [right for d, right in scored if lo <= d < hi]
        bins.append(
            {"from": lo, "to": hi, "questions": len(inside), "accuracy": sum(inside) / len(inside) if inside else None}
        )
    return {
        "documents": len(documents),
        "questions": len(scored),
        "accuracy": sum(right for _, right in scored) / len(scored),
        "bins": bins,
    }
