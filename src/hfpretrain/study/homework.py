"""One document with the course assignment's deliverables, in the assignment's order, assembled from the committed
results (``python scripts/report.py --homework``; docs/study.md § Reports).

Every number in it is copied from a committed file (a generated report, a README's table, a summary.json): the
sections are cut from those files, but for § 3's table of the other experiments, whose cells (``OTHER_EXPERIMENTS``)
are a summary of their READMEs written here with each figure as its README has it. ``SOURCES`` names the files, so
that a test can check each number of the document against them (tests/study/test_homework.py). Paths of the machine that made a run (its data root)
are rewritten to ``$DATA_ROOT``: the document names no absolute path. What the files cannot say (where the team
keeps the checkpoint, who did what) is left as a marked blank for the team to fill in.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import NamedTuple

import yaml

from hfpretrain.study.grid import load_spec

BEST = "results/best_small10/seed1234"  # the best model: its run report (curves, lm-eval, generations, reproduce)
BEST_SEEDS = "results/best_small10"  # its README: both seeds, the benchmarks beside chance, the checkpoint
LADDER = "results/best_small"  # the changes that made the best recipe, one row each (six shards)
ABLATION = "results/study_gpu_vocab2"  # the ablation: the vocabulary IsoFLOP study with its decision rule
MOE = "results/study_gpu_moe2"  # the MoE ablation: ten shards, four budgets (it supersedes study_gpu_moe)
OTHER_STUDIES = ("results/study_gpu_vocab", "results/study_gpu_moe", MOE)


class Experiment(NamedTuple):
    """A row of § 3's table of the experiments outside the studies: the README it is read from (the link's text is
    its title), the files beside that README whose figures the row also reads, and the row's cells."""

    readme: str
    also: tuple[str, ...]
    question: str
    settings: str
    hardware: str
    time: str
    result: str


# the experiments outside the studies that have a README of their own, one row each of § 3's table. The cells are
# typed here, but every figure in them is copied from the row's README or its ``also`` files, digit for digit:
# tests/study/test_homework.py checks each row against those files alone, not against the whole section's sources
OTHER_EXPERIMENTS = (
    Experiment(
        f"{LADDER}/README.md",
        (),
        "Which changes to the classic GPT-2 recipe lower bits per byte at that recipe's compute budget (goal ≤ "
        "1.24)? One change a row, each added to the row above",
        "1.3443e17 training FLOPs a row, seed 1234, the first 6 train shards, seq 1024, 131,072 tokens per step. "
        "Classic: GPT-2 124M, GPT-2 tokenizer, LR 6e-4, 1,200 steps (157M tokens); then an 8k in-domain BPE, the "
        "modern block (qwen3_124m), peak LR 1.5e-3, the wider, shallower qwen3_103m (micro-batch 64 x 2: 1,336 "
        "steps, 175M tokens), warmup-stable-decay (last 20% decays to 0.1×) = best_small; Muon on best_small",
        "one NVIDIA H100 80GB HBM3 (torch 2.11.0+cu130, transformers 5.17.0)",
        "339.9 to 415.7 s of training a row (the Trainer's `train_runtime`, compile included); best_small 374.3 s "
        "against the classic's 379.3 s",
        "best_small **1.147** bits per byte against the classic's 1.305 (−12.1%; goal met); the large steps are the "
        "tokenizer (−0.066) and the learning rate (−0.032); Muon 1.168: not kept",
    ),
    Experiment(
        "results/curriculum/README.md",
        (),
        "Does a last phase on curated sources (Books + TechDocs + Math of the same shards), aligned with the "
        "learning-rate decay, help at best_small's budget?",
        "best_small (qwen3_103m, 8k BPE, 1.3443e17 FLOPs = 1,336 steps of 131,072 tokens, peak LR 1.5e-3) with "
        "warmup-stable-decay; phase 1 (steps 0–1,069) on the whole mix of the first 6 train shards, phase 2 (35.0M "
        "tokens) on the curated sets with the decay to 0.1× over it; control: one phase on the whole mix, same "
        "schedule, sampler and seed; one seed per arm",
        "one H100 80GB HBM3 (torch 2.11.0+cu130, transformers 5.17.0)",
        "training 370.8 s (curriculum, from a cold compile cache) and 314.2 s (control); equal steady throughputs "
        "(578,302 and 579,038 tokens/s)",
        "No: 1.292 bits per byte against the control's **1.151**, worse on every validation set, the curated ones "
        "included (TechDocs +0.075, Books +0.052, Math +0.001)",
    ),
    Experiment(
        "results/long_context_2026-11-27/README.md",
        (),
        "How fast does a 1.83B model train on 16,384-token rows against 2,048-token ones with the document mask, "
        "and does the memory plan hold?",
        "recipes/qwen3_1p8b_1gpu.yaml's shape (1.83B parameters, Qwen3's tokenizer) from random weights, 30 steps, "
        "16,384 tokens per micro-batch, accumulation 2, the document mask (flex attention), shard 0 packed with "
        "`--pack whole`; the default compile, and max-autotune in call 3",
        "one H100 80GB HBM3 (the 2,048 row only), then one H200 in each of three calls (torch 2.11, transformers 5.17)",
        "30 steps a length; call 3 end to end: 161 s at 2k (tokenizing both lengths included), 322 s at 16k",
        "16k at **79.2%**, **78.0%** and **78.5%** of 2k's tokens/s in the three H200 calls (2k 52,965 to 55,120 "
        "tokens/s; the H100's 51,203); peak 63.2 GiB against a plan of 58.5; max-autotune no gain (-0.5%, -0.3%)",
    ),
    Experiment(
        "results/moe_2026-11-27b/README.md",
        ("results/moe_2026-11-27b/call1/notes.txt",),
        "How fast is the 32-expert MoE against its dense twin, before and after the routing weight moved, and "
        "with GLM-4-MoE's aux-loss-free balancing?",
        "`qwen3_moe_856m_a152m` (923M parameters, 32 experts of 512, top-4) and its dense twin (16 x 1024, FFN "
        "2048), seq 2048 x 16 (and 64 x 2048), 30 steps, compiled decoder, bf16, train shard 0 with the "
        "corpus-trained 32k BPE; `glm4_moe_837m_a177m` with `moe.bias_update_rate=0.001`",
        "one H200 in each of three calls, on three machines (torch 2.11, transformers 5.17)",
        "30 steps a run; call 1's notes.txt: `grouped.0` done at 112 s, then five runs in one script done at 419 s",
        "MoE at **71.8%** (call 1) and **68.7%** (call 2) of the dense twin's tokens/s, **75.6%** at 64 x 2048; the "
        "routing weight moved: peak 39.1 to 35.1 GiB at the same speed (234,443 and 235,089 tokens/s); GLM-4-MoE "
        "218,454 tokens/s",
    ),
    Experiment(
        "results/gpu_2gpu/README.md",
        (
            "results/gpu_2gpu/notes_call11.txt",
            "results/gpu_2gpu/notes_call14.txt",
            "results/gpu_2gpu/notes_call16.txt",
            "results/gpu_2gpu/resume_1gpu_log.jsonl.xz",
        ),
        "How do DDP, ZeRO-1 and FSDP2 scale from one GPU to two, and does a ZeRO-1 checkpoint resume (on the same "
        "2 GPUs, and on 1 from DeepSpeed's universal format)?",
        "the `qwen3_1p8b` shape (`benchmarks/gpu_2gpu_scaling.sh`), micro-batch 20 per GPU, 20 steps; one GPU, "
        "then DDP, ZeRO-1 and FSDP2 on two; the ZeRO-1 checkpoint of step 10 resumed",
        "two NVIDIA H200 of one machine (`nvidia-h200-x2`; torch 2.11.0+cu130, transformers 5.17.0)",
        "20 steps a run; call 11's one-GPU and DDP runs done at 106 s and 190 s into the call (notes_call11.txt)",
        "scaling efficiency ZeRO-1 **99.6%** (104,142 tokens/s, peak 83.2 GiB), FSDP2 **100.4%** (104,972 "
        "tokens/s, 79.1 GiB), DDP 90.4% (94,514 tokens/s, 125.5 GiB); one GPU 52,283; resumed on 1 GPU, the "
        "uninterrupted losses at steps 15 and 20 (11.9159, 10.9018)",
    ),
)

# earlier studies whose questions a later one answers again (more data, stricter analysis): their runs are listed as
# experiments that ran, their conclusions are the later study's
SUPERSEDED = {"results/study_gpu_vocab": ABLATION, "results/study_gpu_moe": MOE}
PLACEHOLDER = "<TO FILL IN>"

# § 2: the changes to the training code, each with the files that make it and the ladder row that measured it (a
# row of LADDER's table, by the start of its first cell; None: in every row, the classic recipe's included). No
# figure here: § 2's numbers are its sources' (tests/study/test_homework.py).
CODE_CHANGES = (
    (
        "Loss from the final hidden states without materialising every logit (a fused or chunked cross-entropy)",
        ("src/hfpretrain/training/loss.py", "src/hfpretrain/training/trainer.py"),
        None,
    ),
    (
        "Packing: documents tokenized with end-of-text and packed into fixed blocks, stored as Arrow, token "
        "conservation checked, a manifest with the counts",
        ("src/hfpretrain/data/pipeline.py", "src/hfpretrain/data/pack.py", "scripts/tokenize_pile.py"),
        None,
    ),
    (
        "Data order a pure function of (seed, step) and exact resume: the sampler starts at the step, no replay; a "
        "resumed run refuses another run's checkpoint",
        ("src/hfpretrain/data/order.py", "src/hfpretrain/training/resume.py", "src/hfpretrain/training/trainer.py"),
        None,
    ),
    (
        "Atomic checkpoints: a completion marker written last, integrity checks, rotation that keeps the last "
        "complete one",
        ("src/hfpretrain/training/checkpoints.py",),
        None,
    ),
    (
        "A non-finite loss or gradient norm stops the run, naming the step",
        ("src/hfpretrain/training/nonfinite.py",),
        None,
    ),
    (
        "Weight decay on matrices only (not norms, biases or embedding tables)",
        ("src/hfpretrain/training/trainer.py",),
        None,
    ),
    (
        "The budget in FLOPs (`training_flops`) sets the steps; tokens/s, MFU, memory and gradient norms logged to "
        "`log.jsonl`",
        (
            "src/hfpretrain/models/flops.py",
            "src/hfpretrain/training/resolve.py",
            "src/hfpretrain/training/callbacks.py",
        ),
        None,
    ),
    (
        "An in-domain byte-level BPE trained on the training shards",
        ("src/hfpretrain/data/train_tokenizer.py", "scripts/train_tokenizer.py"),
        "+ 8k in-domain BPE",
    ),
    (
        "The modern block as a zoo config (Qwen3: RMSNorm, RoPE, SwiGLU, QK-norm), vocabulary sized from the tokenizer",
        ("src/hfpretrain/models/configs/qwen3_124m.json", "src/hfpretrain/models/zoo.py"),
        "+ modern block",
    ),
    ("The peak learning rate (a recipe value, no code change)", ("recipes/best_small.yaml",), "+ peak LR"),
    (
        "The wider, shallower shape (a zoo config) and its micro-batch",
        ("src/hfpretrain/models/configs/qwen3_103m.json", "recipes/best_small.yaml"),
        "+ wider, shallower shape",
    ),
    (
        "Warmup-stable-decay: the decay as a share of the steps (`lr_scheduler_kwargs.decay_ratio`), so it keeps "
        "its shape when the budget moves the steps",
        ("src/hfpretrain/training/arguments.py", "src/hfpretrain/training/config.py"),
        "+ warmup-stable-decay",
    ),
    (
        "Muon for the decoder's matrices, AdamW for the rest, as one optimizer (measured, not kept)",
        ("src/hfpretrain/training/optim.py",),
        "best_small with Muon",
    ),
)


def code_changes(root: Path, out_dir: Path) -> str:
    """§ 2's list: each change, its files (linked from the document's folder) and its ladder row."""
    lines = ["| change | files | measured in the ladder row |", "|---|---|---|"]
    for change, files, row in CODE_CHANGES:
        links = ", ".join(f"[`{f}`]({_relpath(root / f, out_dir)})" for f in files)
        lines.append(f"| {change} | {links} | {'every row (the classic recipe too)' if row is None else row} |")
    return "\n".join(lines)


def other_experiments(root: Path, out_dir: Path, text: dict[str, str]) -> str:
    """§ 3's table of the experiments outside the studies, one row each, its first cell the README's title linked."""
    lines = [
        "| experiment | question | model and key hyper-parameters | hardware | time | result |",
        "|---|---|---|---|---|---|",
    ]
    for e in OTHER_EXPERIMENTS:
        link = f"[{_title(text[e.readme])}]({_relpath(root / e.readme, out_dir)})"
        lines.append("| " + " | ".join((link, e.question, e.settings, e.hardware, e.time, e.result)) + " |")
    return "\n".join(lines)


# per section of the document (its number), the files its numbers are cut from (relative to the repository root):
# a test checks each section's numbers against its own sources, not against every file
SECTION_SOURCES = {
    1: (f"{BEST}/report.md",),
    2: (f"{BEST}/report.md", f"{LADDER}/README.md"),
    3: (
        f"{BEST}/report.md",
        *[f"{s}/report.md" for s in (ABLATION, *OTHER_STUDIES)],
        *[f for e in OTHER_EXPERIMENTS for f in (e.readme, *e.also)],
    ),
    4: (f"{BEST}/report.md", *[f"{s}/report.md" for s in (ABLATION, *OTHER_STUDIES)]),
    5: (f"{BEST}/report.md", f"{BEST_SEEDS}/README.md"),
    6: (f"{BEST}/report.md",),
    7: (f"{ABLATION}/report.md", f"{MOE}/report.md"),
    8: (f"{BEST}/report.md", f"{BEST_SEEDS}/README.md"),
    9: (f"{BEST}/report.md", f"{BEST}/checkpoint.json", f"{BEST_SEEDS}/README.md"),
    10: (),
    11: (f"{BEST}/summary.json",),
}
# every file the document's numbers may come from
SOURCES = tuple(dict.fromkeys(s for sources in SECTION_SOURCES.values() for s in sources))

# an absolute path of the machine that ran: /anything/.../pretrain/mix/FILE -> $DATA_ROOT/pretrain/mix/FILE
_DATA_PATH = re.compile(
    r'(?<![\w$.])(?<!\$DATA_ROOT")(?<!\{DATA_ROOT\})/(?:[\w.+-]+/)*?(?:data/)?(pretrain/mix/|tokenizers/|eval/)'
)
ABSOLUTE = re.compile(r"(?:(?<=[\s`'\"(=])|^)/(?:work|home|root|tmp|mnt|usr|opt|data|scratch|var)\b[^\s`'\")]*")


def _title(md: str) -> str:
    """A markdown file's first heading, without its marks."""
    return next((line.lstrip("# ").strip() for line in md.splitlines() if line.startswith("# ")), "")


def section(md: str, heading: str, level: int = 2) -> str:
    """The body of the first ``#``×level heading that starts with ``heading``, up to the next heading of that level
    or above (the heading itself left out)."""
    lines, out, inside = md.splitlines(), [], False
    for line in lines:
        m = re.match(r"^(#+) ", line)
        if m and len(m.group(1)) <= level:
            if inside:
                break
            inside = len(m.group(1)) == level and line[len(m.group(1)) + 1 :].startswith(heading)
            continue
        if inside:
            out.append(line)
    return "\n".join(out).strip()


def demote(md: str, by: int = 1) -> str:
    """Headings one level further down (a report's ## becomes the homework's ###)."""
    return re.sub(r"^(#+) ", lambda m: "#" * (len(m.group(1)) + by) + " ", md, flags=re.M)


def relink(md: str, folder: str, out_dir: Path, root: Path) -> str:
    """Relative links and images of a report in ``folder`` made relative to the homework's folder."""

    def fix(m):
        target = m.group(2)
        if re.match(r"^[a-z]+://|^#|^/", target):
            return m.group(0)
        path = (root / folder / target).resolve()
        try:
            rel = Path(_relpath(path, out_dir.resolve()))
        except ValueError:
            return m.group(0)
        return f"{m.group(1)}({rel.as_posix()})"

    return re.sub(r"(!?\[[^\]]*\])\(([^)\s]+)\)", fix, md)


def _relpath(path: Path, start: Path) -> str:
    import os

    return os.path.relpath(path, start)


def scrub(md: str) -> str:
    """The data root of the machine that ran becomes ``$DATA_ROOT``; the Pile's file format is not the Pile."""
    md = _DATA_PATH.sub(lambda m: "$DATA_ROOT/" + m.group(1), md)
    return md.replace("Pile-format documents", "documents in the Pile's file format (not the Pile: § 11)")


def _table_rows(md: str, header_start: str) -> list[list[str]]:
    lines = md.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith(header_start))
    out = [[c.strip() for c in lines[i].strip("|").split("|")]]
    for line in lines[i + 2 :]:
        if not line.startswith("|"):
            break
        out.append([c.strip() for c in line.strip("|").split("|")])
    return out


def _table(rows: list[list[str]]) -> str:
    head, *body = rows
    return "\n".join(
        ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *["| " + " | ".join(r) + " |" for r in body]]
    )


def experiments(root: Path, study: str) -> str:
    """A study's run table, the hyper-parameter and hardware columns of its generated report."""
    md = (root / study / "report.md").read_text()
    rows = _table_rows(md, "| run | seed |")
    keep = [
        "run",
        "seed",
        "params",
        "width×layers",
        "vocab",
        "tokens",
        "train FLOPs",
        "LR",
        "batch tokens",
        "warmup",
        "schedule",
        "passes",
        "device",
        "minutes",
        "val bpb",
    ]
    idx = [rows[0].index(k) for k in keep]
    return _table([[r[i] for i in idx] for r in rows])


def _larger_checks_said(analysis: dict, minimum: float) -> str:
    """The multiplier checks beyond the rule's threshold (the dense arm at k x the decision budget, k above the
    rule's minimum), each with its reading and the runs it rests on of those planned (analysis.json records both):
    "" when there is none."""
    return "".join(
        f"; trained on {c['factor']:.2g} times the decision budget, the dense arm reads {c['reading']}"
        + (
            f" so far ({c['ran']} of the {c['planned']} runs planned for that check: interim)"
            if c["ran"] < c["planned"]
            else f" (its {c['ran']} planned runs)"
        )
        for c in analysis.get("multiplier_checks") or []
        if c["factor"] > minimum + 1e-9
    )


def _checks_said(spec) -> str:
    """Where the MoE study checked its learning rate and the MoE arm's balancing (aux-loss) weight, from its spec:
    "the learning rate was checked at 2.5e+15, 2.5e+16 (dense, moe) and 3e+16 (moe) ..." (the report's budget
    format)."""

    def where(budgets: dict) -> str:
        parts = [f"{b:.3g} ({', '.join(sorted(what))})" for b, what in sorted(budgets.items())]
        return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)

    lr: dict = {}
    for e in spec.lr_checks:
        n = len(e.get("seeds") or [None])
        lr.setdefault(e["budget"], set()).update(
            f"{arm}, {n} seeds" if n > 1 else arm for arm in e.get("arms", spec.arms)
        )
    aux: dict = {}
    for e in spec.setting_checks:
        for setting in e["settings"].values():
            if any(o.startswith("moe.aux_loss_coef=") for o in setting["overrides"]):
                n = len(e.get("seeds") or [None])
                aux.setdefault(e["budget"], set()).add(f"{n} seed{'s' if n > 1 else ''}")
    said = [f"the learning rate was checked at {where(lr)}, one seed a check unless said"] if lr else []
    if aux:
        said.append(f"the MoE arm's balancing weight at {where(aux)}")
    return "; ".join(said) if said else "no setting was checked"


def write_homework(
    root: str | Path = ".", out: str | Path = "results/homework.md", link_base: str | Path | None = None
) -> Path:
    """Write the document to ``out``; its links are relative to ``link_base`` (default: ``out``'s folder; a test
    writes elsewhere with the committed file's base and compares)."""
    root, out = Path(root), Path(out)
    if not out.is_absolute():
        out = root / out
    out_dir = Path(link_base) if link_base is not None else out.parent
    text = {s: (root / s).read_text() for s in SOURCES if s.endswith(".md")}
    best_md, seeds_md, ladder_md = (
        text[f"{BEST}/report.md"],
        text[f"{BEST_SEEDS}/README.md"],
        text[f"{LADDER}/README.md"],
    )
    abl_md = text[f"{ABLATION}/report.md"]
    summary = json.loads((root / BEST / "summary.json").read_text())
    moe_rows = json.loads((root / MOE / "results.json").read_text())
    scored = [r for r in moe_rows if r.get("val_bpb_per_set")]
    seeds = sorted({r.get("seed") for r in scored}, key=str)
    per_set_scored = (
        f"{len(scored)} of its {len(moe_rows)} runs are scored per validation set (seeds "
        f"{', '.join(map(str, seeds))}: the report's § Per validation set); the others overall"
        if scored
        else "nothing is scored per validation set"
    )
    moe_spec = load_spec(root / MOE / "spec.yaml")
    checked = _checks_said(moe_spec)
    beyond = _larger_checks_said(
        json.loads((root / MOE / "analysis.json").read_text()), (moe_spec.decision or {}).get("multiplier_min", 1.0)
    )
    final = summary["final_eval"]
    kept = json.loads((root / BEST / "checkpoint.json").read_text())  # where the team keeps the weights

    def cut(md, heading, folder, level=2):
        return relink(scrub(demote(section(md, heading, level), 3 - level)), folder, out_dir, root)

    run_folder = yaml.safe_load((root / BEST / "recipe.yaml").read_text())["training"]["output_dir"]
    tokenizer_cmd = [
        line.strip() for line in seeds_md.splitlines() if line.startswith("python scripts/train_tokenizer.py")
    ]
    ladder = _table(_table_rows(ladder_md, "| run | bits per byte"))
    lines = [
        "# Pretraining a small language model: the homework report",
        "",
        "Generated by `python scripts/report.py --homework` from the committed results: every number below is "
        "copied from a file it names (generated run and study reports, READMEs, summary.json), and "
        "tests/study/test_homework.py checks them against those files. Sections follow the assignment's order.",
        "",
        "## 1. Data processing, with example batches",
        "",
        f"The best model's data, from its run report ([{BEST}/report.md]({_relpath(root / BEST / 'report.md', out_dir)})):",
        "",
        cut(best_md, "Data", BEST),
        "",
        "## 2. Changes to the training code",
        "",
        cut(best_md, "What the training code does", BEST),
        "",
        "The changes, each with the files that make it and the row of the ladder below that measured it (the "
        "changes in every row are the training code's own: the ladder's first row, the classic recipe, has them too):",
        "",
        code_changes(root, out_dir),
        "",
        "Each change measured at the fixed budget, one row per change added to the row above, on the first six "
        f"shards with a six-shard tokenizer ([{LADDER}/README.md]({_relpath(root / LADDER / 'README.md', out_dir)})); "
        "the best model below is the last row's recipe, unchanged, on all ten shards. One seed per row: the README "
        "says which steps are beyond the seed noise and which are not:",
        "",
        ladder,
        "",
        "## 3. Every experiment, with its hyper-parameters",
        "",
        "The best model's hyper-parameters:",
        "",
        cut(best_md, "Model, hyper-parameters, hardware", BEST),
        "",
    ]
    for study in (ABLATION, *OTHER_STUDIES):
        name, later = Path(study).name, SUPERSEDED.get(study)
        lines += [
            f"### {name}" + (f" (superseded by {Path(later).name})" if later else ""),
            "",
            *(
                [
                    f"Its conclusions are replaced by {Path(later).name}'s (§ 7); its runs are listed as experiments that ran.",
                    "",
                ]
                if later
                else []
            ),
            f"From [{study}/report.md]({_relpath(root / study / 'report.md', out_dir)}) "
            "(its Spec section has every setting; minutes are of a GPU shared by the study's workers):",
            "",
            experiments(root, study),
            "",
        ]
    lines += [
        "### The other experiments",
        "",
        "Beside the studies and the best model above, these experiments ran, one row each, its figures from its "
        "README (each link's text is that README's title; the README has the recipe, overrides and commands):",
        "",
        other_experiments(root, out_dir, text),
        "",
        "fp8 training, the speed ladder's other rows and the multi-GPU layouts are rows of [docs/benchmarks.md]"
        f"({_relpath(root / 'docs' / 'benchmarks.md', out_dir)}), each with its date, commit, GPU, command and a link "
        "to its raw results.",
        "",
    ]
    lines += ["## 4. Hardware and time", ""]
    for study in (ABLATION, *OTHER_STUDIES):
        lines += [
            f"- **{Path(study).name}**"
            + (f" (superseded by {Path(SUPERSEDED[study]).name})" if study in SUPERSEDED else "")
            + ": "
            + " ".join(
                line.lstrip("- ")
                for line in section(text[f"{study}/report.md"], "Hardware and time").splitlines()
                if line.strip()
            )
        ]
    lines += [
        f"- **best model** ({BEST}): "
        + "; ".join(
            line.strip("| ").replace(" | ", ": ")
            for line in section(best_md, "Model, hyper-parameters, hardware").splitlines()
            if line.startswith("| hardware") or line.startswith("| training wall time")
        ),
        "",
        "## 5. The best model: training and validation curves",
        "",
        cut(best_md, "Training and validation curves", BEST),
        "",
        "Zero-shot benchmarks of the best model (seed 1234):",
        "",
        cut(best_md, "lm-eval", BEST),
        "",
        "Both seeds, and what the scores say "
        f"([{BEST_SEEDS}/README.md]({_relpath(root / BEST_SEEDS / 'README.md', out_dir)})):",
        "",
        cut(seeds_md, "The two runs", BEST_SEEDS),
        "",
        cut(seeds_md, "Zero-shot benchmarks beside chance", BEST_SEEDS),
        "",
        "## 6. Generations, unconditional and conditional",
        "",
        cut(best_md, "Generations", BEST),
        "",
        "## 7. The ablation: vocabulary size and domain at equal compute, with scaling plots",
        "",
        f"From [{ABLATION}/report.md]({_relpath(root / ABLATION / 'report.md', out_dir)}) and its "
        f"[README]({_relpath(root / ABLATION / 'README.md', out_dir)}).",
        "",
        "### The decision, by the rule written before the runs",
        "",
        cut(abl_md, "Decision", ABLATION),
        "",
        "### Scaling plots",
        "",
        cut(abl_md, "Plot", ABLATION),
        "",
        "### Discussion, with the IsoFLOP curves and per-budget optima",
        "",
        cut(abl_md, "Discussion", ABLATION),
        "",
        "### The MoE ablation (dense against 32 experts at equal active FLOPs)",
        "",
        f"From [{MOE}/report.md]({_relpath(root / MOE / 'report.md', out_dir)}) and its "
        f"[README]({_relpath(root / MOE / 'README.md', out_dir)}) (the first MoE study, on six shards, could not "
        "bracket its larger budget; this one replaces it).",
        "",
        "#### The decision, by the rule written before the runs",
        "",
        cut(text[f"{MOE}/report.md"], "Decision", MOE, level=2),
        "",
        "#### Discussion",
        "",
        cut(text[f"{MOE}/report.md"], "Discussion", MOE),
        "",
        *(
            ["#### Per validation set", "", cut(text[f"{MOE}/report.md"], "Per validation set", MOE, level=2)]
            if "\n## Per validation set\n" in text[f"{MOE}/report.md"]
            else []
        ),
        "",
        "What the verdict does not say (the README's Result has the figures): the multiplier's value at the "
        "decision budget reads the dense arm's fit beyond its data, and other fits of the same optima give values "
        "on both sides of it (a pure power law, E = 0, reads below the rule's minimum); that it exceeds the minimum "
        "is measured, by the dense arm trained on 1.2 times the decision budget (the check beside the rule, above; "
        "the MoE arm there too is lower than the dense arm beyond noise, by a gap within noise of the decision "
        f"budget's){beyond}; "
        "the multiplier rises with compute for floors near the fitted one, is flat on the "
        "vocabulary study's fit of the same dense runs and falls with no floor, so the Discussion states no "
        "direction and none is claimed; the data are read "
        "more times at the larger budgets, so whether any change of the gain comes with compute or with repetition "
        "these runs cannot tell apart; the gain is per FLOP, and the MoE shapes train at fewer tokens per second than their "
        f"dense twins; {checked}, each check within noise of the grid's setting or worse (the report's "
        f"checks), and {per_set_scored}.",
        "",
        "## 8. Reproduce: training, evaluation, generation",
        "",
        f"The tokenizer (from {BEST_SEEDS}/README.md):",
        "",
        "```bash",
        *tokenizer_cmd,
        "```",
        "",
        "Tokenize, train, evaluate, generate and report (the best run's report; its recipe is committed, and it trains "
        f"into the run folder `{run_folder}` the later commands read):",
        "",
        # the run report names the recipe in its run folder on the GPU machine; the committed copy is the one here
        cut(best_md, "Reproduce", BEST).replace(f"{run_folder}/recipe.yaml", f"{BEST}/recipe.yaml"),
        "",
        "Generation from the trained checkpoint with a prompt of your own:",
        "",
        "```bash",
        "python scripts/generate.py --model CHECKPOINT --prompt 'Your prompt here' --temperature 0.8 --top-p 0.95",
        "python scripts/generate.py --model CHECKPOINT --unconditional --num-samples 2",
        "```",
        "",
        "## 9. Where the checkpoint and the tokenizer are",
        "",
        f"- Checkpoint (`final/` of the best run exported in {kept['dtype']}: model, config, tokenizer and model card, "
        f"`save_pretrained`): **its weights are not in this repository, and not published until the team names a "
        f"Hub id below**. The export was made at `{kept['kept_at']}/` on the machine that trained it (git-ignored: "
        f"{kept['weights']['bytes']:,} bytes of weights stay out of git); what the repository keeps is its "
        f"`{kept['weights']['file']}`'s SHA-256, `{kept['weights']['sha256']}` ([{BEST}/checkpoint.json]"
        f"({_relpath(root / BEST / 'checkpoint.json', out_dir)})), against which a copy can be checked. Where the "
        f"team publishes it (a Hugging Face Hub id: `python scripts/export.py ... --push-to-hub user/name`): "
        f"{PLACEHOLDER}.",
        f"- Tokenizer (the 8,192-token byte-level BPE, `scripts/train_tokenizer.py`; also inside the checkpoint): "
        f"[{BEST}/final/]({_relpath(root / BEST / 'final', out_dir)}) in this repository "
        "(`AutoTokenizer.from_pretrained` loads it), or where the team publishes it: " + PLACEHOLDER + ".",
        "",
        f"Everything of the best run's `final/` but the weights is also in [{BEST}/final/]"
        f"({_relpath(root / BEST / 'final', out_dir)}) (model card, config, tokenizer, generation config); how the "
        f"weights came back from the GPU machine and were checked: [{BEST_SEEDS}/README.md]"
        f"({_relpath(root / BEST_SEEDS / 'README.md', out_dir)}), § The checkpoint. Without them, the commands of § 8 "
        "train them again (the same seed trained twice: within 0.0018 bits per byte, that README's figures).",
        "",
        "## 10. Team contributions",
        "",
        f"{PLACEHOLDER}: who did what (data, training code, experiments, analysis, writing).",
        "",
        "## 11. The data used",
        "",
        "**The shipped corpus is not the Pile.** It is the data root's pretraining mix (`$DATA_ROOT/pretrain/mix`): "
        "freely licensed text from Debian, PyPI and npm packages, written in the Pile's file format (zstd-compressed "
        "JSON lines with `text` and `meta.pile_set_name`). Every figure above was measured on it, not on the "
        "Pile, and does not transfer to the Pile as a number. The same commands take the Pile: point "
        "`scripts/tokenize_pile.py --input` at the Pile's `*.jsonl.zst` shards (and `--val-input` at its "
        "validation file) and train on the folder it writes.",
        "",
        f"Final validation of the best model (from {BEST}/summary.json): {final['eval_bpb']:.3f} bits per byte, "
        f"{final['eval_loss']:.3f} nats per token.",
        "",
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    return out
