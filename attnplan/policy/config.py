"""The attention configuration a caller asks a plan for (docs/contract.md, The plan).

One model serves the library, the REST body and the CLI (``--head-dim`` <-> ``head_dim``).
Spelling variants are normalised here (``bfloat16`` -> ``bf16``, ``fp8`` -> ``fp8_e4m3`` for
the KV view), so that the rules only ever see canonical values.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Literal, Optional, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, StrictBool, StrictFloat, StrictInt, field_validator, model_validator

from .backend_names import VLLM_OTHER_BACKENDS, Backend, backend_choice, vllm_own_backend
from .dtypes import DTYPE_ALIASES, KV_ALIASES, KVCacheDType, QueryDType, kv_element_dtype
from .dtypes import KV_CACHE_DTYPES, QUERY_DTYPES  # noqa: F401 - re-exported (policy, cli, matrix, suggest)
from attnplan.errors import InvalidInputError

# Spelling variants, one table each (policy/dtypes.py).
_DTYPE_ALIASES = DTYPE_ALIASES
_KV_ALIASES = KV_ALIASES

# Bounds that keep every integer a real attention shape (and keep hostile input out).
_MAX_HEADS = 4096
_MAX_HEAD_DIM = 4096
_MAX_PAGE = 4096
_MAX_WINDOW = 1 << 30


class AttentionConfig(BaseModel):
    """One attention layer's configuration, as every entry point takes it.

    ``kv_cache_dtype="auto"`` stores the KV cache in the query dtype; ``page_size=None`` lets
    the plan choose; ``batch_invariant=None`` lets the local probe read ``VLLM_BATCH_INVARIANT``.
    MLA is on when ``kv_lora_rank`` is set.
    """

    # Integers are strict: True is not one head, and "32" is not 32 (JSON and flags give ints).
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    head_dim: Optional[StrictInt] = Field(None, ge=1, le=_MAX_HEAD_DIM, description="query/key head size")
    head_dim_vo: Optional[StrictInt] = Field(None, ge=1, le=_MAX_HEAD_DIM, description="value/output head size (default: head_dim)")
    num_qo_heads: StrictInt = Field(..., ge=1, le=_MAX_HEADS, description="query heads (CLI --num-heads)")
    num_kv_heads: Optional[StrictInt] = Field(None, ge=1, le=_MAX_HEADS, description="KV heads (default: num_qo_heads)")
    dtype: QueryDType = Field("bf16", description="model / query dtype")
    kv_cache_dtype: KVCacheDType = Field("auto", description="KV cache dtype (auto = dtype)")
    page_size: Optional[StrictInt] = Field(None, ge=1, le=_MAX_PAGE, description="tokens per KV page (default: chosen by the plan)")
    sliding_window: Optional[StrictInt] = Field(None, ge=1, le=_MAX_WINDOW, description="sliding-window size in tokens")
    # Floats are strict too (issue 24): "128" and true are not numbers; JSON integers are.
    logits_soft_cap: Optional[StrictFloat] = Field(None, gt=0, le=1e6, allow_inf_nan=False,
                                                   description="logits soft-cap (Gemma-2: 50.0)")
    sinks: StrictBool = Field(False, description="attention sinks (GPT-OSS)")
    # Set from the model's own attention code (plan_model: Gemma's query_pre_attn_scalar^-0.5,
    # DeepSeek's YaRN mscale^2); None is the default head_dim^-0.5. No CLI flag: it comes from the model.
    sm_scale: Optional[StrictFloat] = Field(None, gt=0, le=1e6, allow_inf_nan=False,
                                      description="softmax scale (default: qk head_dim^-0.5)")
    attention_chunk_size: Optional[StrictInt] = Field(
        None, ge=1, le=_MAX_WINDOW, description="chunked local attention: tokens per chunk (Llama-4)")
    num_speculative_tokens: StrictInt = Field(0, ge=0, le=64, description="speculative tokens per decode step")
    kv_lora_rank: Optional[StrictInt] = Field(None, ge=1, le=_MAX_HEAD_DIM, description="MLA compressed KV rank (enables MLA)")
    qk_nope_head_dim: Optional[StrictInt] = Field(None, ge=1, le=_MAX_HEAD_DIM, description="MLA non-rope query/key head size")
    # 0 is real: FlashInfer's trtllm-gen MLA decode has a NoPE layout (512, 0) (flashinfer/mla/_core.py nope_mla_dimensions)
    qk_rope_head_dim: Optional[StrictInt] = Field(None, ge=0, le=_MAX_HEAD_DIM, description="MLA rope head size (0: NoPE)")
    v_head_dim: Optional[StrictInt] = Field(None, ge=1, le=_MAX_HEAD_DIM, description="MLA value head size")
    dcp_world_size: StrictInt = Field(1, ge=1, le=1024, description="decode context-parallel world size")
    cascade: StrictBool = Field(False, description="cascade (shared-prefix) attention")
    attention_backend: Backend = Field("auto", description="force one backend in both phases (auto: choose)")
    # An engine backend that runs no FlashInfer kernel, as typed (vLLM's --attention-backend FLASH_ATTN): the
    # verdict judges it by the engine's own validation; the FlashInfer plan is then the one "if forced".
    engine_attention_backend: Optional[str] = Field(
        None, max_length=64, description="the engine's own non-FlashInfer backend asked for (vLLM: FLASH_ATTN, TRITON_ATTN, ...)")
    batch_invariant: Optional[StrictBool] = Field(None, description="batch-invariant mode (default: VLLM_BATCH_INVARIANT)")
    # vLLM's --attention-config keys that steer its FlashInfer backend (vllm/config/attention.py AttentionConfig):
    # use_trtllm_attention None = auto, false = never trtllm-gen / XQA (vllm/utils/flashinfer.py
    # force_use_trtllm_attention, can_use_trtllm_attention), true = forced; disable_flashinfer_q_quantization keeps
    # the query in the model dtype (FlashInferMetadataBuilder.get_q_data_type).
    use_trtllm_attention: Optional[StrictBool] = Field(
        None, description="vLLM --attention-config use_trtllm_attention (None: auto; false: no trtllm-gen / XQA)")
    disable_flashinfer_q_quantization: StrictBool = Field(
        False, description="vLLM --attention-config disable_flashinfer_q_quantization (the query keeps the model dtype)")

    @model_validator(mode="before")
    @classmethod
    def _split_engine_backend(cls, data: Any) -> Any:
        # vLLM's own backends (FLASH_ATTN, TRITON_MLA, ...) are a choice of the engine, not of FlashInfer's
        # kernels: kept apart, so that the FlashInfer plan stays what --attention-backend FLASHINFER runs.
        if isinstance(data, dict) and isinstance(data.get("attention_backend"), str):
            own = vllm_own_backend(data["attention_backend"])
            if own is not None:
                data = {**data, "attention_backend": "auto", "engine_attention_backend": own}
        return data

    @field_validator("engine_attention_backend", mode="before")
    @classmethod
    def _norm_engine_backend(cls, v: Any) -> Any:
        if v is None:
            return v
        own = vllm_own_backend(v) if isinstance(v, str) else None
        if own is None:
            raise InvalidInputError("engine_attention_backend", f"{v!r} is not one of vLLM's own attention backends",
                                    sorted(VLLM_OTHER_BACKENDS))
        return own

    @field_validator("dtype", mode="before")
    @classmethod
    def _norm_dtype(cls, v: Any) -> Any:
        if isinstance(v, str):
            return _DTYPE_ALIASES.get(v.strip().lower(), v)
        return v

    @field_validator("kv_cache_dtype", mode="before")
    @classmethod
    def _norm_kv(cls, v: Any) -> Any:
        if isinstance(v, str):
            return _KV_ALIASES.get(v.strip().lower(), v)
        return v

    @field_validator("attention_backend", mode="before")
    @classmethod
    def _norm_backend(cls, v: Any) -> Any:
        if isinstance(v, str):
            # vLLM's enum names (FLASHINFER, FLASHINFER_MLA, TRTLLM_RAGGED) map explicitly; a vLLM
            # backend that is not FlashInfer (FLASH_ATTN, ...) is refused by name, never auto.
            s = str(backend_choice(v)).strip().lower().replace("_", "-")
            return {"trtllm": "trtllm-gen", "fa2mla": "fa2-mla"}.get(s, s)
        return v

    @model_validator(mode="after")
    def _check_shape(self) -> "AttentionConfig":
        if self.is_mla:
            missing = [f for f in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim") if getattr(self, f) is None]
            if missing:
                raise InvalidInputError(missing[0], f"MLA (kv_lora_rank set) also needs {', '.join(missing)}: "
                                        "give them, or drop kv_lora_rank for a standard model")
        elif self.head_dim is None:
            raise InvalidInputError("head_dim", "head_dim is required (or kv_lora_rank and the MLA dims)")
        if self.sliding_window is not None and self.attention_chunk_size is not None:
            # vLLM runs chunks as virtual requests on a plain causal kernel (no window inside a chunk).
            raise InvalidInputError("attention_chunk_size", "sliding_window and attention_chunk_size exclude each "
                                    "other (a layer is sliding or chunked): give one of them")
        kv = self.num_kv_heads if self.num_kv_heads is not None else self.num_qo_heads
        if kv > self.num_qo_heads:
            raise InvalidInputError("num_kv_heads", f"num_kv_heads ({kv}) cannot exceed num_qo_heads "
                                    f"({self.num_qo_heads}): each KV head serves one or more query heads")
        return self

    # -- derived values the rules read -------------------------------------------------
    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads if self.num_kv_heads is not None else self.num_qo_heads

    @property
    def qk_head_dim(self) -> int:
        """Query/key head size of the (prefill) attention."""
        if self.is_mla:
            return int(self.qk_nope_head_dim) + int(self.qk_rope_head_dim)  # type: ignore[arg-type]
        return int(self.head_dim)  # type: ignore[arg-type]

    @property
    def vo_head_dim(self) -> int:
        if self.is_mla:
            return int(self.v_head_dim)  # type: ignore[arg-type]
        return int(self.head_dim_vo if self.head_dim_vo is not None else self.head_dim)  # type: ignore[arg-type]

    @property
    def softmax_scale(self) -> float:
        """The scale the kernels apply: the model's own, else qk_head_dim^-0.5."""
        return self.sm_scale if self.sm_scale is not None else 1.0 / math.sqrt(self.qk_head_dim)

    @property
    def kv_dtype(self) -> str:
        """The KV element type the kernels see: ``auto`` -> query dtype, ``fp8`` -> ``fp8_e4m3``."""
        return kv_element_dtype(self.kv_cache_dtype, self.dtype)

    @property
    def group_size(self) -> int:
        return self.num_qo_heads // self.kv_heads

    def replace(self, **changes: Any) -> "AttentionConfig":
        """A validated copy with some fields changed (suggestions use this)."""
        data = self.model_dump()
        data.update(changes)
        return AttentionConfig.model_validate(data)


CONFIG_FIELDS: tuple[str, ...] = tuple(AttentionConfig.model_fields)


# Validation of fields into the config, with errors in the tree's terms (every entry point's fields pass here).
def make_config(fields: Mapping[str, Any]) -> AttentionConfig:
    """Validate fields into an AttentionConfig; errors name the field and what is allowed."""
    try:
        return AttentionConfig.model_validate(dict(fields))
    except ValidationError as exc:
        raise config_error(exc) from None


def config_error(exc: ValidationError) -> InvalidInputError:
    e = exc.errors()[0]
    cause = (e.get("ctx") or {}).get("error")
    if isinstance(cause, InvalidInputError):  # a validator's own error names its field and the fix
        return cause
    loc = ".".join(str(x) for x in e["loc"]) or "config"
    allowed = None
    ctx = e.get("ctx") or {}
    if "expected" in ctx:
        allowed = [a.strip().strip("'") for a in str(ctx["expected"]).replace(" or ", ",").split(",") if a.strip()]
    msg = e["msg"]
    if e["type"] == "extra_forbidden":
        return InvalidInputError(loc, "unknown field", CONFIG_FIELDS)
    if e["type"] == "literal_error":
        return InvalidInputError(loc, f"invalid value {e.get('input')!r}", allowed)
    if "input" in e and e["type"] not in ("missing",):
        msg = f"{msg} (got {e['input']!r})" if len(repr(e["input"])) < 80 else msg
    return InvalidInputError(loc, msg, allowed)
