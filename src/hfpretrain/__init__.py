"""hfpretrain: pretrain language models from scratch on the Hugging Face stack.

Data flows one way; each subpackage imports only from those before it:
    data -> models -> training -> eval -> study
"""

__version__ = "0.1.0"
