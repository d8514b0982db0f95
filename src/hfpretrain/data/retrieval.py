"""Synthetic retrieval documents for a context-extension phase: corpus text with a few made-up facts hidden at
random depths, each asked for at the end of the document.

A small model trained on a few hundred million tokens retrieves almost nothing from far back, even inside its
training length (best_small: passkey 0-10% at 1k, docs/benchmarks.md § Long context), and corpus text seldom
makes it try: an extension phase on long documents alone teaches it to use long context for the next word, not to
look a fact up.
A share of the extension's blocks made of these documents asks for exactly that on every document, as Xiong et al.
(2024, "From Artificial Needles to Real Haystacks") do with synthetic key-value retrieval. The facts are worded
unlike the passkey evaluation's prompt (eval/long_context.py: no "pass key", and of its filler's words only
"green", in some names), so that the evaluation measures retrieval learnt, not a template learnt.

Two things make a lookup hard at a distance, and a document can have both. Look-alike facts: many facts of the same
three forms, about names of one two-word shape, so that the answer needs the whole cue, not its last word (Xiong
et al. ask for one key of a dictionary of many). A repetitive haystack (``repeat_share``): a few of the corpus's
sentences said again and again, as in logs, forms or RULER's noise haystack, where thousands of tokens look alike
and attention spread over them finds nothing; in corpus text the cue's words are rare, and a lookup learnt there
fails among look-alikes as the context grows. Statement haystacks (``statement_share``): a few made-up statements of
the passkey filler's form (``The lake is cold.``, none of its nouns or adjectives) said again and again, where the
last words of a question (``... is``) alone point at thousands of wrong answers. Far facts (``early_share``): at
uniform depths a fact is nearly a document's length from its question only in the longest documents, so a share of
the facts goes in the haystack's first quarter. What each did on best_small's 16k phase (the repetitive and
statement haystacks took passkey at 16k from 5% to 64%, longer documents with more facts to 76-94% in four runs
(YaRN factor 16), early facts nothing more) is in docs/training.md § Long context, the tables in docs/benchmarks.md.

``hfpretrain retrieval-docs`` writes them as Pile-format jsonl.zst, which ``hfpretrain tokenize`` packs (``--pack
whole`` at the phase's length) into a source for ``data.sources`` / ``data.mixture`` (recipes/best_small_16k.yaml).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Iterable, Iterator
from itertools import islice

KINDS = (
    "secret number",
    "access code",
    "room number",
    "serial number",
    "account number",
    "ticket number",
    "lucky number",
    "order number",
    "locker code",
    "badge number",
    "flight number",
    "invoice number",
)
ADJECTIVES = (
    "red",
    "quiet",
    "golden",
    "old",
    "hidden",
    "northern",
    "silver",
    "tiny",
    "brave",
    "frozen",
    "green",
    "ancient",
    "lazy",
    "bright",
    "wooden",
    "distant",
    "hollow",
    "eager",
    "crimson",
    "gentle",
)
NOUNS = (
    "otter",
    "lighthouse",
    "river",
    "falcon",
    "bakery",
    "comet",
    "garden",
    "harbor",
    "violin",
    "glacier",
    "orchard",
    "tunnel",
    "meadow",
    "castle",
    "badger",
    "canyon",
    "lantern",
    "island",
    "forest",
    "engine",
)
MAX_FACTS = len(ADJECTIVES) * len(NOUNS)  # each fact of a document is about another name
# (fact, question): the cue (kind and name) always comes before the value, as in any lookup by name
FORMS = (
    ("The {kind} of the {name} is {value}.", "What is the {kind} of the {name}? The {kind} of the {name} is {value}."),
    ("Note that the {name} has {kind} {value}.", "Which {kind} does the {name} have? The {name} has {kind} {value}."),
    ("Keep in mind: {kind} for the {name}, {value}.", "Question: the {kind} for the {name}? Answer: {value}."),
)


def _question_pattern(template: str) -> re.Pattern:
    """A question form as a regex: the kind and name as words, the value as digits (a field said twice, the same)."""
    seen = set()

    def field(m):
        name = m.group(1)
        if name in seen:
            return f"(?P={name})"
        seen.add(name)
        return rf"(?P<{name}>\d+)" if name == "value" else rf"(?P<{name}>[a-z ]+?)"

    return re.compile("^" + re.sub(r"\\\{(\w+)\\\}", field, re.escape(template)) + "$")


QUESTION_PATTERNS = tuple(_question_pattern(question) for _, question in FORMS)


def make_facts(rng: random.Random, n: int) -> list[tuple[str, str]]:
    """``n`` (fact, question-with-answer) pairs about distinct names, values of 4 to 7 digits."""
    names = rng.sample([f"{a} {b}" for a in ADJECTIVES for b in NOUNS], n)
    out = []
    for name in names:
        fact, question = rng.choice(FORMS)
        fields = {"kind": rng.choice(KINDS), "name": name, "value": str(rng.randint(1000, 9_999_999))}
        out.append((fact.format(**fields), question.format(**fields)))
    return out


def _cut_at_space(text: str, at: int) -> int:
    """The first space at or after ``at`` (the text's end if none): facts go between words."""
    space = text.find(" ", at)
    return len(text) if space < 0 else space


def retrieval_document(
    rng: random.Random, haystack: str, facts: list[tuple[str, str]], early_share: float = 0.0
) -> str:
    """``haystack`` with each fact inserted at a random depth (between words), an ``early_share`` of them in its
    first quarter (up to the next space), then every question in a random order, each followed by its answer."""

    def depth() -> int:
        # drawn only when a share is set: a seed's documents without it are those made before it existed
        if early_share and rng.random() < early_share:
            return rng.randrange(len(haystack) // 4 + 1)
        return rng.randrange(len(haystack) + 1)

    cuts = sorted(_cut_at_space(haystack, depth()) for _ in facts)
    parts, start = [], 0
    for cut, (fact, _) in zip(cuts, facts):
        parts += [haystack[start:cut], f" {fact}"]
        start = cut
    parts.append(haystack[start:])
    questions = [q for _, q in facts]
    rng.shuffle(questions)
    return "".join(parts).rstrip() + "\n\n" + "\n".join(questions)


def asked_facts(document: str) -> list[tuple[int, int, int]]:
    """``(fact, answer_start, answer_end)`` for each question at the end of a retrieval document of this module:
    the character offsets of its fact in the body and of the value its answer gives. ValueError for a document
    of another format."""
    split = document.rfind("\n\n")
    if split < 0:
        raise ValueError("no questions after a blank line: not a retrieval document")
    out, at = [], split + 2
    for line in document[at:].split("\n"):
        match = next((m for pattern in QUESTION_PATTERNS if (m := pattern.match(line))), None)
        if match is None:
            raise ValueError(f"{line[:80]!r} is not a question of a retrieval document")
        fields = {key: match[key] for key in ("kind", "name", "value")}
        found = [document.find(" " + fact.format(**fields), 0, split) for fact, _ in FORMS]
        if max(found) < 0:
            raise ValueError(f"{line[:80]!r} asks for a fact the document does not state")
        out.append((max(found) + 1, at + match.start("value"), at + match.end("value")))
        at += len(line) + 1
    return out


SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# Statements of the passkey filler's form ("The grass is green."), none of its nouns or adjectives: a haystack of
# them said again and again is one where the last words of a question ("... is") point at thousands of wrong answers
SUBJECTS = (
    "wall",
    "road",
    "lake",
    "bread",
    "door",
    "cloud",
    "stone",
    "rope",
    "soup",
    "chair",
    "floor",
    "window",
    "coat",
    "field",
    "shell",
    "bell",
    "hill",
    "milk",
    "wind",
    "sand",
)
QUALITIES = (
    "warm",
    "wet",
    "long",
    "soft",
    "open",
    "dark",
    "round",
    "heavy",
    "sweet",
    "loud",
    "empty",
    "narrow",
    "cold",
    "smooth",
    "tall",
    "clean",
    "white",
    "sharp",
    "slow",
    "deep",
)


def _said_again(unit: str, count_tokens, room: int) -> str:
    """``unit`` repeated to about ``room`` tokens (once at least)."""
    return " ".join([unit] * max(1, room // count_tokens([" " + unit])[0]))


def repeated_haystack(rng: random.Random, source: Iterator[tuple[str, int]], count_tokens, room: int) -> str:
    """About ``room`` tokens of one to four sentences of one text from ``source`` (the first with two sentences of
    4 to 30 words), said again and again: at least four times where ``room`` allows."""
    for _ in range(1000):
        text, _ = next(source)
        # whole sentences: the text's last piece may stop mid-sentence
        sentences = [" ".join(s.split()) for s in SENTENCE_END.split(text)[:-1] if 4 <= len(s.split()) <= 30]
        if len(sentences) >= 2:
            break
    else:
        raise ValueError("1,000 texts in a row have fewer than two sentences of 4 to 30 words to repeat")
    unit = rng.sample(sentences, min(len(sentences), rng.randint(2, 4)))
    while len(unit) > 1 and count_tokens([" " + " ".join(unit)])[0] > room // 4:
        unit.pop()
    return _said_again(" ".join(unit), count_tokens, room)


def statement_haystack(rng: random.Random, count_tokens, room: int) -> str:
    """About ``room`` tokens of two to five statements "The <subject> is <quality>.", said again and again."""
    k = rng.randint(2, 5)
    unit = " ".join(f"The {s} is {q}." for s, q in zip(rng.sample(SUBJECTS, k), rng.sample(QUALITIES, k)))
    return _said_again(unit, count_tokens, room)


def retrieval_documents(
    texts: Iterable[str],
    count_tokens: Callable[[list[str]], list[int]],
    documents: int,
    min_tokens: int,
    max_tokens: int,
    max_facts: int = 4,
    seed: int = 0,
    min_facts: int = 1,
    repeat_share: float = 0.0,
    statement_share: float = 0.0,
    early_share: float = 0.0,
) -> Iterator[str]:
    """``documents`` retrieval documents of ``min_tokens`` to ``max_tokens`` tokens (log-uniform; as
    ``count_tokens`` counts a list of texts, never more than ``max_tokens``), each with ``min_facts`` to
    ``max_facts`` facts, an ``early_share`` of them in the haystack's first quarter (the farthest from their
    questions; the rest anywhere). Their haystacks are cut from ``texts`` in order (joined by blank lines; read again
    from the start when they run out), or, for a ``repeat_share`` of the documents, a few sentences of one text
    repeated, and for a ``statement_share``, a few made-up statements repeated."""
    if not 0 < min_tokens <= max_tokens:
        raise ValueError(f"min_tokens={min_tokens}, max_tokens={max_tokens}: need 0 < min_tokens <= max_tokens")
    if not 0 < min_facts <= max_facts <= MAX_FACTS:
        raise ValueError(
            f"min_facts={min_facts}, max_facts={max_facts}: need 0 < min_facts <= max_facts <= {MAX_FACTS}"
        )
    if not (0 <= repeat_share and 0 <= statement_share and repeat_share + statement_share <= 1):
        raise ValueError(
            f"repeat_share={repeat_share}, statement_share={statement_share}: shares of the documents, "
            "at least 0 and at most 1 together"
        )
    if not 0 <= early_share <= 1:
        raise ValueError(f"early_share={early_share}: a share of the facts, 0 to 1")
    rng = random.Random(seed)
    source = _measured(texts, count_tokens)
    pending = None  # (text, tokens) left of a text the previous document cut
    made = misses = 0
    while made < documents:
        if misses == 100:
            raise ValueError(f"100 documents in a row came out longer than max_tokens={max_tokens}: raise it")
        facts = make_facts(rng, rng.randint(min_facts, max_facts))
        target = round(math.exp(rng.uniform(math.log(min_tokens), math.log(max_tokens))))
        room = target - sum(count_tokens([f" {fact}" for fact, _ in facts] + [q for _, q in facts])) - 2
        # drawn only when a share is set: a seed's documents without shares are those made before shares existed
        draw = rng.random() if repeat_share or statement_share else 1.0
        if draw < statement_share:
            haystack = statement_haystack(rng, count_tokens, room)
        elif draw < statement_share + repeat_share:
            haystack = repeated_haystack(rng, source, count_tokens, room)
        else:
            pieces, have = [], 0
            while have < room:
                text, n = pending or next(source)
                pending = None
                if have + n > room:  # cut near the room left, the rest's tokens pro rata (counted again below)
                    cut = _cut_at_space(text, int(len(text) * (room - have) / n))
                    rest = text[cut:].lstrip()
                    if rest:
                        pending = (rest, max(1, round(n * len(rest) / len(text))))
                    text, n = text[:cut], n - (pending[1] if pending else 0)
                pieces.append(text)
                have += n
            haystack = "\n\n".join(pieces)
        document = retrieval_document(rng, haystack, facts, early_share)
        if count_tokens([document])[0] > max_tokens:  # a cut kept a few tokens too many: draw again
            misses += 1
            continue
        made, misses = made + 1, 0
        yield document


def made_by(path) -> list[str] | None:
    """The ``hfpretrain retrieval-docs`` arguments that wrote the Pile-format file ``path`` (its first row's
    ``meta.made_by``); None for a file it did not write, or one that is not on this machine."""
    import json

    import zstandard

    try:
        with (zstandard.open if str(path).endswith(".zst") else open)(path, "rt", encoding="utf-8") as f:
            row = json.loads(f.readline())
    except (OSError, ValueError, zstandard.ZstdError):
        return None
    meta = row.get("meta") if isinstance(row, dict) else None
    made = meta.get("made_by") if isinstance(meta, dict) else None  # other corpora's meta may be anything
    return made if isinstance(made, list) and all(isinstance(arg, str) for arg in made) else None


def _measured(texts: Iterable[str], count_tokens, batch: int = 256) -> Iterator[tuple[str, int]]:
    """``(text, tokens)`` of the non-empty ``texts``, counted a batch at a time (a fast tokenizer's threads), then
    again from the start, for ever."""
    texts, kept = (text for text in texts if text), []
    while chunk := list(islice(texts, batch)):
        counted = list(zip(chunk, count_tokens(chunk)))
        kept += counted
        yield from counted
    if not kept:
        raise ValueError("no text to cut haystacks from")
    while True:
        yield from kept
