"""Training telemetry and safety as ``TrainerCallback``s, one small class per concern.

Telemetry callbacks add their figures to the ``logs`` dict in ``on_log``. Each callback of the project declares when
it runs with a class attribute ``order`` (lowest first; the bands below), and ``PretrainTrainer`` sorts all of its
callbacks by it once (:func:`in_run_order`): the figures are added before the JSONL log and the reporting
integrations (wandb, TensorBoard) record them, so all see the same numbers. Nothing here syncs the GPU outside
logging steps.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import sys
import threading
import time
import warnings
from pathlib import Path

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from hfpretrain.data.mixture import MixtureSchedule
from hfpretrain.models.memory import GIB

logger = logging.getLogger("hfpretrain")

# The bands of ``order``, in the order they run:
BOOKKEEPING = 100  # figures that follow from the step alone: tokens seen per source, the experts' load and balancing
TELEMETRY = 200  # throughput, memory, gradient statistics
LOG = 300  # the JSONL log: writes what the callbacks before it added
CONTROL = 400  # SIGTERM and Ctrl-C (a checkpoint at the step's end), the profiler's window
CALLER = 500  # the caller's callbacks, which declare no order (eval/: lm-eval, long-context scores)
TRANSFORMERS = 600  # transformers' own: its flow control (DefaultFlowCallback) and the report_to integrations
TRAINER = 700  # PretrainTrainer's own (the resume: the data's position, the optimizer's state)
CONSOLE = 800  # the progress bar or line, instead of transformers' own
CHECKS = 900  # checks after the first step (did torch.compile make graphs)
WANDB = 1000  # our additions to the W&B run, which transformers' WandbCallback must have started


def in_run_order(callbacks: list, ours: list) -> list:
    """The Trainer's ``callbacks`` (transformers' own and ``ours``, the instances handed to it) in the order they run:
    by ``order``, a caller's callback without one in the CALLER band, transformers' own in theirs (in the order
    transformers gave them). When one of ours shows the progress, transformers' bar or printer is left out."""
    ours_ids = {id(cb) for cb in ours}

    def order(callback) -> int:
        return getattr(callback, "order", CALLER) if id(callback) in ours_ids else TRANSFORMERS

    console = any(order(cb) == CONSOLE for cb in ours)
    kept = [
        cb
        for cb in callbacks
        if id(cb) in ours_ids or not (console and type(cb) in (ProgressCallback, PrinterCallback))
    ]
    return sorted(kept, key=order)


class JsonlLogCallback(TrainerCallback):
    """One JSON object per line: the config snapshot, every log/eval record, checkpoints, the end."""

    order = LOG

    def __init__(self, path: str | Path, snapshot: dict):
        self.path, self.snapshot = Path(path), snapshot
        self._file = None

    def write(self, event: str, **data) -> None:
        if self._file is None:
            return
        self._file.write(json.dumps({"event": event, "time": time.time(), **data}, default=str) + "\n")
        self._file.flush()

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a")
            self.write("config", step=state.global_step, **self.snapshot)

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        event = "eval" if any(k.startswith("eval_") for k in logs) else "log"
        self.write(event, step=state.global_step, **logs)

    def on_save(self, args, state, control, **kwargs):
        self.write("checkpoint", step=state.global_step, path=f"{args.output_dir}/checkpoint-{state.global_step}")

    def on_train_end(self, args, state, control, **kwargs):
        self.write("end", step=state.global_step)  # the file stays open: the run's summary follows

    def close(self) -> None:
        """After the run's summary: one open handle per run would pile up in a study's process."""
        if self._file is not None:
            self._file.close()
            self._file = None


class WandbConfigCallback(TrainerCallback):
    """The resolved run (the recipe as written, what it resolved to, the plan) in the W&B run's config (the Trainer
    logs only TrainingArguments)."""

    order = WANDB

    def __init__(self, config: dict):
        self.config = config

    def on_train_begin(self, args, state, control, **kwargs):
        import wandb

        if wandb.run is not None and state.is_world_process_zero:
            wandb.run.config.update({f"hfpretrain/{k}": v for k, v in self.config.items()}, allow_val_change=True)


class ThroughputCallback(TrainerCallback):
    """Tokens/s, TFLOP/s and MFU per GPU and in total over each logging window.

    Time spent in evaluation and checkpointing is excluded (reported separately as the
    end-to-end figure at the end of the run), so the window measures training steps only.
    """

    order = TELEMETRY

    def __init__(
        self,
        tokens_per_step: int,
        flops_per_token: float,
        peak_flops_per_gpu: float | None,
        world_size: int,
        peak_flops_fp8_per_gpu: float | None = None,
    ):
        self.tokens_per_step, self.flops_per_token = tokens_per_step, flops_per_token
        self.peak, self.world, self.peak_fp8 = peak_flops_per_gpu, world_size, peak_flops_fp8_per_gpu
        self._window_start = self._last_step_end = self._train_start = None
        self._window_steps, self._excluded, self._start_step = 0, 0.0, 0

    def on_train_begin(self, args, state, control, **kwargs):
        self._window_start = self._last_step_end = self._train_start = time.perf_counter()
        self._start_step = state.global_step

    def on_step_end(self, args, state, control, **kwargs):
        self._window_steps += 1
        self._last_step_end = time.perf_counter()

    def _exclude_since_last_step(self):
        self._excluded += time.perf_counter() - self._last_step_end
        self._last_step_end = time.perf_counter()

    on_evaluate = lambda self, *a, **k: self._exclude_since_last_step()  # noqa: E731
    on_save = lambda self, *a, **k: self._exclude_since_last_step()  # noqa: E731

    def figures(self, tokens: float, seconds: float) -> dict:
        tok_s = tokens / max(seconds, 1e-9)
        out = {
            "tokens_per_s": tok_s,
            "tokens_per_s_per_gpu": tok_s / self.world,
            "tflops_per_gpu": tok_s * self.flops_per_token / self.world / 1e12,
        }
        if self.peak:
            out["mfu"] = out["tflops_per_gpu"] * 1e12 / self.peak
        if self.peak_fp8:
            out["mfu_fp8"] = out["tflops_per_gpu"] * 1e12 / self.peak_fp8
        return out

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None or "loss" not in logs:
            # not a training log (validation, lm-eval scores, ...): the work behind it is not training time
            self._exclude_since_last_step()
            return
        if self._window_steps == 0:
            return
        now = time.perf_counter()
        seconds = now - self._window_start - self._excluded
        logs.update(self.figures(self._window_steps * self.tokens_per_step, seconds))
        logs["tokens_seen"] = state.global_step * self.tokens_per_step
        self._window_start, self._window_steps, self._excluded = now, 0, 0.0

    def on_train_end(self, args, state, control, **kwargs):
        wall = time.perf_counter() - self._train_start
        self.end_to_end = self.figures((state.global_step - self._start_step) * self.tokens_per_step, wall)
        self.end_to_end["wall_s"] = wall


class MemoryCallback(TrainerCallback):
    """Allocated, peak and reserved GPU memory at each log (GiB, this process's device)."""

    order = TELEMETRY + 10

    def on_train_begin(self, args, state, control, **kwargs):
        if torch.cuda.is_available():  # this run's peak, not an earlier run's of the same process (a study)
            torch.cuda.reset_peak_memory_stats()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None or not torch.cuda.is_available():
            return
        logs["mem_allocated_gib"] = torch.cuda.memory_allocated() / GIB
        logs["mem_peak_gib"] = torch.cuda.max_memory_allocated() / GIB
        logs["mem_reserved_gib"] = torch.cuda.memory_reserved() / GIB


class GradStatsCallback(TrainerCallback):
    """Global grad norm of every step (kept on device, written at log time), and per-layer norms
    plus a histogram of log10|g| every ``interval`` steps (0: off)."""

    order = TELEMETRY + 20

    def __init__(self, jsonl: JsonlLogCallback, interval: int = 0):
        self.jsonl, self.interval = jsonl, interval
        self._norms, self._first_step = [], None

    def record(self, step: int, grad_norm) -> None:  # called by PretrainTrainer with each step's pre-clip norm
        if grad_norm is None:
            return
        if self._first_step is None:
            self._first_step = step
        self._norms.append(grad_norm.detach() if torch.is_tensor(grad_norm) else torch.tensor(float(grad_norm)))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not self._norms or logs is None or "loss" not in logs:
            return
        device = self._norms[0].device  # one copy to the host for the window, not one per step
        norms = torch.stack([n.to(device, torch.float32).reshape(()) for n in self._norms]).tolist()
        logs["grad_norm_max"] = max(norms)
        self.jsonl.write("grad_norm", first_step=self._first_step, values=norms)
        self._norms, self._first_step = [], None

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if not self.interval or (state.global_step + 1) % self.interval or model is None:
            return
        per_layer, samples, sharded, device = {}, [], False, None
        for name, p in model.named_parameters():
            match = re.search(r"\.(\d+)\.", name)
            squares = per_layer.setdefault(f"layer_{match.group(1)}" if match else name.rsplit(".", 1)[0], [])
            # FSDP2: a DTensor parameter, its gradient sharded likewise. Told by the parameter, not the gradient:
            # a rank that skipped a step has none, and every rank must still join the one all-reduce below.
            sharded = sharded or hasattr(p, "to_local")
            if p.grad is None:
                continue
            g = p.grad.detach()
            local = g.to_local() if hasattr(g, "to_local") else g
            device = local.device
            # squared norms, in fp32 without an fp32 copy of the gradient (a bf16 model's would double its size)
            squares.append(torch.linalg.vector_norm(local, dtype=torch.float32).square())
            # Every 97th element (a strided sample: cheap, unbiased enough), taken before the transform so that
            # only the sample is converted; of this rank's shard under FSDP2.
            samples.append(local.reshape(-1)[::97].float().abs().clamp_min(1e-30).log10())
        if not samples and not sharded:  # e.g. DeepSpeed keeps gradients in its own buffers
            return
        if device is None:
            device = next(model.parameters()).to_local().device
        layer_squares = torch.stack(
            [torch.stack(v).sum().to(device) if v else torch.zeros((), device=device) for v in per_layer.values()]
        )
        if sharded and torch.distributed.is_initialized():
            torch.distributed.all_reduce(layer_squares)  # the shards' squares, summed: one collective per step
        hist = torch.histc(torch.cat(samples), bins=40, min=-12, max=2) if samples else torch.zeros(40, device=device)
        host = torch.cat([layer_squares.sqrt(), hist.to(device)]).tolist()  # one read of the GPU
        self.jsonl.write(
            "grad_stats",
            step=state.global_step + 1,
            per_layer_norm=dict(zip(per_layer, host[: len(per_layer)])),
            log10_abs_grad_hist={"min": -12, "max": 2, "counts": host[len(per_layer) :]},
        )


# Set by SIGTERM or a first Ctrl-C and never cleared: a study (many runs in one process) must stop too, even when
# the signal lands between two runs.
STOP_REQUESTED = threading.Event()
STOP_SIGNALS = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "Ctrl-C"}
_stopped_by: list[str] = []  # the first stop signal's name


def stopped_by() -> str | None:
    """The signal that asked the run to stop (``SIGTERM`` or ``Ctrl-C``), or None."""
    return _stopped_by[0] if _stopped_by else None


def request_stop(signum: int, frame=None) -> None:
    """The stop signals' handler: the first one asks for a stop at the end of the step (with a checkpoint); a
    second Ctrl-C stops at once, as Ctrl-C does elsewhere."""
    if signum == signal.SIGINT and STOP_REQUESTED.is_set():
        raise KeyboardInterrupt
    if not STOP_REQUESTED.is_set():
        _stopped_by.append(STOP_SIGNALS.get(signum, str(signum)))
        if signum == signal.SIGINT:
            print(
                "\nCtrl-C: finishing this step and saving a checkpoint; Ctrl-C again stops at once, losing the "
                "steps since the last checkpoint",
                file=sys.stderr,
                flush=True,
            )
    STOP_REQUESTED.set()


class PreemptionCallback(TrainerCallback):
    """SIGTERM (cluster preemption) or Ctrl-C: finish the current step, save a checkpoint, stop cleanly.

    The handlers are this run's: installed when training starts and put back by :meth:`restore` when the run
    is over (after its final save), so importing the library or finishing a run leaves the process's
    signal handling as it was. The flag stays set: a study stops before its next run."""

    order = CONTROL

    def __init__(self):
        self._previous: dict = {}

    def on_train_begin(self, args, state, control, **kwargs):
        if not self._previous:
            self._previous = {signum: signal.signal(signum, request_stop) for signum in STOP_SIGNALS}

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def on_step_end(self, args, state, control, **kwargs):
        if STOP_REQUESTED.is_set():
            control.should_save = True
            control.should_training_stop = True


class ProfilerCallback(TrainerCallback):
    """NVTX ranges per step (``nvtx``) and a torch.profiler window over steps [start, stop): a Chrome
    trace, the kernels ranked by GPU time, and the host synchronisations per step (each one stalls
    the CPU until the GPU catches up; counted with ``torch.cuda.set_sync_debug_mode``). Every rank profiles its own
    work (under tensor or context parallelism the ranks differ), so with ``rank`` given its files carry it."""

    order = CONTROL + 10

    def __init__(self, out_dir: str | Path, window: list | None = None, nvtx: bool = False, rank: int | None = None):
        self.out_dir, self.nvtx = Path(out_dir), nvtx and torch.cuda.is_available()
        self.suffix = "" if rank is None else f"-rank{rank}"
        self.start, self.stop = (int(window[0]), int(window[1])) if window else (None, None)
        self._prof = self._syncs = None

    def on_step_begin(self, args, state, control, **kwargs):
        if self.nvtx:
            torch.cuda.nvtx.range_push(f"step {state.global_step + 1}")
        if self.start is not None and state.global_step == self.start and self._prof is None:
            acts = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                acts.append(torch.profiler.ProfilerActivity.CUDA)
                self._syncs = warnings.catch_warnings(record=True)
                self._sync_log = self._syncs.__enter__()
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
            self._prof = torch.profiler.profile(activities=acts, record_shapes=True)
            self._prof.__enter__()

    def on_step_end(self, args, state, control, **kwargs):
        if self.nvtx:
            torch.cuda.nvtx.range_pop()
        if self._prof is not None and state.global_step >= self.stop:
            self._prof.__exit__(None, None, None)
            self.out_dir.mkdir(parents=True, exist_ok=True)
            name = f"steps{self.start}-{self.stop}{self.suffix}"
            self._prof.export_chrome_trace(str(self.out_dir / f"trace-{name}.json"))
            sort = "cuda_time_total" if torch.cuda.is_available() else "cpu_time_total"
            table = self._prof.key_averages().table(sort_by=sort, row_limit=150, max_name_column_width=90)
            (self.out_dir / f"kernels-{name}.txt").write_text(table)
            if self._syncs is not None:
                torch.cuda.set_sync_debug_mode("default")
                self._syncs.__exit__(None, None, None)
                syncs = [str(w.message) for w in self._sync_log if "synchroniz" in str(w.message)]
                per_step = len(syncs) / max(1, self.stop - self.start)
                (self.out_dir / f"syncs-{name}.txt").write_text(
                    f"{len(syncs)} host synchronisations in {self.stop - self.start} steps ({per_step:g} per step)\n"
                    + "\n".join(syncs[:50])
                )
                logger.info("profiler: %g host synchronisations per step (%s)", per_step, self.out_dir)
            self._prof = self._syncs = None


def progress_line(state, logs: dict, eta_s: float | None = None) -> str | None:
    """One readable line for a log record: the step, its losses (training, validation, the final evaluation's with
    bits per byte), learning rate, tokens/s, MFU, and the time left; None when the record holds none of them."""
    parts = [f"step {state.global_step}/{state.max_steps}"]
    for key, label in (
        ("loss", "loss"),
        ("eval_loss", "val loss"),
        ("eval_bpb", "val bpb"),
        ("final_loss", "final val loss"),
        ("final_bpb", "final val bpb"),
        ("grad_norm", "grad norm"),
    ):
        if isinstance(logs.get(key), (int, float)):
            parts.append(f"{label} {logs[key]:.4g}")
    if isinstance(logs.get("learning_rate"), (int, float)):
        parts.append(f"lr {logs['learning_rate']:.3g}")
    if isinstance(logs.get("tokens_per_s"), (int, float)):
        parts.append(f"{logs['tokens_per_s']:,.0f} tok/s")
    if isinstance(logs.get("mfu"), (int, float)):
        parts.append(f"MFU {100 * logs['mfu']:.1f}%")
    if eta_s is not None:
        parts.append(f"eta {int(eta_s // 60)}m{int(eta_s % 60):02d}s")
    if "train_runtime" in logs:
        parts.append(
            f"done in {logs['train_runtime']:.1f}s, mean train loss {logs.get('train_loss', float('nan')):.4g}"
        )
    return " | ".join(parts) if len(parts) > 1 else None


class TelemetryProgressCallback(ProgressCallback):
    """On a terminal: the usual progress bar (its time left included), with loss, tokens/s and MFU beside it; an
    evaluation and the end of training as readable lines above it, never the Trainer's raw log dicts."""

    order = CONSOLE

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        bar = self.training_bar  # None once training is over (the final evaluation comes after it)
        if bar is not None:
            shown = {"loss": logs.get("loss"), "tok/s": logs.get("tokens_per_s"), "mfu": logs.get("mfu")}
            bar.set_postfix({k: f"{v:.4g}" for k, v in shown.items() if v is not None}, refresh=False)
        line = progress_line(state, logs) if "loss" not in logs else None  # an evaluation, the end of training
        if line:
            bar.write(line) if bar is not None else print(line, flush=True)


class LineProgressCallback(TrainerCallback):
    """Progress as one readable line per logging step, for logs that are files (a batch job, `| tee`, a
    study's worker log) or runs with ``disable_tqdm``: a progress bar's carriage returns were most of such
    a log's bytes, and each loss dict was printed raw. On a terminal the bar stays (TelemetryProgressCallback)."""

    order = CONSOLE

    def __init__(self):
        self.t0 = self.step0 = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        eta = None
        if "loss" in logs:
            # timed from the first logged step, not the start: the first steps' compilation and warm-up made a
            # 2-minute demo's first line say "eta 35m"
            if self.t0 is None:
                self.t0, self.step0 = time.time(), state.global_step
            elif state.global_step > self.step0 and state.max_steps > state.global_step:
                eta = (time.time() - self.t0) / (state.global_step - self.step0) * (state.max_steps - state.global_step)
        line = progress_line(state, logs, eta)
        if line:
            print(line, flush=True)


class CompileCheckCallback(TrainerCallback):
    """torch.compile can silently fall back to eager: after the first step, check that this run
    made graphs (the counter is per process: a study trains many models in one)."""

    order = CHECKS

    def __init__(self, n_compiled: int):
        from torch._dynamo.utils import counters

        self.n_compiled, self.checked = n_compiled, False
        self.graphs_before = counters["stats"]["unique_graphs"]

    def on_step_end(self, args, state, control, **kwargs):
        if self.checked or not self.n_compiled:
            return
        self.checked = True
        from torch._dynamo.utils import counters

        graphs = counters["stats"]["unique_graphs"] - self.graphs_before
        if graphs == 0:
            raise RuntimeError("model.compile was requested but torch.compile produced no graph in this run")
        logger.info("torch.compile active: %d graph(s) for %d compiled module(s)", graphs, self.n_compiled)


class MixtureLogCallback(TrainerCallback):
    """Adds ``tokens_seen/<source>`` and ``data_phase`` to every training log: arithmetic on the step."""

    order = BOOKKEEPING

    def __init__(self, schedule: MixtureSchedule, seq_len: int):
        self.schedule, self.seq_len = schedule, seq_len

    def figures(self, step: int) -> dict:
        n = step * self.schedule.samples_per_step
        out = {f"tokens_seen/{name}": c * self.seq_len for name, c in self.schedule.samples_per_source(n).items()}
        out["data_phase"] = self.schedule.phase_of(max(n - 1, 0)) + 1  # the phase of the last step taken
        return out

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is not None and "loss" in logs:
            logs.update(self.figures(state.global_step))
