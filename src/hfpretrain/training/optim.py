"""Muon for the hidden matrices, AdamW for everything else, as one ``torch.optim.Optimizer``.

Muon (Jordan et al. 2024; torch.optim.Muon) orthogonalises the momentum of a weight matrix with a
few Newton–Schulz iterations before applying it. It is meant for the 2-D weights of the hidden layers
only; embeddings, the output head, norms and biases stay with AdamW. Which tensors go where:

* Muon: 2-D parameters inside the decoder blocks (the ModuleList holding most parameters), except
  embedding tables and the output head (never, even when untied);
* AdamW: the rest (embeddings, LM head, norms, biases, anything 3-D such as fused expert weights).

Why one optimizer object rather than two: the Trainer has one optimizer slot, one LR scheduler and one
``optimizer.pt``. ``MuonWithAdamW`` owns the param groups; its two inner optimizers
(``torch.optim.Muon``, ``torch.optim.AdamW``) hold the *very same* group dicts and the same ``state``
mapping. So the scheduler's writes to ``group["lr"]`` reach both parts, and ``state_dict`` /
``load_state_dict`` are torch's own (exact resume); after a load the inner optimizers are re-pointed at
the new groups and state.

Learning rate: with ``adjust_lr_fn="match_rms_adamw"`` (Moonshot, "Muon is Scalable for LLM
Training") Muon's update is scaled to AdamW's RMS (0.2·sqrt(max(A, B))), so both parts share
``training.learning_rate`` and ``training.weight_decay``. With ``"original"`` (Keller Jordan's
sqrt(max(1, A/B))) Muon wants its own, much larger, peak LR (``optimizer.muon_learning_rate``, e.g.
0.02); the schedule still scales every group by the same factor.

Under tensor parallelism some parameters are DTensors (the sharded projections) and the rest plain tensors (norms,
and the embedding where the plan leaves it whole): :func:`build_adamw_by_mesh` gives each its own group, so that
torch's fused and foreach AdamW, which cannot span both, still run (transformers 5.17 steps every parameter alone
there: 103 ms of a 615 ms step for the 1.8B shape on 2×H200).

A resumed optimizer's state, checked and placed once the Trainer has loaded it: :func:`optimizer_state_problem`
(another optimizer's state) and :func:`steps_beside_params` (step counters on the wrong device).
"""

from __future__ import annotations

import logging
from typing import Iterable

import torch
from torch import nn

logger = logging.getLogger("hfpretrain")

MUON_LR_SCALES = ("match_rms_adamw", "original")  # torch.optim.Muon's adjust_lr_fn values
ADAMW_TORCH = ("adamw_torch", "adamw_torch_fused")  # TrainingArguments optim names that are torch's AdamW


class MuonWithAdamW(torch.optim.Optimizer):
    """``params``: group dicts, each with ``use_muon`` (bool) and optionally ``lr`` / ``weight_decay``.
    Muon groups must hold 2-D tensors only. The other keyword arguments are the two optimizers'
    hyper-parameters; ``fused`` / ``foreach`` go to AdamW (Muon has neither)."""

    def __init__(
        self,
        params: Iterable[dict],
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        adjust_lr_fn: str = "match_rms_adamw",
        fused: bool | None = None,
        foreach: bool | None = None,
    ):
        groups = [{**g, "params": list(g["params"])} for g in params]
        groups = [g for g in groups if g["params"]]  # e.g. a model without biases
        if any("use_muon" not in g for g in groups):
            raise ValueError("MuonWithAdamW: every param group needs a 'use_muon' key")
        super().__init__(groups, {"lr": lr, "weight_decay": weight_decay})
        # The inner optimizers get the outer group dicts themselves (Optimizer.add_param_group fills
        # defaults into the dict it is given and keeps it), so both read the scheduler's LR.
        muon = [g for g in self.param_groups if g["use_muon"]]
        adamw = [g for g in self.param_groups if not g["use_muon"]]
        self._muon = (
            torch.optim.Muon(
                muon,
                lr=lr,
                weight_decay=weight_decay,
                momentum=momentum,
                nesterov=nesterov,
                ns_steps=ns_steps,
                adjust_lr_fn=adjust_lr_fn,
            )
            if muon
            else None
        )
        self._adamw = (
            torch.optim.AdamW(
                adamw, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=fused, foreach=foreach
            )
            if adamw
            else None
        )
        self._link()

    def _link(self) -> None:
        """Point the inner optimizers at this optimizer's groups and state (after init and every load)."""
        for inner, use_muon in ((self._muon, True), (self._adamw, False)):
            if inner is not None:
                inner.param_groups = [g for g in self.param_groups if g["use_muon"] == use_muon]
                inner.state = self.state

    def __getstate__(self):
        return {**super().__getstate__(), "_muon": self._muon, "_adamw": self._adamw}

    def __setstate__(self, state):
        # Optimizer.load_state_dict ends here with new group dicts and a new state mapping.
        super().__setstate__(state)
        if "_muon" in self.__dict__:
            self._link()

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for inner in (self._muon, self._adamw):
            if inner is not None:
                inner.step()
        return loss


def hidden_matrices(model: nn.Module) -> set[int]:
    """ids of the parameters Muon should take: 2-D weights inside the decoder blocks, found as the
    ``nn.ModuleList`` holding the most parameters (the layers; an MoE layer's expert list is inside
    it), minus embedding tables and the output head."""
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList)]
    if not lists:
        raise ValueError("optimizer.name=muon: the model has no ModuleList of decoder blocks")
    blocks = max(lists, key=lambda m: sum(p.numel() for p in m.parameters()))
    excluded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None:
        excluded.add(id(head.weight))
    return {id(p) for p in blocks.parameters() if p.ndim == 2 and id(p) not in excluded}


def check_muon_launch(section, sharded: bool) -> None:
    """``optimizer.name=muon`` refused under DeepSpeed or FSDP (``sharded``)."""
    if section is not None and section.name == "muon" and sharded:
        raise ValueError(
            "optimizer.name=muon is not supported under DeepSpeed or FSDP (Muon needs whole "
            "matrices and its own optimizer object): use DDP or one GPU, or optimizer.name=adamw_torch_fused"
        )


def build_muon_adamw(model: nn.Module, args, decay_names: Iterable[str], section) -> MuonWithAdamW:
    """The optimizer for ``optimizer.name=muon``: hyper-parameters from the TrainingArguments ``args``
    (learning_rate, weight_decay, adam_beta1/2, adam_epsilon) and the recipe's ``optimizer`` section.
    Weight decay on ``decay_names`` only (PretrainTrainer.get_decay_parameter_names: matrices)."""
    hidden = hidden_matrices(model)
    decay = set(decay_names)
    # AdamW groups first: the Trainer logs the first group's LR, which is then training.learning_rate's.
    buckets: dict[tuple[bool, bool], list] = {
        (False, True): [],
        (False, False): [],
        (True, True): [],
        (True, False): [],
    }  # (use_muon, decays) -> parameters
    names: dict[bool, list[str]] = {True: [], False: []}
    for name, p in model.named_parameters():
        if p.requires_grad:
            use_muon = id(p) in hidden
            buckets[(use_muon, name in decay)].append(p)
            names[use_muon].append(name)
    muon_lr = section.muon_learning_rate if section.muon_learning_rate is not None else args.learning_rate
    groups = [
        {
            "params": params,
            "use_muon": use_muon,
            "weight_decay": args.weight_decay if decays else 0.0,
            **({"lr": muon_lr} if use_muon else {}),
        }
        for (use_muon, decays), params in buckets.items()
    ]
    on_cuda = all(p.is_cuda for params in buckets.values() for p in params)
    optimizer = MuonWithAdamW(
        groups,
        lr=args.learning_rate,
        weight_decay=args.weight_decay,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
        momentum=section.muon_momentum,
        nesterov=section.muon_nesterov,
        ns_steps=section.muon_ns_steps,
        adjust_lr_fn=section.muon_lr_scale,
        fused=True if on_cuda else None,
        foreach=None if on_cuda else True,
    )
    count = {
        m: (
            sum(len(ps) for (u, _), ps in buckets.items() if u == m),
            sum(p.numel() for (u, _), ps in buckets.items() if u == m for p in ps),
        )
        for m in (True, False)
    }
    logger.info(
        "optimizer: Muon (lr scale %s, lr %g) on %d hidden matrices (%s parameters); AdamW (lr %g%s) on "
        "%d other tensors (%s parameters: embeddings, head, norms, biases)",
        section.muon_lr_scale,
        muon_lr,
        count[True][0],
        f"{count[True][1]:,}",
        args.learning_rate,
        ", fused" if on_cuda else "",
        count[False][0],
        f"{count[False][1]:,}",
    )
    logger.debug("Muon: %s; AdamW: %s", names[True], names[False])
    return optimizer


def param_meshes(model: nn.Module) -> set:
    """The device meshes of ``model``'s trainable parameters, None for a plain tensor."""
    from torch.distributed.tensor import DTensor

    return {p.device_mesh if isinstance(p, DTensor) else None for p in model.parameters() if p.requires_grad}


def build_adamw_by_mesh(model: nn.Module, args, decay_names: Iterable[str]) -> torch.optim.AdamW:
    """torch's AdamW (``args.optim``: adamw_torch or adamw_torch_fused) with one param group per (weight decay,
    device mesh): the Trainer's two groups, each split by mesh, so that every group is one fused kernel call."""
    from torch.distributed.tensor import DTensor

    decay = set(decay_names)
    groups: dict[tuple, list] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            key = (name in decay, p.device_mesh if isinstance(p, DTensor) else None)
            groups.setdefault(key, []).append(p)
    fused = getattr(args.optim, "value", args.optim) == "adamw_torch_fused"
    return torch.optim.AdamW(
        [
            {"params": params, "weight_decay": args.weight_decay if decays else 0.0}
            for (decays, _), params in groups.items()
        ],
        lr=args.learning_rate,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
        fused=True if fused else None,
    )


def torch_optimizer(optimizer):
    """The torch optimizer inside accelerate's, DeepSpeed's and our own (nonfinite.py) wrappers."""
    while hasattr(optimizer, "optimizer"):
        optimizer = optimizer.optimizer
    return optimizer


def steps_beside_params(optimizer) -> None:
    """Put Adam's step counters on their parameters' device. DeepSpeed's universal-checkpoint
    loader sets them as CPU tensors, bypassing torch's load_state_dict, and fused AdamW refuses
    them there ("state_steps is on cpu") at the first step."""
    optimizer = torch_optimizer(optimizer)
    for group in getattr(optimizer, "param_groups", []):
        if not (group.get("fused") or group.get("capturable")):  # the others keep steps on the CPU
            continue
        for p in group["params"]:
            state = optimizer.state.get(p, {})
            step = state.get("step")
            if torch.is_tensor(step) and step.device != p.device:
                state["step"] = step.to(p.device, torch.float32)


def optimizer_state_problem(optimizer) -> str | None:
    """Why a loaded optimizer state is not this optimizer's (None: it is): torch's load_state_dict replaces each
    parameter group's settings with the saved ones, so a state saved by another optimizer (optimizer.name changed
    on resume) lacks the settings this one reads at its first step."""
    optimizer = torch_optimizer(optimizer)
    defaults = getattr(optimizer, "defaults", None) or {}
    for group in getattr(optimizer, "param_groups", []):
        # hyperparameters the step reads (betas, eps, beta1, ...); the bool flags (differentiable, foreach) default
        missing = sorted(k for k, v in defaults.items() if k not in group and not isinstance(v, bool))
        if missing:
            return f"its parameter groups have no {', '.join(missing)}"
    return None
