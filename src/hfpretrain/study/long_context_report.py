"""The long-context section of a run's report: the loss by position and the passkey accuracy that
``hfpretrain long-context`` wrote into the checkpoint's ``long_context.json``, as tables and one plot."""

from __future__ import annotations

import json
import math
from pathlib import Path

from hfpretrain.study.plots import _save

FILE = "long_context.json"


def _fmt(x, spec: str = ".4f") -> str:
    return "-" if x is None else f"{x:{spec}}"


def summary_lines(result: dict) -> list[str]:
    """Markdown tables of a long_context.json."""
    lines = []
    positions = result.get("loss_by_position")
    if positions:
        lines += [
            f"Loss by position in the document ({positions['tokens']:,} tokens of {positions['documents']} "
            f"documents in {positions['blocks']} validation blocks of {positions['seq_len']:,}"
            + (
                f", documents of at least {positions['min_document_tokens']:,} tokens"
                if positions["min_document_tokens"]
                else ""
            )
            + "):",
            "",
            "| positions | loss (nats) | tokens |",
            "|---|---|---|",
        ]
        lines += [f"| {b['from']:,}-{b['to'] - 1:,} | {_fmt(b['loss'])} | {b['tokens']:,} |" for b in positions["bins"]]
        lines.append("")
    short = result.get("short_context")
    if short:
        bpb = "" if short["bpb"] is None else f", {short['bpb']:.4f} bits per byte"
        lines += [
            f"Short context: validation loss {short['loss']:.4f} nats{bpb} over {short['tokens']:,} tokens "
            f"({short['blocks']} blocks of {short['seq_len']:,}).",
            "",
        ]
    passkey = result.get("passkey")
    if passkey:
        lines += [
            "Passkey retrieval (a 5-digit key at depths spread over the prompt; exact greedy answer; a key in "
            "the prompt's first half is more than half its length from the question):",
            "",
            "| length | accuracy | 95% interval | key in the first half | in the second half | prompts | "
            "most said instead |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {int(n):,} | {v['accuracy']:.0%} | {_interval(v['accuracy'], v['samples'])} | "
            f"{' | '.join(_halves(v.get('by_depth')))} | {v['samples']} | {_said(v.get('wrong_answers'))} |"
            for n, v in passkey.items()
        ]
        lines.append("")
    retrieval = result.get("retrieval")
    if retrieval:
        lines += [
            f"Retrieval on held-out documents ({retrieval['questions']:,} questions in {retrieval['documents']} "
            f"documents; exact greedy answer): {retrieval['accuracy']:.0%}, by the distance from fact to answer:",
            "",
            "| distance (tokens) | accuracy | questions |",
            "|---|---|---|",
        ]
        lines += [
            f"| {b['from']:,}-{b['to'] - 1:,} | {_fmt(b['accuracy'], '.0%')} | {b['questions']} |"
            for b in retrieval["bins"]
        ]
        lines.append("")
    return lines


def _interval(accuracy: float, samples: int, z: float = 1.96) -> str:
    """Wilson's 95% interval for an accuracy over ``samples`` prompts: what the prompts' draw alone leaves open
    (50 prompts at 96%: 87-99%), so that two runs' accuracies are compared with their noise in view."""
    if not samples:
        return "-"
    centre = (accuracy + z * z / (2 * samples)) / (1 + z * z / samples)
    half = z / (1 + z * z / samples) * math.sqrt(accuracy * (1 - accuracy) / samples + z * z / (4 * samples**2))
    low, high = max(0.0, centre - half), min(1.0, centre + half)
    return f"{100 * low:.0f}-{100 * high:.0f}%"


def _halves(by_depth: dict | None) -> tuple[str, str]:
    """The accuracy with the key in the prompt's first half (far from the question) and in its second half: where
    a model that fails at a length fails (each depth weighs the same)."""
    halves = ([], [])
    for depth, accuracy in (by_depth or {}).items():
        halves[float(depth) >= 0.5].append(accuracy)
    return tuple(_fmt(sum(h) / len(h) if h else None, ".0%") for h in halves)


def _said(wrong: dict | None) -> str:
    """The most common wrong answers, quoted (a result written before they were recorded: "")."""
    return ", ".join(f"`{text!r}` x{n}".replace("|", "\\|") for text, n in list((wrong or {}).items())[:2])


def plot_long_context(result: dict, out_png: str | Path, title: str = "") -> Path:
    """Loss against position (log x) beside passkey accuracy against length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    bins = [b for b in (result.get("loss_by_position") or {}).get("bins", []) if b["loss"] is not None]
    if bins:
        left.plot([(b["from"] * (b["to"] - 1)) ** 0.5 for b in bins], [b["loss"] for b in bins], "o-")
        left.set_xscale("log", base=2)
    left.set_xlabel("position in the document (tokens)")
    left.set_ylabel("validation loss (nats)")
    left.set_title("loss by position")
    left.grid(alpha=0.3, which="both")
    passkey = result.get("passkey") or {}
    if passkey:
        right.plot([int(n) for n in passkey], [v["accuracy"] for v in passkey.values()], "s-")
        right.set_xscale("log", base=2)
    right.set_ylim(-0.05, 1.05)
    right.set_xlabel("prompt length (tokens)")
    right.set_ylabel("passkey accuracy")
    right.set_title("passkey retrieval")
    right.grid(alpha=0.3, which="both")
    if title:
        fig.suptitle(title)
    return _save(fig, out_png)


def long_context_lines(checkpoint: Path, out_dir: Path) -> list[str]:
    """The report's section, when the checkpoint was evaluated (``hfpretrain long-context`` writes final/'s file,
    ``evaluation.long_context_*`` the run folder's at the end of training); else none."""
    found = [p / FILE for p in (Path(checkpoint), Path(checkpoint).parent) if (p / FILE).is_file()]
    if not found:
        return []
    path = found[0]
    try:
        result = json.loads(path.read_text())
    except ValueError:
        raise ValueError(f"{path}: not JSON (run hfpretrain long-context again)") from None
    png = plot_long_context(result, Path(out_dir) / "long_context.png", title=Path(checkpoint).parent.name)
    return ["## Long context", "", f"![loss by position and passkey accuracy]({png.name})", "", *summary_lines(result)]
