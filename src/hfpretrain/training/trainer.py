"""``PretrainTrainer``: ``transformers.Trainer`` with what pretraining needs and nothing else.

What it changes, and why:
* data order: a :class:`ResumableSampler` replaces the random sampler, and ``ignore_data_skip``
  is forced on; the sampler is positioned from ``global_step`` on resume (O(1), no replay);
* loss: cross-entropy from the final hidden states without materialising all logits (liger's
  fused kernel on GPU, a chunked PyTorch loss elsewhere), normalised like HF's own loss, so that
  micro-batch x accumulation equals one big batch; evaluation never keeps logits;
* weight decay on matrices only (not on norms, biases or, unless asked, embeddings);
* a non-finite loss stops the run (or skips that optimizer step) instead of training on garbage;
  skipped steps are left out of the logged losses, and more of them than ``max_skipped_steps`` or than
  ``max_skipped_fraction`` of the run's steps stop it;
  under ``stop`` the losses and gradient norms of a logging window are checked together when the
  window is logged (the log reads the loss anyway) and always before a checkpoint, so the check
  adds no host synchronisation: the CPU keeps queueing steps ahead of the GPU;
* checkpoints get a ``COMPLETE`` marker written last, so a save interrupted mid-way is never
  taken for the last good checkpoint, plus the resolved recipe. Order: files written and fsynced,
  marker fsynced, all ranks done, and only then old checkpoints rotated out (``save_total_limit``
  is applied here, not by the Trainer, which deletes before the marker exists): a kill at any
  moment leaves a complete checkpoint.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn
from transformers import Trainer, TrainerCallback

from hfpretrain.data.manifest import bits_per_byte

from .checkpoints import COMPLETE_MARKER, checkpoint_write_error, rotate_checkpoints, write_complete_marker, write_failure
from .loss import causal_lm_loss
from .optim import build_muon_adamw

logger = logging.getLogger("hfpretrain")



class NonFiniteLossError(RuntimeError):
    pass
















@contextmanager
def _no_progress_bars():
    """transformers' progress bars off for the block: a save's "Writing model shards" bar put carriage returns
    into every log. Through the public hook transformers consults for each bar (5.17 on), chained to any other."""
    from transformers.utils import logging as hf_logging

    if not hasattr(hf_logging, "set_tqdm_hook"):
        yield
        return

    def quiet(factory, args, kwargs):
        kwargs = {**kwargs, "disable": True}
        return previous(factory, args, kwargs) if previous is not None else factory(*args, **kwargs)

    previous = hf_logging.set_tqdm_hook(quiet)
    try:
        yield
    finally:
        hf_logging.set_tqdm_hook(previous)


class _HiddenStateTap:
    """Forward pre-hook on the LM head: keeps its input (final hidden states) and hands the head an
    empty sequence, so the model's forward computes no logits while we compute the loss ourselves.
    Going through the model's own forward keeps DDP/DeepSpeed/compile wrappers in the loop."""

    def __init__(self, head: nn.Module):
        self.hidden = None
        self.active = False
        head.register_forward_pre_hook(self)

    def __call__(self, module, args):
        if not self.active:
            return None
        self.hidden = args[0]
        return (args[0][:, :0],)


def steps_beside_params(optimizer) -> None:
    """Put Adam's step counters on their parameters' device. DeepSpeed's universal-checkpoint
    loader sets them as CPU tensors, bypassing torch's load_state_dict, and fused AdamW refuses
    them there ("state_steps is on cpu") at the first step."""
    while hasattr(optimizer, "optimizer"):  # accelerate's wrapper -> DeepSpeed's ZeRO optimizer -> torch's
        optimizer = optimizer.optimizer
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
    parameter group's settings with the saved ones, so a state saved by another optimizer (training.optim changed
    on resume) lacks the settings this one reads at its first step."""
    while hasattr(optimizer, "optimizer"):  # accelerate's wrapper -> DeepSpeed's -> torch's
        optimizer = optimizer.optimizer
    defaults = getattr(optimizer, "defaults", None) or {}
    for group in getattr(optimizer, "param_groups", []):
        # hyperparameters the step reads (betas, eps, beta1, ...); the bool flags (differentiable, foreach) default
        missing = sorted(k for k, v in defaults.items() if k not in group and not isinstance(v, bool))
        if missing:
            return f"its parameter groups have no {', '.join(missing)}"
    return None


# The Trainer's private methods PretrainTrainer overrides, and those it calls without overriding. A transformers
# version without one it overrides would silently skip what the override does (the data order, the gradient check,
# the checkpoint marker), one without one it calls would fail mid-run (at the first save), so a missing one stops
# the run at start instead.
PRIVATE_HOOKS = ("_get_train_sampler", "_clip_grad_norm", "_get_grad_norm", "_save_checkpoint")
PRIVATE_CALLS = ("_save", "_get_output_dir")


def check_trainer_hooks(trainer_class=Trainer) -> None:
    missing = [name for name in PRIVATE_HOOKS + PRIVATE_CALLS if not callable(getattr(trainer_class, name, None))]
    if missing:
        import transformers

        raise RuntimeError(f"transformers {transformers.__version__}: Trainer has no {', '.join(missing)}, which "
                           "PretrainTrainer overrides or calls; install a tested version (setup.cfg: "
                           "transformers>=5.17)")


class _Resume(TrainerCallback):
    """What a resume needs once the Trainer has loaded the checkpoint (its state, weights and optimizer) and
    before the first batch is drawn: the sampler at the resumed step, the optimizer's step counters beside
    their parameters, and the steps earlier sessions skipped (their log windows came back with the
    checkpoint), which count towards this run's ceiling."""

    def __init__(self, trainer: "PretrainTrainer"):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
        self.trainer.position_data(state.global_step)
        if optimizer is not None and getattr(self.trainer, "resumed_from", None):
            problem = optimizer_state_problem(optimizer)
            if problem:  # it failed at the first step, deep in the optimizer (adafactor: KeyError: 'beta1')
                raise ValueError(f"{Path(self.trainer.resumed_from) / 'optimizer.pt'} holds another optimizer's "
                                 f"state than training.optim={getattr(args.optim, 'value', args.optim)} ({problem}): "
                                 "resume with the optimizer the checkpoint was saved with (training.optim in its "
                                 "recipe.yaml), or start a new run in another training.output_dir")
        if optimizer is not None:
            steps_beside_params(optimizer)
        self.trainer.skipped_before = sum(h.get("skipped_steps", 0) for h in state.log_history)


class PretrainTrainer(Trainer):
    def __init__(self, *args, train_sampler, samples_per_step, loss_impl="chunked", loss_chunk_tokens=8192,
                 liger_min_chunk_tokens=1024, nan_policy="stop", decay_embeddings=False, recipe_yaml="",
                 compile_backend="inductor", compile_mode="default", train_blocks=None, tokens_per_byte=None,
                 max_skipped_steps=10, max_skipped_fraction=0.05, z_loss=0.0, fused_head=True, loss_tile=None,
                 optimizer_section=None, **kwargs):
        check_trainer_hooks()
        super().__init__(*args, **kwargs)
        self.train_blocks = train_blocks  # blocks in the training split: epochs are passes over them
        self.tokens_per_byte = tokens_per_byte  # of the validation text: loss -> bits per byte
        self.train_sampler = train_sampler
        self.samples_per_step = samples_per_step
        self.loss_impl = loss_impl
        self.loss_chunk_tokens = loss_chunk_tokens
        self.liger_min_chunk_tokens = liger_min_chunk_tokens
        self.z_loss = z_loss  # PaLM's z-loss weight, training steps only (training/loss.py)
        self.fused_head, self.loss_tile = fused_head, loss_tile  # the recipe's kernels.fused_head / loss_tile
        self.expert_load = None  # MoE: a training/moe.py ExpertLoad, whose hooks saw this micro-step's routing
        self.compile_backend, self.compile_mode = compile_backend, compile_mode
        self.nan_policy = nan_policy
        self.decay_embeddings = decay_embeddings
        self.recipe_yaml = recipe_yaml
        self.optimizer_section = optimizer_section  # the recipe's `optimizer:` (None: TrainingArguments' optim)
        if self.optimizer_section is not None and self.optimizer_section.name == "muon" and (
                self.is_deepspeed_enabled or self.is_fsdp_enabled):
            raise ValueError("optimizer.name=muon is not supported under DeepSpeed or FSDP (Muon needs whole "
                             "matrices and its own optimizer object): use DDP or one GPU, or optimizer.name=adamw")
        self._keep = self.args.save_total_limit  # checkpoints rotation keeps (train() takes it from the Trainer)
        self.skipped_steps = 0  # in this session (train() call)
        self.skipped_before = 0  # in the sessions before a resume
        self.resumed_from = None  # the checkpoint train() resumes (a path), if any
        self.grad_stats = None  # a GradStatsCallback, fed the pre-clip norm of every step
        self._skip_this_step = False
        self.max_skipped_steps = max_skipped_steps  # nan_policy=skip: stop after more than this many skips
        self.max_skipped_fraction = max_skipped_fraction  # ... or than this share of the run's steps
        self._step_loss, self._window_sum, self._window_steps, self._window_skipped = None, None, 0, 0
        if nan_policy == "skip" and self.is_deepspeed_enabled:  # DeepSpeed steps its own optimizer: no skipping
            raise ValueError("nan_policy=skip is not supported under DeepSpeed (it steps its own optimizer): "
                             "use nan_policy=stop")
        self._unchecked = []  # (what, step, tensor) awaiting the deferred finiteness check
        # Our compute_loss divides by num_items_in_batch itself, like HF's model losses do.
        self.model_accepts_loss_kwargs = True
        self._tap = _HiddenStateTap(self.model.get_output_embeddings()) if loss_impl != "none" else None
        # Project callbacks (added by the caller with add_callback) must see `logs` before the
        # reporting integrations (wandb, tensorboard) do, so they run first.
        handler = self.callback_handler
        ours = [cb for cb in handler.callbacks if type(cb).__module__.startswith("hfpretrain")]
        handler.callbacks = ours + [cb for cb in handler.callbacks if cb not in ours]
        # The exact data position on resume is the trainer's own business, not a callback its caller must add.
        self.add_callback(_Resume(self))

    # ---- data ------------------------------------------------------------------------------
    def _get_train_sampler(self, train_dataset=None):
        return self.train_sampler

    def position_data(self, global_step: int) -> None:
        self.train_sampler.start = global_step * self.samples_per_step

    # ---- optimizer -------------------------------------------------------------------------
    def get_decay_parameter_names(self, model: nn.Module) -> list[str]:
        # Matrices only: norms and biases are 1-D; embedding tables (and a head tied to one) are
        # excluded unless the recipe asks for them (model.decay_embeddings).
        embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
        return [name for name, p in model.named_parameters()
                if p.ndim >= 2 and (self.decay_embeddings or id(p) not in embeddings)]

    def create_optimizer(self, model=None):
        if self.optimizer is None and self.optimizer_section is not None and self.optimizer_section.name == "muon":
            opt_model = self.model if model is None else model
            self.optimizer = build_muon_adamw(opt_model, self.args, self.get_decay_parameter_names(opt_model),
                                              self.optimizer_section)  # Trainer's create_optimizer then keeps it
        optimizer = super().create_optimizer(model) if model is not None else super().create_optimizer()
        if self.nan_policy == "skip" and not self.is_deepspeed_enabled:
            step = optimizer.step

            def guarded_step(*args, **kwargs):
                step_loss, self._step_loss = self._step_loss, None
                skip, self._skip_this_step = self._skip_this_step, False
                if self.args.world_size > 1 and torch.distributed.is_initialized():
                    # Every rank skips, or none: a rank whose micro-step was non-finite zeroed its gradients
                    # before the all-reduce, so the others may see a finite norm (and would step alone).
                    flag = torch.tensor(float(skip), device=self.args.device)
                    torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
                    skip = bool(flag)
                if skip:
                    self.skipped_steps += 1
                    self._window_skipped += 1
                    skipped = self.skipped_before + self.skipped_steps
                    if skipped > self.max_skipped_steps:
                        raise NonFiniteLossError(
                            f"{skipped} optimizer steps skipped for non-finite values (more than "
                            f"max_skipped_steps={self.max_skipped_steps}): stopping; resume from the last checkpoint "
                            "with a lower learning rate")
                    if self.state.global_step + 1 >= 20:  # fewer steps: a share says little until the end
                        self.check_skipped_fraction(self.state.global_step + 1)
                    return None
                if step_loss is not None:
                    self._window_sum = step_loss if self._window_sum is None else self._window_sum + step_loss
                    self._window_steps += 1
                return step(*args, **kwargs)

            optimizer.step = guarded_step
        return optimizer

    def check_skipped_fraction(self, steps: int) -> None:
        """Stop when more than ``max_skipped_fraction`` of the run's first ``steps`` optimizer steps were skipped."""
        skipped = self.skipped_before + self.skipped_steps
        if skipped and skipped > self.max_skipped_fraction * steps:
            raise NonFiniteLossError(
                f"{skipped} of {steps} optimizer steps skipped for non-finite values (more than "
                f"max_skipped_fraction={self.max_skipped_fraction:g}): stopping; resume from an earlier checkpoint "
                "with a lower learning rate")

    def train(self, *args, **kwargs):
        # Rotation is ours (_save_checkpoint, after the marker): the Trainer rotates inside its save, before the
        # marker exists, and again at the end, where with save_total_limit 1 and a best checkpoint
        # (metric_for_best_model) it deletes every other one, the newest complete one included.
        self._keep, self.args.save_total_limit = self.args.save_total_limit, None
        self.resumed_from = kwargs.get("resume_from_checkpoint") or (args[0] if args else None)
        try:
            output = super().train(*args, **kwargs)
        finally:
            self.args.save_total_limit = self._keep
        # After the last checkpoint's save, so that nothing is lost; a run stopped early (SIGTERM) is not over.
        if self.nan_policy == "skip" and self.state.global_step >= self.state.max_steps:
            self.check_skipped_fraction(self.state.global_step)
        return output

    # ---- loss --------------------------------------------------------------------------------
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self._tap is None:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        labels = inputs["labels"]
        own_aux = self.expert_load is not None and self.expert_load.aux_loss is not None  # training/moe.py
        if own_aux:
            self.expert_load.logits.clear()  # a checkpointed backward's recomputed forward kept some again
        self._tap.active = True
        try:
            outputs = model(input_ids=inputs["input_ids"], position_ids=inputs.get("position_ids"), use_cache=False,
                            **({"output_router_logits": False} if own_aux else {}))
        finally:
            self._tap.active = False
        hidden, self._tap.hidden = self._tap.hidden, None
        weight = self.accelerator.unwrap_model(model).get_output_embeddings().weight
        # The loss runs outside the model's forward, so outside the autocast accelerate wraps it in:
        # without this the LM-head matmuls (a fifth of all FLOPs at a 151k vocabulary) run in fp32.
        with self.accelerator.autocast():
            loss = causal_lm_loss(hidden, weight, labels, num_items_in_batch, self.loss_impl, self.loss_chunk_tokens,
                                  self.liger_min_chunk_tokens, self.compile_backend, self.compile_mode,
                                  z_loss=self.z_loss if model.training else 0.0,  # evaluation: cross-entropy only
                                  fused_head=self.fused_head, loss_tile=self.loss_tile)
        # MoE: transformers' load-balancing loss, from the logits the routers' hooks kept, else the model's output
        aux = self.expert_load.take_aux_loss() if own_aux else getattr(outputs, "aux_loss", None)
        config = self.accelerator.unwrap_model(model).config
        if aux is not None and model.training and config.output_router_logits:  # eval: cross-entropy only
            weight = config.router_aux_loss_coef
            if num_items_in_batch is not None:
                # The cross-entropy is this micro-batch's share of the step's tokens (all micro-batches, all ranks);
                # the aux loss takes the same share, so that its weight is moe.aux_loss_coef whatever accumulation
                # and GPU count model.micro_batch and the launch chose (transformers adds it whole per micro-batch).
                weight = weight * labels.ne(-100).sum() / num_items_in_batch
            loss = loss + weight * aux.to(loss.device)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            # As Trainer.compute_loss: num_items_in_batch counts all ranks' tokens and DDP averages
            # gradients over ranks, so scale back up.
            loss = loss * self.accelerator.num_processes
        return (loss, {"loss": loss}) if return_outputs else loss

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.expert_load is not None:  # after the backward, which may have recomputed the forward
            self.expert_load.count()
        self._watch("loss", loss)
        if self.nan_policy == "skip":  # this step's loss, kept apart until we know whether the step is skipped
            self._step_loss = loss.detach() if self._step_loss is None else self._step_loss + loss.detach()
        return torch.zeros_like(loss) if self._skip_this_step else loss  # keep the logged mean finite

    def _clip_grad_norm(self, model):
        if self._skip_this_step:
            model.zero_grad(set_to_none=True)  # grads of later micro-steps too
        return super()._clip_grad_norm(model)

    def _get_grad_norm(self, model, grad_norm=None):
        # Every optimizer step comes here, with _clip_grad_norm's norm, or at max_grad_norm 0 (where the Trainer
        # does not clip) with none: the Trainer then measures it unclipped, so the check and telemetry run anyway.
        if grad_norm is None and self._skip_this_step:
            model.zero_grad(set_to_none=True)
        norm = super()._get_grad_norm(model, grad_norm)
        if hasattr(norm, "full_tensor"):  # FSDP2: a DTensor, which .cpu()/.tolist()/.item() refuse
            norm = norm.full_tensor()
        if norm is not None:
            # DeepSpeed hands the norm back as a Python float, already read from the GPU: watched as well, on the
            # device of the other watched values, which check_finite stacks.
            watched = norm if torch.is_tensor(norm) else torch.tensor(float(norm), device=self.args.device)
            if self.grad_stats is not None:
                self.grad_stats.record(self.state.global_step + 1, watched)
            # A finite loss can still give non-finite gradients; catch them before the optimizer step.
            self._watch("gradient norm", watched)
        return norm

    def _watch(self, what: str, value: torch.Tensor) -> None:
        """Check ``value`` for NaN/Inf: now under ``skip`` (its optimizer step must not happen); under
        ``stop`` at the next log or save (no host sync; the run stops before any save)."""
        self._unchecked.append((what, self.state.global_step + 1, value.detach()))
        if self.nan_policy == "skip" and not self.is_deepspeed_enabled:
            self.check_finite()

    def check_finite(self) -> None:
        pending, self._unchecked = self._unchecked, []
        if not pending or bool(torch.stack([v.float().reshape(()) for _, _, v in pending]).isfinite().all()):
            return  # one read of the GPU for the whole window
        for what, step, value in pending:
            if not torch.isfinite(value):
                self._non_finite(f"{what} is {value.item()}", step)
                return

    def log(self, logs, *args, **kwargs):
        if "loss" in logs:  # a training window: its loss was just read from the GPU anyway
            self.check_finite()
            if self._window_skipped:
                # The Trainer's window mean counts a skipped step as loss 0 (training_step's return; or its finite
                # loss, when only the gradients were not): the mean of the steps taken instead.
                logs["loss"] = self._mean_over_ranks(self._window_sum, self._window_steps)
                logs["skipped_steps"] = self._window_skipped
            self._window_sum, self._window_steps, self._window_skipped = None, 0, 0
        if "train_loss" in logs:  # the end of train(): the console's last line and summary.json say the same
            logs["train_loss"] = self.run_train_loss(logs["train_loss"])
        if self.train_blocks:
            # The Trainer's epoch is the fraction of planned steps (our dataset is the whole run's
            # virtual sequence); report passes over the data instead, continuous across resumes.
            self.state.epoch = self.state.global_step * self.samples_per_step / self.train_blocks
        super().log(logs, *args, **kwargs)

    def run_train_loss(self, session_loss: float) -> float:
        """The whole run's mean training loss: the mean of every logged window, earlier sessions' included
        (log_history comes back with a checkpoint). The Trainer's own train_loss averages this session's steps
        only (after a resume: not the run's) and counts a skipped step as a loss of 0."""
        windows = [h["loss"] for h in self.state.log_history if "loss" in h and math.isfinite(h["loss"])]
        return sum(windows) / len(windows) if windows else session_loss

    def _mean_over_ranks(self, total: torch.Tensor | None, steps: int) -> float:
        """Mean loss per step of ``steps`` steps whose losses sum to ``total`` on this rank, over all ranks (every
        rank skips the same steps, so this is called on all of them together, as the Trainer gathers its loss)."""
        if not steps:
            return float("nan")
        total = total.detach().float().clone()
        if self.args.world_size > 1 and torch.distributed.is_initialized():
            torch.distributed.all_reduce(total)
            total /= self.args.world_size
        return float(total) / steps

    def _non_finite(self, what: str, step: int) -> None:
        if self.nan_policy == "stop" or self.is_deepspeed_enabled:  # DeepSpeed steps its own optimizer
            if self.nan_policy == "skip":
                what += " (nan_policy=skip is not supported under DeepSpeed)"
            raise NonFiniteLossError(
                f"{what} at step {step}: stopping (nan_policy=stop); resume from the last checkpoint "
                "with a lower learning rate, or set nan_policy=skip"
            )
        logger.warning("%s at step %d: skipping this optimizer step", what, step)
        self._skip_this_step = True
        self.model.zero_grad(set_to_none=True)

    # ---- checkpoints -------------------------------------------------------------------------
    def _issue_warnings_after_load(self, load_result):
        # A head tied to the embedding is saved once, as the embedding, so every resume found "missing keys:
        # ['lm_head.weight']": harmless, and it taught users to ignore the warning. Only that case is quiet.
        # (Not in PRIVATE_HOOKS: a transformers without this method brings the warning back, nothing worse.)
        model = self.accelerator.unwrap_model(self.model)
        head, embeddings = model.get_output_embeddings(), model.get_input_embeddings()
        if (getattr(model.config, "tie_word_embeddings", False) and head is not None and embeddings is not None
                and head.weight is embeddings.weight):
            tied = {name for name, p in model.named_parameters(remove_duplicate=False) if p is head.weight}
            if not tied <= set(load_result.missing_keys):  # the shared tensor was loaded under one of its names
                load_result = load_result._replace(
                    missing_keys=[k for k in load_result.missing_keys if k not in tied])
        if load_result.missing_keys:  # the Trainer only warns, and training goes on with those weights as initialised
            raise ValueError(f"the checkpoint's weights do not fit the model: {len(load_result.missing_keys)} missing "
                             f"({', '.join(load_result.missing_keys[:3])}), {len(load_result.unexpected_keys)} "
                             "unexpected: "
                             "resume it with the model it was saved from (an MoE checkpoint saved before 2026-11-25 "
                             "has its experts in the Hub's layout: start from it with model.init_from instead)")
        super()._issue_warnings_after_load(load_result)

    def save_model(self, output_dir=None, _internal_call=False):
        self.check_finite()  # never save weights that a bad step has touched
        # Saved as a model from the Hub is: the KV cache on (training runs without it; generate() and
        # pipeline() read config.use_cache, 4x slower without), and no pad_token_id in config.json
        # (from_pretrained would make the end-of-text row the embedding's frozen padding_idx for anyone who
        # fine-tunes it; generation_config.json keeps the pad id generation needs).
        model = self.accelerator.unwrap_model(self.model)
        config = model.config
        saved = config.use_cache, config.pad_token_id
        config.use_cache, config.pad_token_id = True, None
        if _internal_call:
            # A checkpoint in the model's own parameter layout: by default transformers writes MoE experts one by one
            # (the Hub's layout), which the Trainer's resume, a plain load_state_dict, cannot read (a resumed MoE run
            # went on with freshly initialised experts). from_pretrained reads both; final/ keeps the Hub's layout.
            model.save_pretrained = functools.partial(type(model).save_pretrained, model, save_original_format=False)
        try:
            with _no_progress_bars():
                if (self.is_fsdp_enabled and not _internal_call
                        and "FULL_STATE_DICT" not in str(self.accelerator.state.fsdp_plugin.state_dict_type)):
                    self._save_gathered(output_dir or self.args.output_dir)
                else:
                    super().save_model(output_dir, _internal_call=_internal_call)
        finally:
            config.use_cache, config.pad_token_id = saved
            model.__dict__.pop("save_pretrained", None)

    def _save_gathered(self, output_dir: str):
        """FSDP with sharded state dicts: the Trainer's save_model writes nothing, so a final export came out
        empty. Every rank gathers, the main one saves. Checkpoints (``_internal_call``) keep only the Trainer's
        shards, which resume reads: gathering the whole model at every save would cost time and disk."""
        state_dict = self.accelerator.get_state_dict(self.model)
        if self.args.should_save:
            self._save(output_dir, state_dict=state_dict)

    def _save_checkpoint(self, model, trial):
        # The Trainer's rotation is off (train()): with save_total_limit=1 it deleted the last complete
        # checkpoint before our marker existed, and a kill there left none. Ours comes after the marker and the barrier.
        stale = Path(self._get_output_dir(trial)) / f"checkpoint-{self.state.global_step}" / COMPLETE_MARKER
        if self.args.should_save and stale.exists():  # saving over an older one (e.g. a damaged one resume skipped):
            stale.unlink()  # its marker must not vouch for the files while they are rewritten
        run_dir = Path(self._get_output_dir(trial))
        folder = run_dir / f"checkpoint-{self.state.global_step}"
        try:
            super()._save_checkpoint(model, trial)
            if self.args.should_save:
                (folder / "recipe.yaml").write_text(self.recipe_yaml)
                # data fingerprint, seq_len, tokenizer hash (set by run.pretrain): a resume compares them
                if getattr(self, "data_info", None):
                    (folder / "data.json").write_text(json.dumps(self.data_info, indent=2) + "\n")
                write_complete_marker(folder, self.state.global_step)
        except Exception as e:  # torch's writer says a full disk with a RuntimeError, safetensors with its own error
            cause = write_failure(e)
            if cause is None or not self.args.should_save:
                raise
            raise checkpoint_write_error(folder, cause) from None
        if self.args.world_size > 1:
            self.accelerator.wait_for_everyone()
        if self.args.should_save:
            rotate_checkpoints(run_dir, self._keep, self.state.best_model_checkpoint)

    def evaluation_loop(self, *args, **kwargs):
        output = super().evaluation_loop(*args, **kwargs)
        for key in [k for k in output.metrics if k.endswith("_loss")]:
            output.metrics[key.replace("_loss", "_perplexity")] = math.exp(min(output.metrics[key], 50.0))
            if self.tokens_per_byte:  # tokenizer-independent: comparable across vocabularies
                output.metrics[key.replace("_loss", "_bpb")] = bits_per_byte(output.metrics[key], self.tokens_per_byte)
        return output
