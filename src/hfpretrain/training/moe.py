"""Mixture-of-Experts in training: the load of every expert, and DeepSeek-V3's aux-loss-free balancing.

:class:`ExpertLoad` puts a forward hook on every router: transformers' routers return ``(logits, weights,
indices)``, and the hook keeps the indices of the experts each token was sent to, in training mode only. That is
the router's own choice (group-limited routing and the correction bias included), it needs no
``output_router_logits`` (transformers 5.17's GLM-4-MoE returns none), and it works on every compute_loss path.
After every optimizer step :class:`ExpertBalanceCallback`:

* with ``moe.bias_update_rate`` > 0, nudges each router's correction bias (``e_score_correction_bias``: added to the
  scores for the choice only, never to the weights that scale the experts' outputs) towards equal load:
  ``bias += rate * sign(mean load - load)`` per layer (DeepSeek-V3, arXiv 2412.19437 § 2.1.2). The step's counts are
  summed over all ranks first, so every rank applies the same update; the bias is a buffer of the model, saved in
  every checkpoint and restored on resume, so a resumed run continues exactly;
* at each logging step, adds the window's load to the log: the most and least loaded expert against the mean
  (worst layer), the share of experts that got no token, and the max/mean of each layer; and warns once for an
  expert that stays dead for ``moe.dead_expert_windows`` logging windows in a row.

transformers' auxiliary loss (``router_aux_loss_coef``, Qwen3-MoE) is added by the trainer's compute_loss, from the
router logits and choices the same hooks keep (:func:`aux_loss_function`): the model is then called with
``output_router_logits=False``, because transformers collects those through a ContextVar that torch.compile cannot
trace, which broke the compiled decoder into a graph per router. The loss is transformers' (Switch Transformer's, as
the family's ``load_balancing_loss_func`` computes it: the same value, tested), or with ``moe.aux_loss_scope:
per_layer`` each layer's own loss averaged over the layers (Switch Transformer's and Megatron-Core's form: the pooled
one hardly sees a layer that sends all its tokens to one expert), counted without its
``torch.bincount``, which waits for the GPU once per layer (transformers 5.17): in a profile of the ~1B MoE shape
the GPU was idle for 8.7% of the profiled steps (2.6% without those waits). The load counts avoid it too.
"""

from __future__ import annotations

import copy
import inspect
import logging
import sys
from functools import partial

import torch
from torch import nn
from transformers import TrainerCallback

from hfpretrain.models.params import meta_model
from hfpretrain.models.zoo import is_moe, num_routed_experts

from .callbacks import BOOKKEEPING
from .config import RecipeError

logger = logging.getLogger("hfpretrain")


def find_routers(model: nn.Module) -> list[nn.Module]:
    """The routers of ``model``'s MoE layers, in layer order (transformers' ``*TopKRouter`` / ``*TopkRouter``
    modules: a ``weight`` of [experts, hidden] and a ``top_k``), as the model returns their logits."""
    return [m for m in model.modules() if type(m).__name__.lower().endswith("router") and hasattr(m, "top_k")]


def correction_bias(router: nn.Module) -> torch.Tensor | None:
    return getattr(router, "e_score_correction_bias", None)


class ExpertLoad:
    """Tokens routed to each expert of each MoE layer since the last ``take()``: an [layers, experts] tensor on the
    model's device, counted from the top-k indices each router returns.

    The hooks only append the indices (a side effect torch.compile traces without a graph break); ``count()``
    turns them into counts once per micro-step, outside the compiled model, so the kept indices never outlive one
    forward. A forward recomputed for activation checkpointing appends its (identical) choice again: every count
    doubles, which changes neither the load ratios logged nor the sign of a bias update."""

    def __init__(self, routers: list[nn.Module], aux_loss=None):
        self.routers = routers
        self.num_experts = routers[0].weight.shape[0]
        self.required = False  # balancing reads the counts: a router that returns no indices is then an error
        self.available = True  # False once a training forward gave no indices
        self.chosen: list[torch.Tensor] = []  # this micro-step's indices, layer after layer
        self.aux_loss = aux_loss  # aux_loss_function(model): the trainer's load-balancing loss from self.logits
        self.logits: list[torch.Tensor] = []  # this forward's router logits, kept (with their graph) for aux_loss
        # made before the Trainer moves the model to its device: moved to the indices' device at the first count
        self.counts = torch.zeros(len(routers), self.num_experts, dtype=torch.int64)
        for router in routers:
            router.register_forward_hook(self._record)

    def _record(self, router: nn.Module, args, output) -> None:
        if router.training and isinstance(output, tuple) and len(output) == 3:
            self.chosen.append(output[2])
            if self.aux_loss is not None:
                self.logits.append(output[0])

    @property
    def biases(self) -> list[torch.Tensor | None]:
        """Each router's correction bias, read from the router each time: moving a model replaces its buffers."""
        return [correction_bias(r) for r in self.routers]

    @torch.no_grad()
    def count(self) -> None:
        """Add the indices the routers returned since the last call (one training forward) to the counts."""
        chosen, self.chosen = self.chosen, []
        self.logits = []  # not taken by the trainer's loss (the Trainer's own compute_loss path): never kept longer
        if len(chosen) % len(self.routers) or not chosen:
            import transformers

            why = (
                f"transformers {transformers.__version__}'s {type(self.routers[0]).__name__} returned "
                f"{len(chosen)} expert choices for {len(self.routers)} MoE layers, not (logits, weights, "
                "indices) from each"
            )
            if self.required:
                raise RuntimeError(
                    f"moe.bias_update_rate: {why}, so the experts' load cannot be counted: "
                    "moe.bias_update_rate=0, or a transformers whose routers return their indices"
                )
            if self.available:
                logger.warning("%s: the experts' load is not logged", why)
            self.available = False
            return
        step = layer_counts(chosen, len(self.routers), self.num_experts)
        self.counts = self.counts.to(step.device) + step

    def take(self) -> torch.Tensor:
        counts, self.counts = self.counts, torch.zeros_like(self.counts)
        return counts

    def take_aux_loss(self) -> torch.Tensor | None:
        """The load-balancing loss of the router logits kept since the last call (one training forward), with the
        choices the routers made in that forward (the last ones recorded)."""
        logits, self.logits = self.logits, []
        return self.aux_loss(logits, self.chosen[-len(logits) :]) if logits else None


def force_balanced_routing(routers: list[nn.Module]) -> None:
    """``moe.forced_balance``: every router's choice replaced by a round-robin one, token t's k experts being
    ``(t·k + j) mod E``: each expert gets the same number of rows (to within one), the routing weights stay the
    router's. Megatron reports MoE speed this way beside dropless routing, so that the cost of imbalance is a figure
    of its own; the model trained is not one to keep."""

    def balanced(router: nn.Module, args, output):
        logits, weights, indices = output
        tokens, k = indices.shape
        rows = torch.arange(tokens * k, device=indices.device, dtype=indices.dtype)
        return logits, weights, rows.remainder(router.weight.shape[0]).view(tokens, k)

    for router in routers:
        router.register_forward_hook(balanced)


def count_choices(indices: torch.Tensor, bins: int) -> torch.Tensor:
    """``torch.bincount(indices, minlength=bins)`` for indices below ``bins``, without its wait for the GPU (it
    reads the largest index to size its output); exact and deterministic. On a GPU ``torch.histc`` of the integer
    indices (bin width (bins - 1) / bins puts index i in bin i): a histogram per thread block in shared memory,
    where ``index_add_``'s atomic adds on a few hundred counters took 1.8 ms per call (best_small_moe's shape on an
    H200, 1.3% of its step, docs/benchmarks.md); on a CPU, integer adds."""
    indices = indices.reshape(-1)
    if indices.is_cuda:
        return torch.histc(indices.int(), bins=bins, min=0, max=bins - 1).long()
    return torch.zeros(bins, dtype=torch.int64, device=indices.device).index_add_(0, indices, torch.ones_like(indices))


def layer_counts(chosen: list[torch.Tensor], layers: int, num_experts: int) -> torch.Tensor:
    """[layers, experts] counts of the routers' choices, layer after layer in ``chosen``, in one count: layer l's
    experts are bins l*E .. l*E+E-1 (a recomputed forward repeats the layers in order, so position modulo the layer
    count is the layer)."""
    offsets = torch.arange(len(chosen), device=chosen[0].device).remainder(layers) * num_experts
    bins = (torch.stack([c.reshape(-1) for c in chosen]) + offsets[:, None]).reshape(-1)
    return count_choices(bins, layers * num_experts).reshape(layers, num_experts)


def switch_balancing_loss(
    logits: list[torch.Tensor], chosen: list[torch.Tensor], num_experts: int, per_layer: bool = False
) -> torch.Tensor:
    """Switch Transformer's load-balancing loss ``num_experts * sum_e f_e * P_e``, where ``f_e`` is the share of
    (token, choice) rows routed to expert e, per token, and ``P_e`` the mean router probability of expert e.
    ``chosen`` are the routers' own top-k choices (for the softmax-top-k routers this loss is for, the top-k of these
    logits: transformers computes it again).

    Pooled (``per_layer`` False, ``moe.aux_loss_scope: pooled``): f and P over all layers' tokens together, as
    transformers' ``load_balancing_loss_func`` computes it without an attention mask. A layer that sends every token
    to one expert then moves f_e by only 1/layers, and not at all where another layer avoids that expert.
    Per layer (``per_layer``): each layer's own loss, averaged over the layers, as Switch Transformer, GShard and
    Megatron-Core count it; k at perfect balance either way, so one weight means the same in both."""
    probs = torch.stack(logits).float().softmax(dim=-1)  # [layers, tokens, experts]
    shares = layer_counts(chosen, len(logits), num_experts).float() / probs.shape[1]  # f per layer
    if per_layer:
        return num_experts * (shares * probs.mean(dim=1)).sum(dim=1).mean()
    return num_experts * (shares.mean(dim=0) * probs.mean(dim=(0, 1))).sum()


def aux_loss_function(model: nn.Module, per_layer: bool = False):
    """``(logits, choices) -> loss``: the load-balancing loss (:func:`switch_balancing_loss`, pooled as transformers'
    or ``per_layer``) for a family that has one in transformers (its module's ``load_balancing_loss_func``:
    Qwen3-MoE, Mixtral, OLMoE), when the config asks for it (``output_router_logits``) and the model's forward can be
    told not to collect the logits itself; None otherwise (transformers' own ``aux_loss`` output is used then)."""
    function = getattr(sys.modules[type(model).__module__], "load_balancing_loss_func", None)
    if (
        function is None
        or not getattr(model.config, "output_router_logits", False)
        or "output_router_logits" not in inspect.signature(model.forward).parameters
    ):
        return None
    return partial(switch_balancing_loss, num_experts=num_routed_experts(model.config), per_layer=per_layer)


def balancing_term(aux: torch.Tensor, config, labels: torch.Tensor, num_items_in_batch) -> torch.Tensor | float:
    """What a micro-batch adds to its loss for the experts' balance: ``router_aux_loss_coef`` x the aux loss, at
    the micro-batch's share of the step's tokens (0 when the config does not ask for router logits)."""
    if not config.output_router_logits:
        return 0.0
    weight = config.router_aux_loss_coef
    if num_items_in_batch is not None:
        # The cross-entropy is this micro-batch's share of the step's tokens (all micro-batches, all ranks); the aux
        # loss takes the same share, so that its weight is moe.aux_loss_coef whatever accumulation and GPU count
        # batch.micro_batch and the launch chose (transformers adds it whole per micro-batch).
        weight = weight * labels.ne(-100).sum() / num_items_in_batch
    return weight * aux.to(labels.device)


def _all_ranks_sum(counts: torch.Tensor) -> torch.Tensor:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(counts)
    return counts


class ExpertBalanceCallback(TrainerCallback):
    """Aux-loss-free balancing after each optimizer step (``rate`` > 0) and the expert load in the log."""

    order = BOOKKEEPING + 10

    def __init__(self, load: ExpertLoad, rate: float = 0.0, dead_windows: int = 3):
        self.load, self.rate, self.dead_windows = load, rate, dead_windows
        load.required = rate > 0
        self.window = torch.zeros_like(load.counts)  # on the counts' device from the first step on
        self.dead_run = torch.zeros(load.counts.shape, dtype=torch.int64)  # windows in a row without a token
        self.warned = False

    @torch.no_grad()
    def on_step_end(self, args, state, control, **kwargs):
        counts = self.load.take()
        if self.rate > 0:
            counts = _all_ranks_sum(counts)  # the same update on every rank
            error = counts.float().mean(dim=1, keepdim=True) - counts.float()
            for bias, layer_error in zip(self.load.biases, error):
                bias.add_(self.rate * layer_error.sign())
        self.window = self.window.to(counts.device) + counts

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None or "loss" not in logs or not self.load.available:  # training windows with counts only
            return
        window = self.window if self.rate > 0 else _all_ranks_sum(self.window)  # summed already when balancing
        self.window = torch.zeros_like(self.window)
        logs.update(load_figures(window.cpu()))
        self.dead_run = torch.where(window.cpu() == 0, self.dead_run + 1, 0)
        stuck = (self.dead_run >= self.dead_windows).nonzero().tolist()
        if stuck and not self.warned:
            self.warned = True
            shown = ", ".join(f"layer {layer} expert {expert}" for layer, expert in stuck[:8])
            logger.warning(
                "%d experts got no token in the last %d logging windows (%s%s): their router rows "
                "have collapsed; moe.bias_update_rate (a model with a correction bias) or "
                "model.overrides.router_aux_loss_coef can bring them back",
                len(stuck),
                self.dead_windows,
                shown,
                ", ..." if len(stuck) > 8 else "",
            )


def load_figures(counts: torch.Tensor) -> dict:
    """A window's [layers, experts] token counts as log figures: max/mean and min/mean of the worst layer, the share
    of (layer, expert) pairs with no token, and each layer's max/mean."""
    counts = counts.double()
    mean = counts.mean(dim=1).clamp(min=1e-9)
    high, low = counts.max(dim=1).values / mean, counts.min(dim=1).values / mean
    figures = {
        "expert_load_max_mean": high.max().item(),
        "expert_load_min_mean": low.min().item(),
        "dead_experts": (counts == 0).double().mean().item(),
    }
    figures.update({f"expert_load_max_mean/{layer}": round(v, 4) for layer, v in enumerate(high.tolist())})
    return figures


def with_moe_section(moe, config):
    """``config`` with the recipe's ``moe:`` section (a copy where it sets something), checked against the model:
    one RecipeError naming the key for a setting the model cannot take."""
    asked = [
        k
        for k, on in (
            ("aux_loss_coef", moe.aux_loss_coef is not None),
            ("aux_loss_scope", moe.aux_loss_scope != type(moe).aux_loss_scope),
            ("bias_update_rate", moe.bias_update_rate > 0),
            ("forced_balance", moe.forced_balance),
        )
        if on
    ]
    if asked and not is_moe(config):
        raise RecipeError(f"moe.{asked[0]}: {config.model_type} is a dense model (no routed experts)")
    if moe.aux_loss_coef is not None:
        if not hasattr(config, "router_aux_loss_coef"):
            raise RecipeError(
                f"moe.aux_loss_coef: transformers has no auxiliary loss for {config.model_type} "
                "(use moe.bias_update_rate, aux-loss-free balancing)"
            )
        config = copy.deepcopy(config)
        config.router_aux_loss_coef = float(moe.aux_loss_coef)
        config.output_router_logits = moe.aux_loss_coef > 0
    if moe.aux_loss_scope == "per_layer" and getattr(config, "output_router_logits", False):
        if aux_loss_function(meta_model(config)) is None:
            raise RecipeError(
                f"moe.aux_loss_scope=per_layer: the trainer cannot compute {config.model_type}'s load-balancing "
                "loss itself (transformers' forward adds its pooled one): moe.aux_loss_scope=pooled"
            )
    if moe.bias_update_rate > 0 and not any(correction_bias(r) is not None for r in find_routers(meta_model(config))):
        raise RecipeError(
            f"moe.bias_update_rate={moe.bias_update_rate}: {config.model_type}'s routers have no "
            "correction bias (e_score_correction_bias) to balance with: use a model that has one "
            "(glm4_moe), or moe.aux_loss_coef"
        )
    return config
