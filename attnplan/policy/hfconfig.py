"""A HuggingFace ``config.json`` -> attention config fields (SPEC §2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from pydantic import ValidationError

from .config import AttentionConfig
from .errors import InvalidInputError, ModelConfigError

MAX_CONFIG_BYTES = 4 << 20


def read_model_config(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        if p.is_dir():
            p = p / "config.json"
        size = p.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ModelConfigError(str(path), f"{size} bytes is too large for a config.json")
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ModelConfigError(str(path), "no such file") from None
    except IsADirectoryError:
        raise ModelConfigError(str(path), "is a directory") from None
    except PermissionError:
        raise ModelConfigError(str(path), "permission denied") from None
    except UnicodeDecodeError:
        raise ModelConfigError(str(path), "not UTF-8 text") from None
    except OSError as exc:
        raise ModelConfigError(str(path), f"cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelConfigError(str(path), f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise ModelConfigError(str(path), "a config.json holds a JSON object")
    return data


def _int(data: Mapping[str, Any], key: str, where: str) -> int | None:
    v = data.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ModelConfigError(where, f"{key} must be an integer, got {v!r}")
    return v


def fields_from_hf(data: Mapping[str, Any], where: str = "config.json") -> dict[str, Any]:
    """The attention fields a config.json implies (explicit flags are merged over these)."""
    if isinstance(data.get("text_config"), dict):
        # Multimodal models keep the language model's attention in text_config.
        inner = dict(data["text_config"])
        inner.setdefault("model_type", data.get("model_type"))
        inner.setdefault("torch_dtype", data.get("torch_dtype") or data.get("dtype"))
        data = inner
    heads = _int(data, "num_attention_heads", where)
    if heads is None:
        raise ModelConfigError(where, "missing num_attention_heads")
    out: dict[str, Any] = {"num_qo_heads": heads}
    kv = _int(data, "num_key_value_heads", where)
    out["num_kv_heads"] = kv if kv is not None else heads
    dtype = data.get("torch_dtype") or data.get("dtype")
    if dtype in ("bfloat16", "float16"):
        out["dtype"] = dtype
    elif dtype == "float32":
        # Serving engines run fp32 checkpoints in 16-bit (vLLM's dtype=auto; Gemma in bf16):
        # the attention kernels never see fp32 queries.
        out["dtype"] = "bfloat16"
    if data.get("kv_lora_rank") is not None:
        for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            v = _int(data, key, where)
            if v is None:
                raise ModelConfigError(where, f"MLA config (kv_lora_rank set) is missing {key}")
            out[key] = v
    else:
        hd = _int(data, "head_dim", where)
        if hd is None:
            hidden = _int(data, "hidden_size", where)
            if hidden is None:
                raise ModelConfigError(where, "missing head_dim and hidden_size (cannot derive the head size)")
            if hidden % heads:
                raise ModelConfigError(where, f"hidden_size {hidden} is not divisible by num_attention_heads {heads}")
            hd = hidden // heads
        out["head_dim"] = hd
    sw = data.get("sliding_window") if data.get("use_sliding_window", True) is not False else None
    if isinstance(sw, int) and not isinstance(sw, bool) and sw > 0:
        out["sliding_window"] = sw
    cap = data.get("attn_logit_softcapping")
    if isinstance(cap, (int, float)) and not isinstance(cap, bool) and cap > 0:
        out["logits_soft_cap"] = float(cap)
    if data.get("model_type") == "gpt_oss":
        out["sinks"] = True
    return out


def config_from_hf(path_or_data: str | Path | Mapping[str, Any], **overrides: Any) -> AttentionConfig:
    """Build an AttentionConfig from a config.json (path or dict); ``overrides`` win."""
    if isinstance(path_or_data, Mapping):
        where, data = "config.json", path_or_data
    else:
        where, data = str(path_or_data), read_model_config(path_or_data)
    fields = fields_from_hf(data, where)
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return make_config(fields)


def make_config(fields: Mapping[str, Any]) -> AttentionConfig:
    """Validate fields into an AttentionConfig; errors name the field and what is allowed."""
    try:
        return AttentionConfig.model_validate(dict(fields))
    except ValidationError as exc:
        raise config_error(exc) from None


def config_error(exc: ValidationError) -> InvalidInputError:
    e = exc.errors()[0]
    loc = ".".join(str(x) for x in e["loc"]) or "config"
    allowed = None
    ctx = e.get("ctx") or {}
    if "expected" in ctx:
        allowed = [a.strip().strip("'") for a in str(ctx["expected"]).replace(" or ", ",").split(",") if a.strip()]
    msg = e["msg"]
    if e["type"] == "extra_forbidden":
        from .config import CONFIG_FIELDS

        return InvalidInputError(loc, "unknown field", CONFIG_FIELDS)
    if e["type"] == "literal_error":
        return InvalidInputError(loc, f"invalid value {e.get('input')!r}", allowed)
    if "input" in e and e["type"] not in ("missing",):
        msg = f"{msg} (got {e['input']!r})" if len(repr(e["input"])) < 80 else msg
    return InvalidInputError(loc, msg, allowed)
