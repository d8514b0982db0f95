"""Multiple-choice scoring through lm-eval's ``HFLM``, including the reference report's rule.

lm-eval's built-in metrics for ARC / OpenBookQA are

* ``acc``      -- argmax of the summed log-probability of `` <choice>`` after the prompt;
* ``acc_norm`` -- argmax of that sum divided by the choice's length in *characters*
  (``len(choice)``; lm-eval's ``acc_bytes`` would divide by UTF-8 bytes).

The reference report instead scored each choice by the **average log-probability per token**
of the answer after ``"Question: X\\nAnswer:"``. lm-eval's ``process_results`` only sees
summed log-likelihoods (no token counts), so that rule is implemented here as a documented
equivalent: the same ``HFLM`` computes the same summed log-likelihoods (one request per
choice, ``context = prompt``, ``continuation = " " + choice``), and the number of continuation
tokens is counted exactly as ``HFLM`` splits context/continuation (whole-string encoding, with
trailing context spaces moved to the continuation).  The resulting metric is
``acc_avg_logprob``; ``acc`` and ``acc_norm`` from the same log-likelihoods are reported too,
and for ARC (whose lm-eval prompt *is* ``"Question: X\\nAnswer:"``) they equal lm-eval's own.

``prompt="reference"`` uses ``"Question: {question}\\nAnswer:"`` for every task (for
OpenBookQA this differs from lm-eval's bare-question-stem prompt); ``prompt="lm_eval"`` uses
the task's own ``doc_to_text``.
"""

from __future__ import annotations

import math
from typing import Iterable

REFERENCE_PROMPT = "Question: {question}\nAnswer:"


def reference_context(doc: dict) -> str:
    question = doc["question"] if "question" in doc else doc["question_stem"]
    return REFERENCE_PROMPT.format(question=question)


def continuation_token_count(lm, context: str, continuation: str) -> int:
    """Tokens of ``continuation`` as HFLM scores them (mirrors ``TemplateLM._encode_pair``)."""
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = lm.tok_encode(context + continuation)
    ctx = lm.tok_encode(context)
    return max(len(whole) - len(ctx), 1)


def _mean_stderr(values: list[float]) -> float:
    n = len(values)
    if n < 2:
        return float("nan")
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return math.sqrt(var / n)


def _argmax(values: list[float]) -> int:
    return max(range(len(values)), key=lambda i: (values[i], -i))  # first max, as np.argmax


def apply_limit(docs, limit):
    docs = list(docs)
    if limit is None:
        return docs
    n = int(math.ceil(len(docs) * limit)) if limit < 1.0 else int(limit)
    return docs[:n]


def score_docs(lm, task, docs: Iterable[dict], prompt: str = "reference") -> dict:
    """Score ``docs`` of an lm-eval multiple-choice ``task`` with ``lm`` (an lm-eval LM, e.g. HFLM).

    Returns ``{"acc", "acc_norm", "acc_avg_logprob", "<metric>_stderr", "n", "prompt"}``.
    """
    from lm_eval.api.instance import Instance

    if prompt not in ("reference", "lm_eval"):
        raise ValueError(f"prompt must be 'reference' or 'lm_eval', not {prompt!r}")
    docs = list(docs)
    delimiter = getattr(task.config, "target_delimiter", " ") or " "
    requests, spans = [], []
    for doc_id, doc in enumerate(docs):
        context = reference_context(doc) if prompt == "reference" else task.doc_to_text(doc)
        choices = task.doc_to_choice(doc)
        gold = task.doc_to_target(doc)
        gold = int(gold) if not isinstance(gold, str) else choices.index(gold)
        start = len(requests)
        for choice in choices:
            requests.append(
                Instance(
                    request_type="loglikelihood",
                    doc=doc,
                    arguments=(context, delimiter + choice),
                    idx=len(requests) - start,
                    metadata=(task.config.task, doc_id, 1),
                )
            )
        spans.append((start, len(requests), gold, choices))
    lls = [r[0] for r in lm.loglikelihood(requests)] if requests else []
    per = {"acc": [], "acc_norm": [], "acc_avg_logprob": []}
    for start, end, gold, choices in spans:
        sums = lls[start:end]
        ntok = [continuation_token_count(lm, *requests[i].arguments) for i in range(start, end)]
        per["acc"].append(float(_argmax(sums) == gold))
        per["acc_norm"].append(float(_argmax([s / len(c) for s, c in zip(sums, choices)]) == gold))
        per["acc_avg_logprob"].append(float(_argmax([s / n for s, n in zip(sums, ntok)]) == gold))
    out: dict = {"n": len(docs), "prompt": prompt}
    for name, values in per.items():
        out[name] = sum(values) / len(values) if values else float("nan")
        out[f"{name}_stderr"] = _mean_stderr(values)
    return out
