"""The model zoo: config JSONs under ``configs/``, loading them with overrides, building models.

A zoo entry is a plain Hugging Face config JSON (``model_type`` picks the family), so every
architecture choice is a config field and an ablation is a config diff. ``load_config`` adds three
things on top of ``AutoConfig``: zoo names, checked overrides, and vocab sizing from the tokenizer
(padded up to a multiple of 128, refusing a model vocab that does not fit the tokenizer).
"""

from __future__ import annotations

import copy
import difflib
import json
import logging
import math
from pathlib import Path
from typing import Any

from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

from hfpretrain.models.backend import (
    FLEX_FA4,
    PACKED_SDPA,
    choose_attn_implementation,
    register_flex_fa4,
    register_packed_sdpa,
)

logger = logging.getLogger(__name__)

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
DEFAULT_PAD_VOCAB_MULTIPLE = 128
# Keys a zoo JSON or a saved config.json may carry that are not architecture fields.
_IGNORED_KEYS = {"architectures", "transformers_version", "_name_or_path", "torch_dtype", "dtype"}
# load_config options that are not config fields.
_EXTRA_OVERRIDES = {"pad_vocab_multiple"}


def zoo_names() -> list[str]:
    """Names of the config JSONs shipped with the package."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


def zoo_path(name: str) -> Path:
    path = CONFIG_DIR / f"{name}.json"
    if not path.is_file():
        close = difflib.get_close_matches(name, zoo_names(), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(zoo_names())}"
        raise ValueError(f"no model config named {name!r} in the zoo{hint}")
    return path


def _read_spec(spec: str | Path) -> tuple[dict[str, Any], str]:
    path = Path(spec).expanduser()
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise ValueError(f"{spec} is a directory without config.json")
    elif not path.is_file():
        if isinstance(spec, Path) or str(spec).endswith(".json") or "/" in str(spec):
            raise ValueError(f"model config {spec} does not exist")
        path = zoo_path(str(spec))
    with open(path) as fh:
        raw = json.load(fh)
    if "model_type" not in raw:
        raise ValueError(f"{path} has no 'model_type'; cannot tell the architecture family")
    return raw, str(path)


def pad_vocab(n: int, multiple: int = DEFAULT_PAD_VOCAB_MULTIPLE) -> int:
    """``n`` rounded up to a multiple of ``multiple`` (tensor-core friendly embedding/LM-head shapes)."""
    if multiple <= 1:
        return int(n)
    return int(math.ceil(n / multiple) * multiple)


def _valid_keys(model_type: str) -> set[str]:
    cfg = AutoConfig.for_model(model_type)
    keys = set(cfg.to_dict()) | set(vars(cfg))
    return {k for k in keys if not k.startswith("_")} | {"attn_implementation"}


def load_config(spec: str | Path, overrides: dict | None = None, vocab_size: int | None = None) -> PretrainedConfig:
    """Load a config from a zoo name, a JSON file or a directory holding ``config.json``.

    ``overrides`` are config field names (an unknown name is a ValueError naming the nearest valid
    one), plus ``pad_vocab_multiple`` (default 128). ``vocab_size`` is the tokenizer's ``len()``:
    a config without an explicit ``vocab_size`` gets it; a config with one must be able to hold the
    tokenizer (and be no more than the padding larger). Either way the vocab is then padded up to
    the multiple. Without ``vocab_size`` the config's own vocab is kept as it is.
    """
    raw, source = _read_spec(spec)
    raw = {k: v for k, v in raw.items() if k not in _IGNORED_KEYS}
    overrides = dict(overrides or {})
    multiple = int(overrides.pop("pad_vocab_multiple", DEFAULT_PAD_VOCAB_MULTIPLE))
    model_type = overrides.pop("model_type", raw["model_type"])
    valid = _valid_keys(model_type)
    if model_type == raw["model_type"]:
        # a field the config itself sets is one to override (Qwen3-MoE's and GLM-4-MoE's ``head_dim`` is read by
        # the model but absent from their configs' defaults)
        valid |= set(raw) - {"model_type"}
    for key in overrides:
        if key not in valid:
            close = difflib.get_close_matches(key, sorted(valid | _EXTRA_OVERRIDES), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"model.overrides.{key}: unknown config field {key!r} for model_type {model_type!r}{hint}")
    _check_override_types(overrides, raw, model_type)
    fields = {**raw, **overrides}
    fields.pop("model_type", None)
    explicit_vocab = fields.get("vocab_size")
    if vocab_size is not None:
        vocab_size = int(vocab_size)
        if explicit_vocab is None:
            fields["vocab_size"] = pad_vocab(vocab_size, multiple)
        else:
            explicit_vocab = int(explicit_vocab)
            if explicit_vocab < vocab_size:
                raise ValueError(
                    f"tokenizer has {vocab_size} tokens but model vocab_size is {explicit_vocab} "
                    f"(config {source}); use a config made for this tokenizer or override vocab_size"
                )
            if explicit_vocab > pad_vocab(vocab_size, multiple):
                raise ValueError(
                    f"tokenizer has {vocab_size} tokens but model vocab_size is {explicit_vocab}, more than "
                    f"the tokenizer padded to a multiple of {multiple} ({pad_vocab(vocab_size, multiple)}): "
                    f"config {source} was made for another tokenizer; override vocab_size to use it anyway"
                )
    if vocab_size is not None and pad_vocab(int(fields["vocab_size"]), multiple) != fields["vocab_size"]:
        # An explicit vocab (GPT-2's 50,257) is padded too: the LM head and the embedding's backward
        # on a misaligned dimension get slow cuBLAS kernels on Hopper. The extra rows are never a
        # target, so they only learn to be unlikely.
        padded = pad_vocab(int(fields["vocab_size"]), multiple)
        logger.info(
            "vocab_size %d padded to %d (a multiple of %d; model.overrides.pad_vocab_multiple=1 keeps it)",
            fields["vocab_size"],
            padded,
            multiple,
        )
        fields["vocab_size"] = padded
    attn = fields.pop("attn_implementation", None)
    try:
        config = AutoConfig.for_model(model_type, **fields)
    except Exception as e:  # the config class's own validation (huggingface_hub's strict dataclasses): one line
        if type(e).__name__.startswith("StrictDataclass") or isinstance(e, (TypeError, ValueError)):
            detail = " ".join(line.strip() for line in str(e).strip().splitlines()[-1:]) or type(e).__name__
            raise ValueError(f"config {source} with model.overrides {overrides}: {detail}") from None
        raise
    check_moe_config(config, source)
    _warn_kept_head_dim(config, overrides, source)
    if attn is not None:
        config.hfpretrain_attn_implementation = attn
    return config


def _check_override_types(overrides: dict, raw: dict, model_type: str) -> None:
    """A number where the config holds a number: a string ("nan", or "64" quoted on the command line) or a
    fraction where it holds a count was taken as given and failed deep in the model (a TypeError at the first
    forward, a validation traceback from the config class)."""
    defaults = None
    for key, value in overrides.items():
        if key in raw or defaults is not None:
            reference = raw.get(key, getattr(defaults, key, None))
        else:
            defaults = AutoConfig.for_model(model_type)
            reference = getattr(defaults, key, None)
        if value is None or reference is None:
            continue
        if isinstance(reference, (bool, str)):  # a switch, a name (hidden_act): the same type
            if type(value) is not type(reference):
                raise ValueError(
                    f"model.overrides.{key}={value!r}: expected {type(reference).__name__} (e.g. "
                    f"model.overrides.{key}={str(reference).lower() if isinstance(reference, bool) else reference}), "
                    f"got {type(value).__name__}"
                )
            continue
        if not isinstance(reference, (int, float)):
            continue
        kind = "an integer" if isinstance(reference, int) else "a number"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:
                number = float(value) if isinstance(value, str) else None
            except ValueError:
                number = None
            advice = (
                "NaN and infinity are refused"
                if number is not None and not math.isfinite(number)
                else f"write it without quotes: model.overrides.{key}={value}"
                if number is not None
                else f"e.g. model.overrides.{key}={reference}"
            )
            raise ValueError(f"model.overrides.{key}={value!r}: expected {kind}, got {type(value).__name__}; {advice}")
        if isinstance(reference, int) and isinstance(value, float):
            if not value.is_integer():
                raise ValueError(
                    f"model.overrides.{key}={value}: expected an integer (a count), e.g. "
                    f"model.overrides.{key}={reference}"
                )
            overrides[key] = int(value)  # 1e3 reads as a float


def _warn_kept_head_dim(config: PretrainedConfig, overrides: dict, source: str) -> None:
    """Overriding the width or the heads keeps the base config's ``head_dim`` (Qwen3 and Llama 3 read it, not
    hidden / heads), so the attention is wider or narrower than the residual stream: allowed, but said."""
    head_dim = getattr(config, "head_dim", None)
    heads, hidden = getattr(config, "num_attention_heads", None), getattr(config, "hidden_size", None)
    if not ({"hidden_size", "num_attention_heads"} & set(overrides)) or "head_dim" in overrides:
        return
    if isinstance(head_dim, int) and heads and hidden and heads * head_dim != hidden:
        logger.warning(
            "model.overrides: num_attention_heads %d x head_dim %d (of %s) = %d != hidden_size %d: the "
            "attention is %s than the residual stream; set model.overrides.head_dim=%s to match",
            heads,
            head_dim,
            source,
            heads * head_dim,
            hidden,
            "wider" if heads * head_dim > hidden else "narrower",
            hidden // heads if hidden % heads == 0 else "hidden_size/heads",
        )


_EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")  # what the MoE families call it


def _experts_field(config: PretrainedConfig) -> tuple[str, int]:
    for key in _EXPERT_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return key, value
    return "num_experts", 0


def num_routed_experts(config: PretrainedConfig) -> int:
    """Routed experts per MoE layer (0 for a dense config), whatever the family calls the field."""
    return _experts_field(config)[1]


def is_moe(config: PretrainedConfig) -> bool:
    """True for a config with routed experts and a top-k (Qwen3-MoE, GLM-4-MoE, Mixtral, ...)."""
    return num_routed_experts(config) > 0 and getattr(config, "num_experts_per_tok", None) is not None


def check_moe_config(config: PretrainedConfig, source: str = "the config") -> None:
    """ValueError naming the key when an MoE config cannot route: top-k (``num_experts_per_tok``) larger than
    the number of experts, or (grouped routing, GLM-4-MoE/DeepSeek-V3) groups that do not split the experts."""
    key, experts = _experts_field(config)
    top_k = getattr(config, "num_experts_per_tok", None)
    if top_k is not None and experts < 1 and hasattr(config, key):  # 0 passed as "dense": an IndexError in the loss
        raise ValueError(
            f"{key}={experts} in {source}: an MoE model routes to at least 1 expert per layer (for a "
            "dense model, choose a dense config)"
        )
    if not experts or top_k is None:
        return
    if not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"num_experts_per_tok must be an integer >= 1, got {top_k!r} ({source})")
    if top_k > experts:
        raise ValueError(
            f"num_experts_per_tok={top_k} is more than the {experts} experts per layer "
            f"({key}={experts}) in {source}: top-k routing picks k distinct experts"
        )
    groups = getattr(config, "n_group", None)
    if groups is not None:
        topk_group = getattr(config, "topk_group", 1)
        if groups < 1 or experts % groups:
            raise ValueError(f"n_group={groups} does not divide the {experts} experts ({key}) in {source}")
        if not 1 <= topk_group <= groups:
            raise ValueError(f"topk_group={topk_group} must be between 1 and n_group={groups} in {source}")
        if groups > 1 and experts // groups < 2:
            raise ValueError(
                f"n_group={groups} leaves fewer than 2 experts per group ({key}={experts}) in {source}: "
                "group scores sum each group's top 2"
            )
        if top_k > topk_group * (experts // groups):
            raise ValueError(
                f"num_experts_per_tok={top_k} is more than the {topk_group * (experts // groups)} "
                f"experts in the topk_group={topk_group} groups routing may pick from in {source}"
            )


def resolve_attn_implementation(config: PretrainedConfig, requested: str = "auto") -> tuple[str, str]:
    """``(implementation, reason)``: ``requested``, or for ``auto`` a backend forced by the config
    (``attn_implementation`` in its JSON/overrides), else :func:`choose_attn_implementation`'s pick."""
    if requested in (None, "auto"):
        requested = getattr(config, "hfpretrain_attn_implementation", None) or "auto"
    return choose_attn_implementation(requested)


def supports_flex_attention(config: PretrainedConfig) -> bool:
    """Whether transformers' causal-LM class for ``config`` takes ``attn_implementation="flex_attention"`` (Qwen3,
    Llama, the MoE families do; GPT-2 does not)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    try:
        return bool(getattr(MODEL_FOR_CAUSAL_LM_MAPPING[type(config)], "_supports_flex_attn", False))
    except KeyError:
        return False


def attention_backend(config: PretrainedConfig, attn_implementation: str = "auto") -> str:
    """The attention backend ``build_model`` gives ``config`` (one line logged), registered with transformers in
    this process: every process that loads a model under our own backends' names must register them itself."""
    impl, reason = resolve_attn_implementation(config, attn_implementation)
    logger.info("attention backend: %s (%s)", impl, reason)
    if impl == PACKED_SDPA:
        register_packed_sdpa()
    elif impl == FLEX_FA4:
        register_flex_fa4()
    return impl


def build_model(
    config: PretrainedConfig,
    attn_implementation: str = "auto",
    experts_implementation: str | None = None,
    weights: str | None = None,
) -> PreTrainedModel:
    """Build a randomly initialised causal LM for ``config`` (with ``weights``: that checkpoint's weights under
    ``config``) with the chosen attention backend.

    ``attn_implementation="auto"`` defers to a backend forced by the config (``attn_implementation``
    in its JSON/overrides), else picks flash_attention_2 > sdpa > eager; one line is logged.
    ``experts_implementation`` (MoE only: ``eager``, ``batched_mm``, ``grouped_mm``) is passed to
    transformers as it is; ``None`` leaves transformers' default.
    """
    impl = attention_backend(config, attn_implementation)
    # transformers sets the backend on the config it is given and the model keeps that object: two models built
    # from one config would both run the last one's backend
    config = copy.deepcopy(config)
    kwargs = {"attn_implementation": impl}
    if experts_implementation is not None:
        if not is_moe(config):
            raise ValueError(
                f"experts_implementation={experts_implementation!r} is for MoE models; "
                f"{config.model_type} has no experts"
            )
        kwargs["experts_implementation"] = experts_implementation
    if weights is not None:
        return AutoModelForCausalLM.from_pretrained(weights, config=config, **kwargs)
    return AutoModelForCausalLM.from_config(config, **kwargs)


# ---------------------------------------------------------------------------------------------
# The scaling family: one rule for depth and width.
# ---------------------------------------------------------------------------------------------
SCALING_DEPTHS = (5, 6, 8, 10, 12, 14, 16, 18)
SCALING_ASPECT = 64  # d_model = 64 * n_layers
SCALING_HEAD_DIM = 64  # so n_heads = n_layers
SCALING_FFN_MULT = 3  # SwiGLU d_ff = 3 * d_model, as in the Qwen3 1.8B reference shape


def scaling_config_dict(n_layers: int) -> dict[str, Any]:
    """The rule behind ``scale_*``: Qwen3 blocks, d_model = 64·L, head_dim 64 (MHA), d_ff = 3·d_model.

    Non-embedding parameters are then 13·L·d² (+ norms) = 53248·L³: L=5 → 6.7M, L=18 → 310M.
    The vocab is left to the tokenizer (set by ``load_config(..., vocab_size=len(tokenizer))``).
    """
    d = SCALING_ASPECT * n_layers
    heads = d // SCALING_HEAD_DIM
    return {
        "model_type": "qwen3",
        "num_hidden_layers": n_layers,
        "hidden_size": d,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "head_dim": SCALING_HEAD_DIM,
        "intermediate_size": SCALING_FFN_MULT * d,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-06,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "use_cache": False,
    }


def scaling_name(n_layers: int) -> str:
    d = SCALING_ASPECT * n_layers
    n = n_layers * (4 * d * d + 3 * d * SCALING_FFN_MULT * d)
    return f"scale_{round(n / 1e6)}m"


# ---------------------------------------------------------------------------------------------
# The MoE study families: the scaling family's attention with fine-grained experts.
# ---------------------------------------------------------------------------------------------
MOE_DEPTHS = (8, 12, 18)
MOE_FAMILIES = ("qwen3_moe", "glm4_moe")
MOE_EXPERTS = 32
MOE_TOP_K = 4
MOE_EXPERT_DIV = 2  # moe_intermediate_size = d_model / 2: top-4 of them is an active FFN width of 2·d_model


def moe_config_dict(n_layers: int, family: str = "qwen3_moe") -> dict[str, Any]:
    """The rule behind ``qwen3_moe_*`` / ``glm4_moe_*`` study shapes.

    Attention as in ``scale_*`` (d_model = 64·L, head_dim 64, MHA); every MLP is a layer of 32 experts
    of width d/2, top-4 routed. Per layer, 4·d² attention + 48·d² experts (6·d² of them active).

    * ``qwen3_moe``: softmax top-k routing, renormalised; transformers' load-balancing loss on
      (``output_router_logits``, ``router_aux_loss_coef`` 0.001, Qwen3-MoE's value).
    * ``glm4_moe``: sigmoid scores with a routing-correction bias (``e_score_correction_bias``, a buffer
      for aux-loss-free balancing), one shared expert of width d/2 beside the routed ones, the first
      layer dense (``first_k_dense_replace`` 1) with d_ff = 2.5·d so that it costs what an MoE layer does,
      QK-norm and GLM's half-dim rotary. transformers has no auxiliary loss for this family.
    """
    if family not in MOE_FAMILIES:
        raise ValueError(f"unknown MoE family {family!r}; known: {', '.join(MOE_FAMILIES)}")
    d = SCALING_ASPECT * n_layers
    common = {k: v for k, v in scaling_config_dict(n_layers).items() if k not in ("model_type", "intermediate_size")}
    common.update(
        {"moe_intermediate_size": d // MOE_EXPERT_DIV, "num_experts_per_tok": MOE_TOP_K, "norm_topk_prob": True}
    )
    if family == "qwen3_moe":
        return {
            "model_type": "qwen3_moe",
            **common,
            "num_experts": MOE_EXPERTS,
            "intermediate_size": SCALING_FFN_MULT * d,  # only for layers listed in mlp_only_layers (none)
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "output_router_logits": True,
            "router_aux_loss_coef": 0.001,
        }
    return {
        "model_type": "glm4_moe",
        **common,
        "n_routed_experts": MOE_EXPERTS,
        "n_shared_experts": 1,
        "intermediate_size": (MOE_TOP_K + 1) * d // MOE_EXPERT_DIV,
        "first_k_dense_replace": 1,
        "n_group": 1,
        "topk_group": 1,
        "routed_scaling_factor": 1.0,
        "use_qk_norm": True,
        "partial_rotary_factor": 0.5,
        "num_nextn_predict_layers": 0,
        "output_router_logits": False,
    }


def moe_name(n_layers: int, family: str = "qwen3_moe") -> str:
    """``<family>_<N>m_a<A>m``: N the non-embedding parameters, A those active per token (norms left out,
    as in ``scaling_name``), so the name does not depend on the tokenizer's vocab."""
    d = SCALING_ASPECT * n_layers
    ff = d // MOE_EXPERT_DIV
    attn, router = 4 * d * d, MOE_EXPERTS * d
    moe_total = attn + 3 * d * ff * MOE_EXPERTS + router
    moe_active = attn + 3 * d * ff * MOE_TOP_K + router
    if family == "qwen3_moe":
        total, active = n_layers * moe_total, n_layers * moe_active
    else:
        shared, dense = 3 * d * ff, attn + 3 * d * (MOE_TOP_K + 1) * ff
        total = dense + (n_layers - 1) * (moe_total + shared)
        active = dense + (n_layers - 1) * (moe_active + shared)
    return f"{family}_{round(total / 1e6)}m_a{round(active / 1e6)}m"
