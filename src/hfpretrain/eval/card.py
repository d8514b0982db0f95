"""The parts of a model card (``final/README.md``, written by ``hfpretrain.training.model_card``, which also makes
the two sections) that change after training: the load lines, which name where the model is (the run's ``final/``, an export folder, a Hub repo id),
and the lm-eval scores, which ``hfpretrain eval`` computes later. Each sits between two HTML comments, invisible
on the Hub and on GitHub, so that evaluation and export rewrite it in place and leave the rest as written.
"""

from __future__ import annotations

import re
from pathlib import Path

from hfpretrain.training.model_card import scores_section, use_section


def _replace(card: str, section: str) -> str:
    name = re.match(r"<!-- hfpretrain:(\w+) -->", section).group(1)
    pattern = re.compile(rf"<!-- hfpretrain:{name} -->\n.*?\n<!-- /hfpretrain:{name} -->", re.S)
    return pattern.sub(lambda _: section, card, count=1)


def has_sections(card: str) -> bool:
    return "<!-- hfpretrain:use -->" in card and "<!-- hfpretrain:scores -->" in card


def refresh_card(card: str, path) -> str:
    """``card`` loading the model from ``path`` (a folder or a Hub repo id); its scores as they are. A card written
    before these sections existed gets its old path replaced."""
    if not has_sections(card):
        old = re.search(r'pipeline\("text-generation", model="([^"]+)"\)', card)
        for form in ('model="{}"', "pretrained={} ", "evaluate.py {}`") if old else ():  # its three mentions
            card = card.replace(form.format(old.group(1)), form.format(path))
        return card
    card = _replace(card, use_section(path))
    if "Not scored yet:" in card:  # the placeholder names the path too
        card = _replace(card, scores_section(path))
    return card


def set_metadata(card: str, license: str | None = None, datasets: list[str] | None = None) -> str:
    """``card`` with ``license`` and ``datasets`` in its YAML header (``huggingface_hub.ModelCard``: the Hub reads
    them for its filters and the dataset links); a card without a header gets one."""
    from huggingface_hub import ModelCard

    parsed = ModelCard(card, ignore_metadata_errors=True)
    if license:
        parsed.data.license = license
    if datasets:
        parsed.data.datasets = list(datasets)
    return str(parsed)


def update_scores(checkpoint, summary: str) -> Path | None:
    """Put ``summary`` into ``checkpoint``'s model card, if it has one of ours; returns the card's path."""
    card = Path(checkpoint) / "README.md"
    if not card.is_file() or not has_sections(text := card.read_text()):
        return None
    card.write_text(_replace(text, scores_section(checkpoint, summary)))
    return card
