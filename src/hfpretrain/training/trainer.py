"""``PretrainTrainer``: ``transformers.Trainer`` with what pretraining needs and nothing else.

What it changes, and why:
* data order: a :class:`ResumableSampler` replaces the random sampler, and ``ignore_data_skip``
  is forced on; the sampler is positioned from ``global_step`` on resume (O(1), no replay);
* loss: cross-entropy from the final hidden states without materialising all logits (liger's
  fused kernel on GPU, a chunked PyTorch loss elsewhere), normalised like HF's own loss, so that
  micro-batch x accumulation equals one big batch; evaluation never keeps logits. One
  :class:`~.loss.CausalLMLoss`, built from the run's :class:`~.loss.LossSpec` (training/loss.py);
* weight decay on matrices only (not on norms, biases or, unless asked, embeddings);
* a non-finite loss or gradient norm stops the run, or skips that optimizer step, instead of training on garbage
  (``nan_policy``, training/nonfinite.py: under ``stop`` checked without a host sync per step, under ``skip`` by
  an optimizer wrapper that skips the step on every rank and bounds how many are skipped);
* checkpoints get a ``COMPLETE`` marker written last, so a save interrupted mid-way is never
  taken for the last good checkpoint, plus the run's recipe.yaml and resolved.yaml. Order: files written and fsynced,
  marker fsynced, all ranks done, and only then old checkpoints rotated out (``save_total_limit``
  is applied here, not by the Trainer, which deletes before the marker exists): a kill at any
  moment leaves a complete checkpoint. Checkpoints keep the model's own parameter layout (``_save``), which
  the Trainer's resume reads; ``final/`` has the Hub's;
* callbacks run in the order each declares (training/callbacks.py), sorted once, ours before the reporting
  integrations, which then see our figures.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn
from transformers import Trainer, TrainerCallback
from transformers.trainer import SCHEDULER_NAME

from hfpretrain.data.manifest import bits_per_byte

from .callbacks import TRAINER, in_run_order
from .checkpoints import (
    COMPLETE_MARKER,
    SHARDED_OPTIMIZER_DIR,
    check_loaded_weights,
    load_sharded_optimizer,
    no_progress_bars,
    rotate_checkpoints,
    save_in_model_layout,
    save_sharded_optimizer,
    saved_as_from_the_hub,
    sharded_at_load,
    sharded_state_dicts,
    write_complete_marker,
    write_recipe_and_data,
    writing_checkpoint,
)
from .reshard import (
    drop_derived_copies,
    load_scheduler_state,
    load_whole_optimizer_into_shards,
    load_whole_weights_into_shards,
    whole_into_fsdp,
)
from .loss import CausalLMLoss, HiddenStateTap, LossSpec, sequence_parallel_loss, tensor_parallel_loss
from .moe import balancing_term

# NonFiniteLossError: also imported from here (cli/pretrain.py, tests)
from .nonfinite import NonFiniteLossError, NonFinitePolicy, NonFiniteWatch, SkipStepOptimizer  # noqa: F401
from .optim import (
    ADAMW_TORCH,
    build_adamw_by_mesh,
    build_muon_adamw,
    check_muon_launch,
    optimizer_state_problem,
    param_meshes,
    steps_beside_params,
    torch_optimizer,
)

# The Trainer's private methods PretrainTrainer overrides, and those it calls without overriding. A transformers
# version without one it overrides would silently skip what the override does (the data order, the gradient check,
# the checkpoint marker and layout, a tensor-parallel checkpoint's states), one without one it calls would fail
# mid-run (at the first save), so a missing one stops the run at start instead.
PRIVATE_HOOKS = (
    "_get_train_sampler",
    "_clip_grad_norm",
    "_get_grad_norm",
    "_save_checkpoint",
    "_save",
    "_save_optimizer_and_scheduler",
    "_load_from_checkpoint",
    "_load_optimizer_and_scheduler",
)
PRIVATE_CALLS = ("_get_output_dir",)


def check_trainer_hooks(trainer_class=Trainer) -> None:
    missing = [name for name in PRIVATE_HOOKS + PRIVATE_CALLS if not callable(getattr(trainer_class, name, None))]
    if missing:
        import transformers

        raise RuntimeError(
            f"transformers {transformers.__version__}: Trainer has no {', '.join(missing)}, which "
            "PretrainTrainer overrides or calls; install a tested version (setup.cfg: "
            "transformers>=5.17)"
        )


class _Resume(TrainerCallback):
    """What a resume needs once the Trainer has loaded the checkpoint (its state, weights and optimizer) and
    before the first batch is drawn: the sampler at the resumed step, the optimizer's step counters beside
    their parameters, and the steps earlier sessions skipped (their log windows came back with the
    checkpoint), which count towards this run's ceiling."""

    order = TRAINER

    def __init__(self, trainer: "PretrainTrainer"):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
        self.trainer.position_data(state.global_step)
        if optimizer is not None and getattr(self.trainer, "resumed_from", None):
            problem = optimizer_state_problem(optimizer)
            if problem:  # it failed at the first step, deep in the optimizer (adafactor: KeyError: 'beta1')
                raise ValueError(
                    f"{Path(self.trainer.resumed_from) / 'optimizer.pt'} holds another optimizer's "
                    f"state than optimizer.name={getattr(args.optim, 'value', args.optim)} ({problem}): "
                    "resume with the optimizer the checkpoint was saved with (optimizer.name in its "
                    "recipe.yaml), or start a new run in another training.output_dir"
                )
        if optimizer is not None:
            steps_beside_params(optimizer)
        self.trainer.skipped_before = sum(h.get("skipped_steps", 0) for h in state.log_history)
        if self.trainer.nonfinite.optimizer is not None:
            self.trainer.nonfinite.optimizer.resume(state.global_step, self.trainer.skipped_before)


class PretrainTrainer(Trainer):
    def __init__(
        self,
        *args,
        train_sampler,
        samples_per_step,
        loss: LossSpec = LossSpec("chunked"),
        nonfinite: NonFinitePolicy = NonFinitePolicy(),
        decay_embeddings=False,
        run_files=None,
        train_blocks=None,
        tokens_per_byte=None,
        optimizer_section=None,
        sequence_parallel=False,
        callbacks=None,
        **kwargs,
    ):
        check_trainer_hooks()
        ours = [*(callbacks or []), _Resume(self)]  # the resume's bookkeeping is the trainer's own business
        # transformers 5.2x refuses, at construction, checkpoints of a model sharded at load unless they hold the
        # model only: ours hold every rank's optimizer states too (_save_optimizer_and_scheduler), and resume
        training_args = kwargs.get("args")
        lifted = (
            getattr(kwargs.get("model"), "is_distributed_loading_by_transformers", False)
            and training_args.save_strategy != "no"
            and not training_args.save_only_model
        )
        if lifted:
            training_args.save_only_model = True
        try:
            super().__init__(*args, callbacks=ours, **kwargs)
        finally:
            if lifted:
                training_args.save_only_model = False
        self.callback_handler.callbacks = in_run_order(self.callback_handler.callbacks, ours)
        self.train_sampler, self.samples_per_step = train_sampler, samples_per_step
        self.train_blocks = train_blocks  # blocks in the training split: epochs are passes over them
        self.tokens_per_byte = tokens_per_byte  # of the validation text: loss -> bits per byte
        self.decay_embeddings = decay_embeddings
        self.run_files = run_files or {}  # name -> text, written into every checkpoint (recipe.yaml, resolved.yaml)
        self.data_info = None  # data fingerprint, seq_len, tokenizer hash: each checkpoint's data.json (run.py)
        self.optimizer_section = optimizer_section  # the recipe's `optimizer:` (None: TrainingArguments' optim)
        self.sequence_parallel = sequence_parallel  # the model's tp groups split the positions (models/parallel.py)
        check_muon_launch(optimizer_section, self.is_deepspeed_enabled or self.is_fsdp_enabled)
        self.nonfinite = NonFiniteWatch(nonfinite, self.is_deepspeed_enabled)
        self.skipped_before = 0  # optimizer steps the sessions before a resume skipped
        self.resumed_from = None  # the checkpoint train() resumes (a path), if any
        self._keep = self.args.save_total_limit  # checkpoints rotation keeps (train() takes it from the Trainer)
        self._checkpoint_layout = False  # _save: writing a checkpoint, in the model's own layout
        self.grad_stats = None  # a GradStatsCallback, fed the pre-clip norm of every step
        self.expert_load = None  # MoE: a training/moe.py ExpertLoad, whose hooks saw this micro-step's routing
        # Our compute_loss divides by num_items_in_batch itself, like HF's model losses do.
        self.model_accepts_loss_kwargs = True
        self.lm_loss = CausalLMLoss(loss) if loss.impl != "none" else None  # none: HF's own loss
        self._tap = HiddenStateTap(self.model.get_output_embeddings()) if self.lm_loss is not None else None

    @property
    def skipped_steps(self) -> int:
        """Optimizer steps skipped in this session (train() call); ``skipped_before``: in the ones before."""
        return self.nonfinite.optimizer.skipped if self.nonfinite.optimizer is not None else 0

    # ---- data ------------------------------------------------------------------------------
    def _get_train_sampler(self, train_dataset=None):
        return self.train_sampler

    def position_data(self, global_step: int) -> None:
        self.train_sampler.start = global_step * self.samples_per_step

    # ---- optimizer -------------------------------------------------------------------------
    def get_decay_parameter_names(self, model: nn.Module) -> list[str]:
        # Matrices only: norms and biases are 1-D; embedding tables (and a head tied to one) are
        # excluded unless the recipe asks for them (optimizer.decay_embeddings).
        embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
        return [
            name
            for name, p in model.named_parameters()
            if p.ndim >= 2 and (self.decay_embeddings or id(p) not in embeddings)
        ]

    def create_optimizer(self, model=None):
        fresh = self.optimizer is None
        opt_model = self.model if model is None else model
        if fresh and self.optimizer_section is not None and self.optimizer_section.name == "muon":
            self.optimizer = build_muon_adamw(
                opt_model, self.args, self.get_decay_parameter_names(opt_model), self.optimizer_section
            )  # Trainer's create_optimizer then keeps it
        elif fresh and self.args.optim in ADAMW_TORCH and len(param_meshes(opt_model)) > 1:  # tensor parallelism
            self.optimizer = build_adamw_by_mesh(opt_model, self.args, self.get_decay_parameter_names(opt_model))
        optimizer = super().create_optimizer(model)
        if fresh and self.nonfinite.policy.skips:  # wrapped once, when made (a later call gets it back)
            optimizer = self.optimizer = self.nonfinite.optimizer = SkipStepOptimizer(
                optimizer, self.nonfinite.policy, self.args.device, self.args.world_size
            )
        return optimizer

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
        if self.nonfinite.optimizer is not None and self.state.global_step >= self.state.max_steps:
            self.nonfinite.optimizer.check_fraction(self.state.global_step)
        return output

    # ---- loss --------------------------------------------------------------------------------
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self._tap is None:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        # context parallelism: each rank holds chunks of the sequence, and the Trainer's shifted labels with them
        shifted = inputs.get("shift_labels") is not None
        labels = inputs["shift_labels"] if shifted else inputs["labels"]
        own_aux = self.expert_load is not None and self.expert_load.aux_loss is not None  # training/moe.py
        if own_aux:
            self.expert_load.logits.clear()  # a checkpointed backward's recomputed forward kept some again
        self._tap.active = True
        try:
            outputs = model(
                input_ids=inputs["input_ids"],
                position_ids=inputs.get("position_ids"),
                use_cache=False,
                **({"output_router_logits": False} if own_aux else {}),
            )
        finally:
            self._tap.active = False
        hidden, self._tap.hidden = self._tap.hidden, None
        weight = self.accelerator.unwrap_model(model).get_output_embeddings().weight
        parallel = getattr(self.accelerator, "parallelism_config", None)
        tp = parallel.tp_size if parallel is not None else 1
        # The loss runs outside the model's forward, so outside the autocast accelerate wraps it in:
        # without this the LM-head matmuls (a fifth of all FLOPs at a 151k vocabulary) run in fp32.
        with self.accelerator.autocast():
            loss = None
            if self.sequence_parallel and model.training:
                # models/parallel.py: the final norm's output holds this rank's positions only
                if hidden.shape[1] * tp != labels.shape[1]:
                    raise RuntimeError(
                        f"sequence parallelism: the head got {hidden.shape[1]} positions of {labels.shape[1]} "
                        f"(expected 1/{tp}): the model was not loaded with it (models/parallel.py)"
                    )
                loss = sequence_parallel_loss(self.lm_loss, hidden, weight, labels, num_items_in_batch, shifted)
            elif tp > 1 and model.training:  # each rank its rows' share
                loss = tensor_parallel_loss(self.lm_loss, hidden, weight, labels, num_items_in_batch, shifted)
            if loss is None:
                # the head's vocabulary shards gathered (its backward slices the gradient back) under tp: every
                # rank of the group computes the same loss, as transformers' gathered logits would
                whole = weight.full_tensor() if hasattr(weight, "full_tensor") else weight
                loss = self.lm_loss(hidden, whole, labels, num_items_in_batch, training=model.training, shifted=shifted)
        # MoE: transformers' load-balancing loss, from the logits the routers' hooks kept, else the model's output
        aux = self.expert_load.take_aux_loss() if own_aux else getattr(outputs, "aux_loss", None)
        if aux is not None and model.training:  # evaluation: cross-entropy only
            loss = loss + balancing_term(aux, self.accelerator.unwrap_model(model).config, labels, num_items_in_batch)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            # As Trainer.compute_loss: num_items_in_batch counts all ranks' tokens and DDP averages
            # gradients over ranks, so scale back up; a tensor-parallel group's ranks share one batch.
            loss = loss * (self.accelerator.num_processes // tp)
        return (loss, {"loss": loss}) if return_outputs else loss

    # ---- non-finite values (training/nonfinite.py) ---------------------------------------------------
    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.expert_load is not None:  # after the backward, which may have recomputed the forward
            self.expert_load.count()
        self._watch("loss", loss)
        skip = self.nonfinite.optimizer
        if skip is None:
            return loss
        skip.add_loss(loss)  # the step's loss, left out of the log if the step is skipped
        return torch.zeros_like(loss) if skip.skip_next else loss  # keep the logged mean finite

    def _clip_grad_norm(self, model):
        if self.nonfinite.skipping:
            model.zero_grad(set_to_none=True)  # grads of later micro-steps too
        return super()._clip_grad_norm(model)

    def _get_grad_norm(self, model, grad_norm=None):
        # Every optimizer step comes here, with _clip_grad_norm's norm, or at max_grad_norm 0 (where the Trainer
        # does not clip) with none: the Trainer then measures it unclipped, so the check and telemetry run anyway.
        if grad_norm is None and self.nonfinite.skipping:
            model.zero_grad(set_to_none=True)
        norm = super()._get_grad_norm(model, grad_norm)
        if hasattr(norm, "full_tensor"):  # FSDP2: a DTensor, which .cpu()/.tolist()/.item() refuse
            norm = norm.full_tensor()
        if norm is not None:
            # DeepSpeed hands the norm back as a Python float, already read from the GPU: watched as well, on the
            # device of the other watched values, which the check stacks.
            watched = norm if torch.is_tensor(norm) else torch.tensor(float(norm), device=self.args.device)
            if self.grad_stats is not None:
                self.grad_stats.record(self.state.global_step + 1, watched)
            # A finite loss can still give non-finite gradients; catch them before the optimizer step.
            self._watch("gradient norm", watched)
        return norm

    def _watch(self, what: str, value: torch.Tensor) -> None:
        if self.nonfinite.watch(what, self.state.global_step + 1, value):  # skipped: no update from these gradients
            self.model.zero_grad(set_to_none=True)

    def check_finite(self) -> None:
        """Every value watched so far is finite, or the run stops (under ``stop``: the deferred check)."""
        self.nonfinite.check()

    # ---- logs and evaluation -----------------------------------------------------------------------
    def log(self, logs, *args, **kwargs):
        if "loss" in logs:  # a training window: its loss was just read from the GPU anyway
            self.check_finite()
            if self.nonfinite.optimizer is not None:
                # The Trainer's window mean counts a skipped step as loss 0 (training_step's return; or its finite
                # loss, when only the gradients were not): the mean of the steps taken instead.
                logs.update(self.nonfinite.optimizer.window_figures())
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

    def evaluation_loop(self, *args, **kwargs):
        parallel = getattr(self.accelerator, "parallelism_config", None)
        if parallel is not None and parallel.tp_size * parallel.cp_size > 1:
            self.gather_function = self._gather_once_per_group  # the Trainer puts its own back at the loop's end
        output = super().evaluation_loop(*args, **kwargs)
        for key in [k for k in output.metrics if k.endswith("_loss")]:
            output.metrics[key.replace("_loss", "_perplexity")] = math.exp(min(output.metrics[key], 50.0))
            if self.tokens_per_byte:  # tokenizer-independent: comparable across vocabularies
                output.metrics[key.replace("_loss", "_bpb")] = bits_per_byte(output.metrics[key], self.tokens_per_byte)
        return output

    def _gather_once_per_group(self, tensors, **_):
        """gather_for_metrics with one value per tensor- or context-parallel group: the mean over its ranks, which
        hold the same loss (tp) or the parts of one sequence's (cp, each scaled as in training, so that their mean
        is the group's). A gather over every rank counted each batch tp x cp times but kept the last, shorter
        one's remainder once, from the first rank: under tp 2 that weighted it half (0.024 off the one-process loss
        on a batch of 16 and one of 4), under cp it kept a part. accelerate's mesh puts tp and cp innermost, so
        each group's ranks are consecutive."""
        parallel = self.accelerator.parallelism_config
        group = parallel.tp_size * parallel.cp_size
        data = self.accelerator.gather(tensors)
        data = data.reshape(self.accelerator.num_processes // group, group, -1, *data.shape[1:]).mean(1)
        data = data.flatten(0, 1)
        state = self.accelerator.gradient_state
        if state.end_of_dataloader and state.remainder > 0:
            data = data[: state.remainder]
        return data

    # ---- checkpoints -------------------------------------------------------------------------
    def _issue_warnings_after_load(self, load_result):
        # Not in PRIVATE_HOOKS: a transformers without this method brings the tied head's warning back, nothing worse.
        super()._issue_warnings_after_load(check_loaded_weights(self.accelerator.unwrap_model(self.model), load_result))

    def save_model(self, output_dir=None, _internal_call=False):
        self.check_finite()  # never save weights that a bad step has touched
        self._checkpoint_layout = _internal_call
        try:
            with saved_as_from_the_hub(self.accelerator.unwrap_model(self.model).config), no_progress_bars():
                if sharded_at_load(self):  # tensor parallelism: every rank joins save_pretrained's gather
                    self._save(output_dir or self.args.output_dir)
                elif self.is_fsdp_enabled and not _internal_call and sharded_state_dicts(self):
                    # the Trainer's save_model writes nothing there (a final export came out empty): every rank
                    # gathers, the main one saves. Checkpoints keep the Trainer's shards, which resume reads.
                    state_dict = self.accelerator.get_state_dict(self.model)
                    if self.args.should_save:
                        self._save(output_dir or self.args.output_dir, state_dict=state_dict)
                else:
                    super().save_model(output_dir, _internal_call=_internal_call)
        finally:
            self._checkpoint_layout = False

    def _save(self, output_dir=None, state_dict=None):
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if sharded_at_load(self):  # on every rank (save_model), the Hub's layout outside checkpoints
            return save_in_model_layout(self, output_dir, state_dict, hub_layout=not self._checkpoint_layout)
        if not self._checkpoint_layout:  # final/ and exports: the Hub's layout
            return super()._save(output_dir, state_dict=state_dict)
        save_in_model_layout(self, output_dir, state_dict)

    # Tensor parallelism (a model sharded at load): the weights are saved whole (save_model), the optimizer states
    # by every rank (the Trainer's torch.save on the main process would keep rank 0's shards only), and a resume loads
    # both into the shards.
    def _save_optimizer_and_scheduler(self, output_dir):
        if not sharded_at_load(self):
            return super()._save_optimizer_and_scheduler(output_dir)
        save_sharded_optimizer(self.accelerator.unwrap_model(self.model), torch_optimizer(self.optimizer), output_dir)
        if self.args.should_save:
            torch.save(self.lr_scheduler.state_dict(), Path(output_dir) / SCHEDULER_NAME)

    # and a checkpoint without FSDP resumed under FSDP: its whole weights and optimizer states sharded in place
    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        if not sharded_at_load(self) and not whole_into_fsdp(self, resume_from_checkpoint):
            return super()._load_from_checkpoint(resume_from_checkpoint, model)
        load_whole_weights_into_shards(model if model is not None else self.model, resume_from_checkpoint)

    def _load_optimizer_and_scheduler(self, checkpoint):
        # a tensor-parallel checkpoint's states, read back at this run's tp degree or without tp, or one without
        # FSDP under FSDP (run.py refused the other layouts at start)
        if whole_into_fsdp(self, checkpoint):
            load_whole_optimizer_into_shards(self.model_wrapped, torch_optimizer(self.optimizer), checkpoint)
        elif checkpoint is None or not (Path(checkpoint) / SHARDED_OPTIMIZER_DIR).is_dir():
            return super()._load_optimizer_and_scheduler(checkpoint)
        else:
            load_sharded_optimizer(
                self.accelerator.unwrap_model(self.model), torch_optimizer(self.optimizer), checkpoint
            )
        load_scheduler_state(self.lr_scheduler, Path(checkpoint) / SCHEDULER_NAME)

    def _save_checkpoint(self, model, trial):
        # The Trainer's rotation is off (train()): with save_total_limit=1 it deleted the last complete
        # checkpoint before our marker existed, and a kill there left none. Ours comes after the marker and the barrier.
        run_dir = Path(self._get_output_dir(trial))
        folder = run_dir / f"checkpoint-{self.state.global_step}"
        if self.args.should_save and (folder / COMPLETE_MARKER).exists():  # saving over an older one (e.g. a
            (folder / COMPLETE_MARKER).unlink()  # damaged one resume skipped): its marker must not vouch for it
            drop_derived_copies(folder)  # nor its copies made for a resume
        with writing_checkpoint(folder, self.args.should_save):
            super()._save_checkpoint(model, trial)
            if self.args.should_save:
                write_recipe_and_data(folder, self.run_files, self.data_info)
                write_complete_marker(folder, self.state.global_step)
        if self.args.world_size > 1:
            self.accelerator.wait_for_everyone()
        if self.args.should_save:
            rotate_checkpoints(run_dir, self._keep, self.state.best_model_checkpoint)
