"""What vLLM 0.33 would do with a ``vllm serve`` line, per rank: the library behind ``attnplan vllm serve``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from attnplan.policy import ModelPlanAnswer, plan_for, plan_model, read_layers
from attnplan.policy import PlanAnswer
from attnplan.policy import AttentionConfig
from attnplan.policy import InvalidInputError
from attnplan.policy import NodeFacts
from attnplan.policy import make_config
from attnplan.policy.hfconfig import read_model
from attnplan.policy import RuleSet

from .args import ServeLine, speculative_tokens
from .backends import backend_choice
from .mapping import per_rank_fields, startup_errors

VLLM_ENGINE = "vllm"


@dataclass(frozen=True)
class ServeAnswer:
    line: ServeLine
    ranks: int
    config: Optional[AttentionConfig]  # one rank's (every rank runs the same attention shape)
    answer: Optional[PlanAnswer]
    startup_error: Optional[str] = None
    notes: list[str] = field(default_factory=list)
    # A model whose layers differ (sliding/global, chunked, sinks...): every attention layer group
    # planned for one rank, as vLLM builds one attention backend per KV-cache group.
    model: Optional[ModelPlanAnswer] = None

    @property
    def ok(self) -> bool:
        if self.model is not None:
            return self.startup_error is None and self.model.ok
        return self.startup_error is None and self.answer is not None and self.answer.ok


def plan_with_engine(config: AttentionConfig, node: Optional[NodeFacts], ruleset: Optional[RuleSet]) -> PlanAnswer:
    """``plan_for`` under vLLM's engine layer (the installed vLLM's version, else 0.33)."""
    return plan_for(config, node, ruleset=ruleset, engine=VLLM_ENGINE)


# The fields a serve line sets on top of the model's own (they apply to every layer group).
LINE_FIELDS = ("dtype", "kv_cache_dtype", "page_size", "attention_backend", "num_speculative_tokens", "dcp_world_size")


def flag_fields(*, dtype: str, kv_cache_dtype: str, block_size: Optional[int], attention_backend: Optional[str],
                num_speculative_tokens: int, decode_context_parallel_size: int) -> dict[str, Any]:
    """The attention fields (LINE_FIELDS) that a serve line's flags set on every layer group; one mapping
    for a pasted line (``ServeLine``) and a whole-model request (``vllm/request.py ModelRequest``)."""
    out: dict[str, Any] = {}
    if dtype.lower() != "auto":
        out["dtype"] = dtype
    out["kv_cache_dtype"] = kv_cache_dtype
    if block_size is not None:
        out["page_size"] = block_size
    # None: the platform picks the block size at startup; attnplan picks the smallest valid one.
    if attention_backend is not None:
        out["attention_backend"] = backend_choice(attention_backend)
    if num_speculative_tokens:
        out["num_speculative_tokens"] = num_speculative_tokens
    if decode_context_parallel_size > 1:
        out["dcp_world_size"] = decode_context_parallel_size
    return out


def serve_fields(line: ServeLine) -> tuple[dict[str, Any], list[str]]:
    """The model's global attention fields with the line's flags applied (before the TP split)."""
    fields, notes, _raw = _serve_fields(line)
    return fields, notes


def _serve_fields(line: ServeLine) -> tuple[dict[str, Any], list[str], dict[str, Any]]:
    info = read_model(line.model, hf_overrides=line.hf_overrides)
    fields = {**info.fields, **flag_fields(
        dtype=line.dtype, kv_cache_dtype=line.kv_cache_dtype, block_size=line.block_size,
        attention_backend=line.attention_backend, num_speculative_tokens=speculative_tokens(line.speculative),
        decode_context_parallel_size=line.decode_context_parallel_size)}
    for k, flag in (("tensor_parallel_size", "--tensor-parallel-size"), ("pipeline_parallel_size", "--pipeline-parallel-size"),
                    ("decode_context_parallel_size", "--decode-context-parallel-size")):
        if getattr(line, k) < 1:
            raise InvalidInputError(k, f"{flag} must be at least 1, got {getattr(line, k)}")
    return fields, list(info.notes), dict(info.raw)


def plan_serve(line: ServeLine, node: Optional[NodeFacts] = None, ruleset: Optional[RuleSet] = None) -> ServeAnswer:
    fields, notes, raw = _serve_fields(line)
    tp = line.tensor_parallel_size
    ranks = tp * line.pipeline_parallel_size
    heads = fields["num_qo_heads"]
    errs = startup_errors(heads, fields.get("num_kv_heads") or heads, tp, line.decode_context_parallel_size,
                          mla=fields.get("kv_lora_rank") is not None)
    if errs:
        return ServeAnswer(line, ranks, None, None, startup_error=errs[0], notes=notes)
    config = make_config(per_rank_fields(fields, tp))
    if raw and len(read_layers(raw).attention_groups) > 1:
        over = {k: fields[k] for k in LINE_FIELDS if k in fields and k != "dtype"}
        model = plan_model(raw, node, overrides=over, ruleset=ruleset, engine=VLLM_ENGINE, tensor_parallel_size=tp)
        return ServeAnswer(line, ranks, config, model.answer(), notes=notes, model=model)
    return ServeAnswer(line, ranks, config, plan_with_engine(config, node, ruleset), notes=notes)


# When a violated phase would surface in a running vLLM (v1/worker/gpu_model_runner.py: CUDA
# graphs are captured for decode batches at startup; prefill kernels first run on a request).
WHEN = {
    "prefill": "on the first request (its prefill)",
    "decode": "at CUDA-graph capture during startup (decode batches), or the first decode step with --enforce-eager",
    "both": "at startup, when the attention backend is built",
}


def serve_json(sa: ServeAnswer, *, trace: bool = True) -> dict[str, Any]:
    line = sa.line
    return {
        "vllm": {"version": "0.33.0", "parser": line.parser, "model": line.model,
                 "tensor_parallel_size": line.tensor_parallel_size,
                 "pipeline_parallel_size": line.pipeline_parallel_size,
                 "decode_context_parallel_size": line.decode_context_parallel_size,
                 "dtype": line.dtype, "kv_cache_dtype": line.kv_cache_dtype, "block_size": line.block_size,
                 "attention_backend": line.attention_backend, "speculative_config": line.speculative or None,
                 "max_model_len": line.max_model_len},
        "ranks": sa.ranks,
        "status": "startup_error" if sa.startup_error else (
            sa.model.status if sa.model is not None else (sa.answer.status if sa.answer else None)),
        "startup_error": sa.startup_error,
        "per_rank": (sa.model.to_json(trace=trace) if sa.model is not None
                     else sa.answer.to_json(trace=trace) if sa.answer is not None else None),
        "notes": sa.notes,
    }


def render_serve(sa: ServeAnswer) -> str:
    from attnplan.render import render_answer

    line = sa.line
    head = (f"vllm serve {line.model}: {sa.ranks} rank(s) (tensor parallel {line.tensor_parallel_size} x pipeline "
            f"{line.pipeline_parallel_size}); flags read by {'vLLM 0.33' if line.parser == 'vllm' else 'attnplan'}'s parser")
    out = [head]
    if sa.startup_error:
        out.append(f"vLLM would refuse at startup (config/model.py verify_with_parallel_config): {sa.startup_error}")
        return "\n".join(out)
    c = sa.config
    if sa.model is not None and sa.answer is None:  # several attention layer groups
        from attnplan.render.groups import render_groups

        out += ["", render_groups(sa.model)]
        if not sa.model.ok:
            # group violations live on their groups; the model's own are the cross-group ones
            vs = [v for g in sa.model.layer_groups for v in g.violations] + list(sa.model.violations)
            out += ["", *_failures(vs)]
        return "\n".join(out)
    assert c is not None and sa.answer is not None
    if c.is_mla:
        out.append(f"each rank: {c.num_qo_heads} query heads over the MLA latent cache (kv_lora_rank {c.kv_lora_rank})")
    else:
        out.append(f"each rank: {c.num_qo_heads} query heads, {c.kv_heads} KV heads (GQA group {c.group_size}), "
                   f"head_dim {c.head_dim}, dtype {c.dtype}, KV cache {c.kv_cache_dtype}")
    out.append("")
    out.append(render_answer(sa.answer))
    if not sa.answer.ok:
        out += ["", *_failures(sa.answer.violations)]
    return "\n".join(out)


def _failures(violations: Any) -> list[str]:
    """When and why vLLM would fail, one line per violated rule."""
    out = []
    for v in violations:
        where = v.phase if v.backend is None else f"{v.phase}/{v.backend}"
        out.append(f"vLLM would fail {WHEN.get(v.phase, 'at startup')}: [{v.rule}] {where}: {v.message}")
    return out
