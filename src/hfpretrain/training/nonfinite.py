"""``nan_policy``: what a NaN or an infinity in a training step does, instead of training on garbage.

The trainer watches each micro-step's loss and each optimizer step's gradient norm (:class:`NonFiniteWatch`).

* ``stop``: a non-finite value stops the run (:class:`NonFiniteLossError`, naming the value and the step). A
  logging window's values are checked together when the window is logged (the log reads the loss anyway) and
  always before a save, so the check adds no host synchronisation (the CPU keeps queueing steps ahead of the GPU)
  and a bad step never reaches a checkpoint.
* ``skip``: each value is checked at once, since its optimizer step must not happen, and
  :class:`SkipStepOptimizer` wraps the optimizer: ``step()`` does nothing for a step whose loss or gradient norm
  was non-finite, on every rank together. A skipped step is left out of the logged loss. More skipped steps than
  ``max_skipped_steps``, or than ``max_skipped_fraction`` of the run's steps (earlier sessions' skips count), stop
  the run. Not under DeepSpeed, which steps its own optimizer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

logger = logging.getLogger("hfpretrain")

# Before this many optimizer steps the share of skipped ones says little; it is checked at the run's end anyway.
FRACTION_CHECKED_FROM = 20


class NonFiniteLossError(RuntimeError):
    pass


@dataclass(frozen=True)
class NonFinitePolicy:
    policy: str = "stop"  # the recipe's nan_policy: "stop" or "skip"
    max_skipped_steps: int = 10  # skip: more skipped optimizer steps than this stop the run
    max_skipped_fraction: float = 0.05  # ... as do more than this share of the run's steps

    @property
    def skips(self) -> bool:
        return self.policy == "skip"


class NonFiniteWatch:
    """The values a step must keep finite. Under ``skip`` (once :attr:`optimizer`, the step to skip, exists) each is
    checked as it comes; otherwise all pending ones are checked together by :meth:`check`."""

    def __init__(self, policy: NonFinitePolicy, deepspeed: bool = False):
        if policy.skips and deepspeed:
            raise ValueError(
                "nan_policy=skip is not supported under DeepSpeed (it steps its own optimizer): use nan_policy=stop"
            )
        self.policy = policy
        self.optimizer: SkipStepOptimizer | None = None
        self._pending = []  # (what, optimizer step, value)

    @property
    def skipping(self) -> bool:
        """The coming optimizer step is to be skipped: no update from its gradients."""
        return self.optimizer is not None and self.optimizer.skip_next

    def watch(self, what: str, step: int, value: torch.Tensor) -> bool:
        """Keep ``value`` of optimizer step ``step`` for the check; True when it skips that step."""
        self._pending.append((what, step, value.detach()))
        return self.optimizer is not None and self.check()

    def check(self) -> bool:
        """Stop the run at the first non-finite pending value, or under ``skip`` mark its step to be skipped (True)."""
        pending, self._pending = self._pending, []
        if not pending or bool(torch.stack([v.float().reshape(()) for _, _, v in pending]).isfinite().all()):
            return False  # one read of the GPU for the whole window
        what, step, value = next(p for p in pending if not torch.isfinite(p[2]))
        what = f"{what} is {value.item()}"
        if self.optimizer is None:
            if self.policy.skips:  # no optimizer of ours to skip: DeepSpeed steps its own
                what += " (nan_policy=skip is not supported under DeepSpeed)"
            raise NonFiniteLossError(
                f"{what} at step {step}: stopping (nan_policy=stop); resume from the last "
                "checkpoint with a lower learning rate, or set nan_policy=skip"
            )
        logger.warning("%s at step %d: skipping this optimizer step", what, step)
        self.optimizer.skip_next = True
        return True


class SkipStepOptimizer(torch.optim.Optimizer):
    """``nan_policy=skip``: the run's optimizer, wrapped, after OLMo-core's skip-step optimizer. ``step()`` does
    nothing when :attr:`skip_next` says a value of this step was non-finite on any rank, counts the skip and stops the
    run past the policy's ceilings. Everything else (param groups, state, state dicts, ``zero_grad``) is the wrapped
    optimizer's, so the Trainer, the LR scheduler, accelerate and checkpoints see the same optimizer.

    It also keeps the loss of each step taken: the Trainer's logged mean would count a skipped step as a loss of 0."""

    def __init__(self, optimizer: torch.optim.Optimizer, policy: NonFinitePolicy, device=None, world_size: int = 1):
        # No Optimizer.__init__: the groups and state are the wrapped optimizer's (as in accelerate's wrapper).
        self.optimizer, self.policy, self.device, self.world_size = optimizer, policy, device, world_size
        self.skip_next = False
        self.steps = 0  # optimizer steps of the run, this one included once step() is called
        self.skipped = 0  # in this session (train() call)
        self.skipped_before = 0  # in the sessions before a resume
        self._step_loss = None
        self._window_loss, self._window_steps, self._window_skipped = None, 0, 0

    def resume(self, steps: int, skipped_before: int) -> None:
        """A session starts after ``steps`` optimizer steps, ``skipped_before`` of them skipped."""
        self.steps, self.skipped_before = steps, skipped_before

    def add_loss(self, loss: torch.Tensor) -> None:
        """A micro-step's loss, kept apart until the step is taken or skipped."""
        self._step_loss = loss.detach() if self._step_loss is None else self._step_loss + loss.detach()

    def step(self, closure=None):
        step_loss, self._step_loss = self._step_loss, None
        skip, self.skip_next = self.skip_next, False
        self.steps += 1
        if self.world_size > 1 and torch.distributed.is_initialized():
            # Every rank skips, or none: a rank whose micro-step was non-finite zeroed its gradients before the
            # all-reduce, so the others may see a finite norm (and would step alone).
            flag = torch.tensor(float(skip), device=self.device)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            skip = bool(flag)
        if not skip:
            if step_loss is not None:
                self._window_loss = step_loss if self._window_loss is None else self._window_loss + step_loss
                self._window_steps += 1
            return self.optimizer.step(closure)
        self.skipped += 1
        self._window_skipped += 1
        skipped = self.skipped_before + self.skipped
        if skipped > self.policy.max_skipped_steps:
            raise NonFiniteLossError(
                f"{skipped} optimizer steps skipped for non-finite values (more than "
                f"max_skipped_steps={self.policy.max_skipped_steps}): stopping; resume from the last checkpoint "
                "with a lower learning rate"
            )
        if self.steps >= FRACTION_CHECKED_FROM:
            self.check_fraction(self.steps)
        return None

    def check_fraction(self, steps: int) -> None:
        """Stop when more than ``max_skipped_fraction`` of the run's first ``steps`` optimizer steps were skipped."""
        skipped = self.skipped_before + self.skipped
        if skipped and skipped > self.policy.max_skipped_fraction * steps:
            raise NonFiniteLossError(
                f"{skipped} of {steps} optimizer steps skipped for non-finite values (more than "
                f"max_skipped_fraction={self.policy.max_skipped_fraction:g}): stopping; resume from an earlier "
                "checkpoint with a lower learning rate"
            )

    def window_figures(self) -> dict:
        """For a training log, when it skipped a step: its ``loss``, the mean of the steps taken (over all ranks;
        every rank calls this together, as the Trainer gathers its loss), and ``skipped_steps``. Starts a window."""
        figures = {}
        if self._window_skipped:
            figures = {
                "loss": self._mean_over_ranks(self._window_loss, self._window_steps),
                "skipped_steps": self._window_skipped,
            }
        self._window_loss, self._window_steps, self._window_skipped = None, 0, 0
        return figures

    def _mean_over_ranks(self, total: torch.Tensor | None, steps: int) -> float:
        if not steps:
            return float("nan")
        total = total.detach().float().clone()
        if self.world_size > 1 and torch.distributed.is_initialized():
            torch.distributed.all_reduce(total)
            total /= self.world_size
        return float(total) / steps

    # ---- the wrapped optimizer's -------------------------------------------------------------
    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, groups):
        self.optimizer.param_groups = groups

    @property
    def state(self):
        return self.optimizer.state

    @state.setter
    def state(self, state):
        self.optimizer.state = state

    @property
    def defaults(self):
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, defaults):
        self.optimizer.defaults = defaults

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict):
        self.optimizer.load_state_dict(state_dict)

    def zero_grad(self, set_to_none: bool = True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group):
        self.optimizer.add_param_group(param_group)

    def __getattr__(self, name):  # anything else (hooks, an optimizer's own methods): the wrapped one's
        if name == "optimizer":  # not set yet (a copy being made)
            raise AttributeError(name)
        return getattr(self.optimizer, name)

    # Writes go to the wrapped optimizer too, unless the wrapper owns the name (set in __init__, or defined on the
    # class: step, which an LR scheduler re-binds on the object it holds). The fp16 GradScaler sets grad_scale and
    # found_inf on the optimizer it is handed, this wrapper, for the fused AdamW kernel to read: on the wrapper
    # that kernel never saw them and stepped on scaled, non-finite gradients.
    _OWN = frozenset(
        {
            "optimizer",
            "policy",
            "device",
            "world_size",
            "skip_next",
            "steps",
            "skipped",
            "skipped_before",
            "_step_loss",
            "_window_loss",
            "_window_steps",
            "_window_skipped",
        }
    )

    def _owns(self, name: str) -> bool:
        return name in self._OWN or name in self.__dict__ or hasattr(type(self), name)

    def __setattr__(self, name, value):
        if self._owns(name):
            object.__setattr__(self, name, value)
        else:
            setattr(self.optimizer, name, value)

    def __delattr__(self, name):
        if name in self.__dict__:
            object.__delattr__(self, name)
        else:
            delattr(self.optimizer, name)

    def __getstate__(self):
        return self.__dict__

    def __setstate__(self, state):
        self.__dict__.update(state)
