"""Tensor parallelism as vLLM applies it to attention: what one rank runs, and what vLLM refuses
at startup (``vllm/config/model.py`` ``ModelConfig.verify_with_parallel_config``,
``get_num_attention_heads`` / ``get_num_kv_heads``). Pure arithmetic, shared by the CLI, the
layered-model planner and the vLLM plugin."""

from __future__ import annotations

from typing import Any, Mapping


def startup_errors(total_heads: int, total_kv_heads: int, tp: int, dcp: int = 1, *, mla: bool = False) -> list[str]:
    """The ValueErrors vLLM's ``ModelConfig.verify_with_parallel_config`` raises at startup."""
    errs: list[str] = []
    if total_heads % tp:
        errs.append(f"Total number of attention heads ({total_heads}) must be divisible by tensor parallel size ({tp}).")
        return errs
    if dcp > 1 and not mla:
        if tp <= total_kv_heads:
            errs.append("Decode context parallelism for GQA/MQA requires `--tensor-parallel-size` "
                        f"({tp}) to be greater than the model's total number of KV heads ({total_kv_heads}). "
                        "Increase `--tensor-parallel-size` or set `--decode-context-parallel-size 1`.")
            return errs
        max_dcp = tp // total_kv_heads
        if dcp > max_dcp:
            errs.append(f"`--decode-context-parallel-size` ({dcp}) exceeds the maximum supported value ({max_dcp}) "
                        f"for `--tensor-parallel-size` ({tp}) and {total_kv_heads} model KV heads.")
        elif (total_heads // total_kv_heads) % dcp:
            errs.append(f"The model's number of query heads per KV head ({total_heads // total_kv_heads}) must be "
                        f"divisible by `--decode-context-parallel-size` ({dcp}) for GQA/MQA.")
    return errs


def per_rank_heads(total_heads: int, total_kv_heads: int, tp: int, *, mla: bool = False) -> tuple[int, int]:
    """(query heads, KV heads) one tensor-parallel rank runs, as ModelConfig computes them."""
    return total_heads // tp, (1 if mla else max(1, total_kv_heads // tp))


def per_rank_fields(fields: Mapping[str, Any], tp: int) -> dict[str, Any]:
    """Global attention fields -> one rank's (heads split by ``tp``)."""
    out = dict(fields)
    mla = out.get("kv_lora_rank") is not None
    heads = int(out["num_qo_heads"])
    kv = int(out.get("num_kv_heads") or heads)
    q, k = per_rank_heads(heads, kv, tp, mla=mla)
    out["num_qo_heads"] = q
    if mla:
        out.pop("num_kv_heads", None)  # MLA decode is MQA over the latent cache
    else:
        out["num_kv_heads"] = k
    return out
