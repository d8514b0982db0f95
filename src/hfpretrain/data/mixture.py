"""Weighted mixtures of tokenized outputs and training phases (a data curriculum).

A recipe names several outputs of ``tokenize_pile.py`` (``data.sources``: name -> folder) and either one
mixture for the whole run (``data.mixture``: name -> weight) or ``data.phases``, each a mixture and a
share of ``max_steps`` (or a number of steps). Phases switch at exact optimizer steps.

Sample ``i`` of the run is a pure function of ``(seed, i)``, as for one source (``data/order.py ShuffledBlocks``):

* phase: the one whose samples ``[start_step x samples_per_step, end_step x samples_per_step)`` hold ``i``;
* source: a fixed interleaving pattern per phase. The weights become integer quotas ``q_s`` of a period
  ``P`` (exact for weights such as 0.7/0.3: P = 10; at most :data:`MAX_PERIOD`); occurrence ``k`` of source
  ``s`` in the period sits at its ideal time ``(k + 1/2) P / q_s`` (sorted, ties by source order), so every
  prefix of the phase holds each source's share to within about one sample;
* block: ``j``, the sample's index in its source's own stream (samples of that source in earlier phases,
  whole periods, rank within the period), gives block ``permutation(seed, source, epoch = j // n)[j % n]``:
  each source is read epoch by epoch in its own order, and a source used again in a later phase goes on
  where it stopped.

Everything is arithmetic on ``i`` (and a cached permutation per source and epoch), so a resume at step
``k`` starts at sample ``k x samples_per_step`` with no replay, as before. All sources must share the
tokenizer (manifest sha256) and seq_len.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
import math
import zlib
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

logger = logging.getLogger("hfpretrain")

MAX_PERIOD = 1 << 20  # longest interleaving pattern; weights that need more are rounded to 1/MAX_PERIOD


# ---- sources ---------------------------------------------------------------------------------------


@dataclass
class Source:
    """One tokenized output: what the run needs to know of it, and what lineage records."""

    name: str
    path: str
    manifest: dict

    @property
    def train_blocks(self) -> int:
        return int(self.manifest["train"]["blocks"])

    @property
    def seq_len(self) -> int:
        return int(self.manifest["seq_len"])

    @property
    def fingerprint(self) -> str | None:
        return self.manifest.get("fingerprint")

    @property
    def tokenizer_sha256(self) -> str | None:
        return (self.manifest.get("tokenizer") or {}).get("sha256")

    @property
    def key(self) -> int:
        """Seeds this source's block permutations (with the run's seed and the epoch): stable under
        renaming other sources or listing them in another order."""
        return zlib.crc32(self.name.encode())


def manifest_sha256(path: str | Path) -> str | None:
    file = Path(path) / "manifest.json"
    return hashlib.sha256(file.read_bytes()).hexdigest() if file.is_file() else None


def load_sources(sources: dict, reference: dict, reference_path: str, require_manifest) -> dict[str, Source]:
    """Read each source's manifest; all must have ``reference``'s tokenizer and seq_len (the output
    that gives the run its validation split and tokenizer, ``data.path``). One line on a mismatch."""
    want_sha = (reference.get("tokenizer") or {}).get("sha256")
    want_len = int(reference["seq_len"])
    out = {}
    for name, path in sources.items():
        manifest = require_manifest(path, f"data.sources.{name}")
        src = Source(str(name), str(path), manifest)
        if src.tokenizer_sha256 != want_sha:
            tok = manifest.get("tokenizer") or {}
            raise ValueError(
                f"data.sources.{name}={path} was tokenized with another tokenizer ({tok.get('name_or_path')}, "
                f"sha256 {str(src.tokenizer_sha256)[:12]}) than data.path={reference_path} "
                f"({(reference.get('tokenizer') or {}).get('name_or_path')}, sha256 {str(want_sha)[:12]}): "
                "a mixture needs one tokenizer; tokenize every source with the same one"
            )
        if src.seq_len != want_len:
            raise ValueError(
                f"data.sources.{name}={path} has seq_len {src.seq_len}, data.path={reference_path} has "
                f"{want_len}: a mixture needs one seq_len; tokenize every source with the same --seq-len"
            )
        if src.train_blocks < 1:
            raise ValueError(f"data.sources.{name}={path} holds no training block")
        out[src.name] = src
    return out


# ---- phases ----------------------------------------------------------------------------------------


@dataclass
class Phase:
    index: int  # 1-based
    name: str
    start_step: int
    end_step: int
    weights: dict  # source name -> Fraction, summing to 1 (sources of weight 0 left out)

    @property
    def steps(self) -> int:
        return self.end_step - self.start_step


def _fraction(weight) -> Fraction:
    return Fraction(weight).limit_denominator(10**6) if isinstance(weight, float) else Fraction(weight)


def resolve_phases(data, max_steps: int) -> list[Phase]:
    """Phase boundaries in optimizer steps. A share is a fraction of max_steps; boundaries are the rounded
    cumulative shares (plus explicit steps), so three shares of 1/3 over 10 steps give 3, 4 and 3 steps."""
    specs = list(data.phases) if data.phases else [{"mixture": dict(data.mixture)}]
    phases, share_sum, explicit, start = [], Fraction(0), 0, 0
    for k, spec in enumerate(specs):
        last = k == len(specs) - 1
        if spec.get("steps") is not None:
            explicit += int(spec["steps"])
        elif spec.get("share") is not None:
            share_sum += _fraction(spec["share"])
        elif not last:  # config.check_data_section refuses this already
            raise ValueError(f"data.phases[{k}]: only the last phase may leave out share/steps")
        end = (
            max_steps
            if last and spec.get("steps") is None and spec.get("share") is None
            else explicit + int(math.floor(share_sum * max_steps + Fraction(1, 2)))
        )
        where = f"data.phases[{k}]" if data.phases else "data.mixture"
        if last and end != max_steps:
            raise ValueError(
                f"the phases cover {end} steps but training.max_steps={max_steps}: shares must add up "
                "to 1 and steps to max_steps (or leave out the last phase's share to give it the rest)"
            )
        if end > max_steps:
            raise ValueError(f"{where} ends at step {end}, after training.max_steps={max_steps}")
        if end <= start:
            raise ValueError(f"{where} has no step (steps {start}-{end} of {max_steps}): give it a larger share")
        raw = {str(n): _fraction(w) for n, w in spec["mixture"].items() if w > 0}
        total = sum(raw.values())
        phases.append(
            Phase(k + 1, str(spec.get("name") or f"phase{k + 1}"), start, end, {n: w / total for n, w in raw.items()})
        )
        start = end
    return phases


# ---- the interleaving pattern ------------------------------------------------------------------------


@dataclass
class Pattern:
    """One phase's period: ``seq[r]`` = source index at position r, ``rank[r]`` = its occurrence number
    within the period; ``quota[s]`` occurrences of source s per ``period`` samples."""

    period: int
    quota: np.ndarray  # (n_sources,) int64
    seq: np.ndarray  # (period,) source index
    rank: np.ndarray  # (period,) int64
    positions: list = field(default_factory=list)  # per source: sorted positions in the period

    def count(self, s: int, n: int) -> int:
        """Samples of source ``s`` among the first ``n`` samples of the phase."""
        whole, rest = divmod(n, self.period)
        return whole * int(self.quota[s]) + int(np.searchsorted(self.positions[s], rest))


def quotas(weights: list[Fraction]) -> tuple[int, list[int]]:
    """Integer quotas per period: exact when the weights' common denominator is at most MAX_PERIOD,
    else largest remainders of MAX_PERIOD."""
    period = 1
    for w in weights:
        period = period * w.denominator // math.gcd(period, w.denominator)
        if period > MAX_PERIOD:
            break
    if period <= MAX_PERIOD:
        return period, [int(w * period) for w in weights]
    period = MAX_PERIOD
    exact = [w * period for w in weights]
    q = [int(x) for x in exact]
    for i in sorted(range(len(q)), key=lambda i: (-(exact[i] - q[i]), i))[: period - sum(q)]:
        q[i] += 1
    for i, w in enumerate(weights):  # a positive weight below 1/MAX_PERIOD still gets drawn, once a period
        if w > 0 and q[i] == 0:
            q[i], q[q.index(max(q))] = 1, max(q) - 1
    return period, q


def build_pattern(quota: list[int], period: int) -> Pattern:
    src = np.concatenate([np.full(q, s, dtype=np.int64) for s, q in enumerate(quota)])
    rank = np.concatenate([np.arange(q, dtype=np.int64) for q in quota])
    ideal = (2 * rank + 1) * (period / (2.0 * np.maximum(np.asarray(quota, dtype=np.float64), 1))[src])
    order = np.lexsort((src, ideal))  # by ideal time, ties by source order
    seq, rank = src[order], rank[order]
    dtype = np.uint8 if len(quota) < 256 else np.int64
    positions = [np.flatnonzero(seq == s) for s in range(len(quota))]
    return Pattern(period, np.asarray(quota, dtype=np.int64), seq.astype(dtype), rank, positions)


class MixtureSchedule:
    """Maps sample ``i`` of the run to (source, index in that source's stream) and counts samples per
    source up to any position; knows nothing of the data but the number of blocks per source."""

    def __init__(self, sources: dict[str, Source], phases: list[Phase], samples_per_step: int):
        self.sources = sources
        self.names = list(sources)
        self.phases, self.samples_per_step = phases, samples_per_step
        self.starts = [p.start_step * samples_per_step for p in phases]
        self.length = phases[-1].end_step * samples_per_step
        self.patterns = []
        for p in phases:
            period, quota = quotas([p.weights.get(n, Fraction(0)) for n in self.names])
            self.patterns.append(build_pattern(quota, period))
        # samples of each source in the phases before phase k: where its stream resumes
        self.offsets = [np.zeros(len(self.names), dtype=np.int64)]
        for k, p in enumerate(phases[:-1]):
            n = p.steps * samples_per_step
            self.offsets.append(self.offsets[-1] + [self.patterns[k].count(s, n) for s in range(len(self.names))])

    def phase_of(self, i: int) -> int:
        """0-based index of the phase that sample ``i`` belongs to."""
        return bisect.bisect_right(self.starts, i) - 1

    def locate(self, i: int) -> tuple[int, int]:
        """Sample ``i`` -> (source index, index in that source's stream)."""
        if not 0 <= i < self.length:
            raise IndexError(f"sample {i} outside the run's {self.length}")
        k = self.phase_of(i)
        pattern = self.patterns[k]
        whole, r = divmod(i - self.starts[k], pattern.period)
        s = int(pattern.seq[r])
        return s, int(self.offsets[k][s] + whole * pattern.quota[s] + pattern.rank[r])

    def samples_per_source(self, n: int) -> dict[str, int]:
        """Samples drawn from each source among the first ``n`` samples of the run."""
        n = min(max(n, 0), self.length)
        k = max(self.phase_of(n - 1), 0) if n else 0
        counts = self.offsets[k] + [self.patterns[k].count(s, n - self.starts[k]) for s in range(len(self.names))]
        return {name: int(c) for name, c in zip(self.names, counts)}

    def phase_samples(self, k: int) -> dict[str, int]:
        p = self.phases[k]
        return {
            name: self.patterns[k].count(s, p.steps * self.samples_per_step)
            for s, name in enumerate(self.names)
            if p.weights.get(name)
        }


# ---- the dataset -------------------------------------------------------------------------------------


class MixtureBlocks(Dataset):
    """The run's virtual sequence of samples drawn from several block datasets (see the module docstring)."""

    def __init__(self, blocks: list, schedule: MixtureSchedule, seed: int):
        self.blocks, self.schedule, self.seed = blocks, schedule, seed
        self.keys = [schedule.sources[n].key for n in schedule.names]
        self._perms: dict[tuple[int, int], np.ndarray] = {}

    def __len__(self) -> int:
        return self.schedule.length

    def _permutation(self, s: int, epoch: int) -> np.ndarray:
        perm = self._perms.get((s, epoch))
        if perm is None:
            perm = np.random.default_rng([self.seed, self.keys[s], epoch]).permutation(len(self.blocks[s]))
            self._perms = {k: v for k, v in self._perms.items() if k[0] != s or k[1] == epoch - 1}  # 2 per source
            self._perms[(s, epoch)] = perm
        return perm

    def block_index(self, i: int) -> tuple[int, int]:
        """Sample ``i`` -> (source index, block row in that source's training split)."""
        s, j = self.schedule.locate(i)
        n = len(self.blocks[s])
        return s, int(self._permutation(s, j // n)[j % n])

    def __getitems__(self, indices: list[int]) -> list[np.ndarray]:
        located = [self.block_index(i) for i in indices]
        rows: list = [None] * len(indices)
        for s in sorted({s for s, _ in located}):
            where = [k for k, (t, _) in enumerate(located) if t == s]
            fetched = np.asarray(self.blocks[s][[located[k][1] for k in where]]["input_ids"])
            for k, row in zip(where, fetched):
                rows[k] = row
        return rows

    def __getitem__(self, i: int) -> np.ndarray:
        return self.__getitems__([i])[0]


# ---- plan, lineage, logging --------------------------------------------------------------------------


def describe_mixture(schedule: MixtureSchedule) -> str:
    """One line per run, compared on resume: where each phase starts and its weighted sources (with their
    fingerprints). The last phase is open-ended: a longer run (max_steps raised) is the same run."""
    parts = []
    for p in schedule.phases:
        mix = " + ".join(
            f"{float(w):.4g}×{n}({str(schedule.sources[n].fingerprint)[:8]})" for n, w in p.weights.items()
        )
        parts.append(f"from step {p.start_step}: {mix}")
    return "; ".join(parts)


def mixture_plan(schedule: MixtureSchedule, seq_len: int, max_passes: float) -> dict:
    """What --dry-run shows and log.jsonl's plan keeps: per phase its steps, weights, tokens per source;
    per source its blocks, tokens read and passes (a warning above ``max_passes``)."""
    sps = schedule.samples_per_step
    phases = []
    for k, p in enumerate(schedule.phases):
        samples = schedule.phase_samples(k)
        phases.append(
            {
                "index": p.index,
                "name": p.name,
                "start_step": p.start_step,
                "end_step": p.end_step,
                "steps": p.steps,
                "starts_at_tokens": p.start_step * sps * seq_len,
                "tokens": p.steps * sps * seq_len,
                "sources": {
                    n: {
                        "weight": float(p.weights[n]),
                        "samples": samples[n],
                        "tokens": samples[n] * seq_len,
                        "share_of_tokens": samples[n] / (p.steps * sps),
                    }
                    for n in samples
                },
            }
        )
    total = schedule.samples_per_source(schedule.length)
    sources = {}
    for name, src in schedule.sources.items():
        passes = total[name] / src.train_blocks
        sources[name] = {
            "path": src.path,
            "fingerprint": src.fingerprint,
            "train_blocks": src.train_blocks,
            "samples": total[name],
            "tokens": total[name] * seq_len,
            "passes": passes,
            "sets": sorted((src.manifest["train"].get("tokens_per_set") or {})),
        }
        if passes > max_passes:
            logger.warning(
                "data.sources.%s (%s) is read %.1f times (%d blocks, %d samples): repeated tokens teach "
                "less; lower its weight or its phase's share, or add data",
                name,
                src.path,
                passes,
                src.train_blocks,
                total[name],
            )
    return {"phases": phases, "sources": sources}


def phase_lines(data_plan: dict, max_passes: float, lr_schedule: dict | None = None) -> list[str]:
    """The phase table --dry-run prints."""
    lines = []
    if lr_schedule:
        lines.append(
            f"learning rate: {lr_schedule['type']}, {lr_schedule['warmup_steps']} warmup, "
            f"{lr_schedule['stable_steps']} stable, {lr_schedule['num_decay_steps']} decay steps from step "
            f"{lr_schedule['decay_starts_at_step']} (set by {lr_schedule.get('set_by', 'the last phase')})"
        )
    for p in data_plan["phases"]:
        lines.append(
            f"phase {p['index']} ({p['name']}): steps {p['start_step']}-{p['end_step']} ({p['steps']} steps, "
            f"starts at step {p['start_step']} = token {p['starts_at_tokens']:,}), {p['tokens']:,} tokens"
        )
        for name, s in p["sources"].items():
            lines.append(
                f"    {name:<16} weight {s['weight']:.4f}  {s['tokens']:>16,} tokens ({s['share_of_tokens']:.2%})"
            )
    lines.append("sources:")
    for name, s in data_plan["sources"].items():
        warn = f"  WARNING: more than {max_passes:g} passes" if s["passes"] > max_passes else ""
        lines.append(
            f"    {name:<16} {s['tokens']:>16,} tokens = {s['passes']:.3g} passes over {s['train_blocks']:,} "
            f"blocks  {s['path']}{warn}"
        )
    return lines


def source_record(name: str, path: str, manifest: dict) -> dict:
    """A tokenized output as lineage records it."""
    train = manifest.get("train") or {}
    return {
        "name": name,
        "path": str(Path(path).resolve()),
        "fingerprint": manifest.get("fingerprint"),
        "manifest_sha256": manifest_sha256(path),
        "tokenizer_sha256": (manifest.get("tokenizer") or {}).get("sha256"),
        "seq_len": manifest.get("seq_len"),
        "train_blocks": train.get("blocks"),
        "train_tokens": train.get("block_tokens"),
        "tokens_per_set": train.get("tokens_per_set"),
        "select_sets": manifest.get("select_sets"),
    }


def combined_fingerprint(schedule: MixtureSchedule, validation_fingerprint: str | None) -> str:
    payload = {
        "phases": [[p.start_step, {n: str(w) for n, w in p.weights.items()}] for p in schedule.phases],
        "sources": {n: s.fingerprint for n, s in schedule.sources.items()},
        "validation": validation_fingerprint,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]
