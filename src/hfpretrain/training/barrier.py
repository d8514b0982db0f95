"""A hang turned into an error that names the late rank: every rank checks in at the start of training and after each
checkpoint through torch.distributed's monitored barrier (``parallel.timeout_s``), on a gloo group of its own (the
monitored barrier is gloo's; on a GPU launch it runs beside NCCL, on the host). Rank 0 waits for every other rank and
names those that did not arrive; a collective that hangs elsewhere ends at the process group's timeout, which
``training.ddp_timeout`` takes from ``parallel.timeout_s`` unless the recipe sets it."""

from __future__ import annotations

import logging
import re
from datetime import timedelta

import torch.distributed as dist
from transformers import TrainerCallback

from .callbacks import CONTROL
from .config import RecipeError

logger = logging.getLogger("hfpretrain")

_GROUPS: dict = {}  # the gloo group per default process group (made once: new_group is itself a collective)


class LateRankError(RuntimeError):
    """A rank did not reach a check-in point within ``parallel.timeout_s``."""


def _gloo_group():
    default = dist.group.WORLD
    if dist.get_backend() == "gloo":
        return default
    if default not in _GROUPS:
        _GROUPS[default] = dist.new_group(backend="gloo")
    return _GROUPS[default]


def late_ranks(message: str, world: int) -> list[int]:
    """The ranks a monitored barrier's error names ("Ranks 1, 3 failed to pass monitoredBarrier", "Rank 1 failed
    ..."); every other rank when it names none."""
    found = re.search(r"[Rr]anks? ([\d, ]+) failed to pass", message)
    if found:
        return [int(r) for r in re.findall(r"\d+", found.group(1))]
    return list(range(1, world))


def wait_for_ranks(where: str, timeout_s: float) -> None:
    """Every rank of the launch at ``where`` within ``timeout_s`` seconds, or LateRankError naming the ranks that
    are late (on rank 0) or that rank 0 did not answer (on the others). Nothing on one process."""
    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        dist.monitored_barrier(group=_gloo_group(), timeout=timedelta(seconds=timeout_s), wait_all_ranks=True)
    except RuntimeError as err:
        text = str(err)
        if rank == 0:
            late = late_ranks(text, world)
            raise LateRankError(
                f"{where}: rank{'s' if len(late) > 1 else ''} {', '.join(map(str, late))} of {world} "
                f"did not arrive within parallel.timeout_s={timeout_s:g} s (a hung or much slower "
                "process: its own log says where it stopped)"
            ) from None
        raise LateRankError(
            f"{where}: rank {rank} of {world} got no answer from rank 0 within parallel.timeout_s="
            f"{timeout_s:g} s (rank 0's log names the late ranks)"
        ) from None


# How long the other processes wait for the main process's one-off work (a checkpoint converted for a resume): far
# beyond parallel.timeout_s, which the work may outlast on a large model; a main process that dies ends the launch
# (the launcher stops the others), so the wait never outlives it
MAIN_WORK_TIMEOUT = timedelta(hours=12)


def main_process_does(work, what: str) -> None:
    """``work()`` on the launch's main process while the others wait for its outcome, on a gloo group of its own
    (made first, by every process: making it is a collective) with :data:`MAIN_WORK_TIMEOUT`. Whatever ``work``
    raises reaches every process as one line, ``what: ...``: a RecipeError everywhere (the main process's
    KeyboardInterrupt or SystemExit is raised again there, once the others have the line)."""
    distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    group = dist.new_group(backend="gloo", timeout=MAIN_WORK_TIMEOUT) if distributed else None
    problem, raised = None, None
    if not distributed or dist.get_rank() == 0:
        try:
            work()
        except BaseException as err:  # noqa: BLE001 - every process must hear the outcome, whatever it is
            raised = err
            first = (str(err).strip().splitlines() or [""])[0]
            problem = first if isinstance(err, RecipeError) else f"{what}: {first or type(err).__name__}"
    if distributed:
        box = [problem]
        dist.broadcast_object_list(box, src=0, group=group)
        problem = box[0]
    if isinstance(raised, (KeyboardInterrupt, SystemExit)):
        raise raised
    if problem:
        raise RecipeError(problem) from raised


class RankCheckCallback(TrainerCallback):
    """The check-ins of a launch of several processes: before the first step and after each checkpoint."""

    order = CONTROL + 20  # after the SIGTERM checkpoint's callback

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s

    def on_train_begin(self, args, state, control, **kwargs):
        wait_for_ranks("start of training", self.timeout_s)

    def on_save(self, args, state, control, **kwargs):
        wait_for_ranks(f"checkpoint-{state.global_step}", self.timeout_s)
