"""hfpretrain: pretrain language models from scratch on the Hugging Face stack.

Data flows one way; each subpackage imports only from those before it:
    data -> models -> training -> eval -> study
"""

__version__ = "0.1.0"


def _quiet_known_third_party_lines() -> None:
    """Drop a few known lines that optional libraries log on import, on every command, whether the run uses them
    or not. The project imports torchao, DeepSpeed and lm-eval only where it uses them, but transformers imports
    torchao (its quantizers) and accelerate imports DeepSpeed whenever they are installed (the [test] and [all]
    extras install both), so they cannot be imported later. Each filter sits on the one logger that emits its
    line and matches that line alone; anything else those loggers say still shows.

    * torchao: "Failed to load ..." its CUDA kernels on a CPU-only torch.
    * torch.utils._pytree: torchao (0.18) registers two of its Enums as pytree constants at import, which torch
      2.13 calls deprecated ("<enum 'KernelPreference'> is an Enum subclass and is now natively supported ...").
      Only registrations of torchao's own classes are dropped.
    * DeepSpeed: "Setting accelerator to CPU. If you have GPU ..." when torch sees no GPU at all (then the
      project's own lines say "no CUDA GPU"); with a GPU present that DeepSpeed did not detect, it still shows.
    * lm_eval.api.task: "<task>: Custom kwargs can be passed to `--metadata` ...", advice for lm_eval's own
      command line that it gives for every task with a ``custom_dataset`` loader, which all the project's local
      tasks (eval/tasks/*.yaml) are.
    """
    import logging
    import sys

    def torchao_cpu_kernels(record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return message.startswith("Failed to load ") and "torchao" in message

    def torchao_enum_constant(record: logging.LogRecord) -> bool:
        cls = record.args[0] if isinstance(record.args, tuple) and record.args else None
        return "is an Enum subclass and is now natively supported" in str(record.msg) and getattr(
            cls, "__module__", ""
        ).startswith("torchao")

    def deepspeed_cpu_fallback(record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Setting accelerator to CPU."):
            return False
        torch = sys.modules.get("torch")  # DeepSpeed imports it before it logs this
        return torch is not None and torch.cuda.device_count() == 0

    def lm_eval_metadata_advice(record: logging.LogRecord) -> bool:
        return "Custom kwargs can be passed to `--metadata`" in str(record.msg)

    drops = {
        "torchao": torchao_cpu_kernels,
        "torch.utils._pytree": torchao_enum_constant,
        "DeepSpeed": deepspeed_cpu_fallback,
        "lm_eval.api.task": lm_eval_metadata_advice,
    }
    for name, drop in drops.items():
        # a filter on the logger itself (loggers are created once, by name: the library gets this same object)
        logging.getLogger(name).addFilter(lambda record, drop=drop: not drop(record))


_quiet_known_third_party_lines()
