"""hfpretrain: pretrain language models from scratch on the Hugging Face stack.

Data flows one way; each subpackage imports only from those before it:
    data -> models -> training -> eval -> study
"""

__version__ = "0.1.0"


def _quiet_torchao_on_cpu() -> None:
    """torchao (the [fp8] extra) warns at import that its CUDA kernels do not load on a CPU-only torch, and
    transformers imports it whenever it is installed: two lines of noise in every CLI's output, which also broke
    their one-line errors. Only that message is dropped."""
    import logging

    class _Filter(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return not (record.getMessage().startswith("Failed to load ") and "torchao" in record.getMessage())

    logging.getLogger("torchao").addFilter(_Filter())


_quiet_torchao_on_cpu()
