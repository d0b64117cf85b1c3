"""What vLLM 0.33 would do with a ``vllm serve`` line, per rank: the library behind ``attnplan vllm serve``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from attnplan.policy import plan_for
from attnplan.model import ModelPlanAnswer, plan_model, read_layers
from attnplan.policy import PlanAnswer
from attnplan.policy.answer import Verdict
from attnplan.policy import AttentionConfig
from attnplan.policy import InvalidInputError
from attnplan.policy import NodeFacts
from attnplan.policy import make_config
from attnplan.model.hfconfig import read_model
from attnplan.policy import RuleSet

from .args import ServeLine, speculative_tokens
# backend_choice, per_rank_fields and startup_errors are policy's (vllm/backends.py and vllm/mapping.py re-export
# them): imported from there, a model request's path (attnplan/request.py) skips both modules (issue 36 item 6:
# fewer modules on one command's path).
from attnplan.policy.backend_names import backend_choice
from attnplan.policy.parallel import per_rank_fields, startup_errors  # noqa: F401 (this module's names too)

VLLM_ENGINE = "vllm"
VLLM_VERSION = "0.33.0"
SGLANG_LAYOUT_SOURCE = "sglang/srt/configs/model_config.py (heads vs tp_size)"


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
    # the engine a request spoke for (a whole-model request may name sglang): who refuses a parallel layout
    engine: str = "vllm"
    release: Optional[str] = None   # the engine release the line was planned for (None: the newest modelled)

    @property
    def ok(self) -> bool:
        if self.model is not None:
            return self.startup_error is None and self.model.ok
        return self.startup_error is None and self.answer is not None and self.answer.ok

    @property
    def verdict(self) -> Optional[Verdict]:
        """The verdict of the line (policy/verdict.py): vLLM's own refusal of the parallel split, else the
        model's (every attention layer group's worst), else the one answer's."""
        from attnplan.render.verdict import finish_verdict

        if self.startup_error is not None:
            from attnplan.policy.verdict import layout_refusal

            if self.engine == "sglang":
                return finish_verdict(layout_refusal("sglang", self.release or "0.5.23", self.startup_error,
                                                     SGLANG_LAYOUT_SOURCE))
            return finish_verdict(layout_refusal("vllm", self.release or VLLM_VERSION, self.startup_error,
                                                 "vllm/config/model.py verify_with_parallel_config"))
        if self.model is not None:
            return finish_verdict(self.model.verdict)
        return finish_verdict(self.answer.verdict) if self.answer is not None else None


def plan_with_engine(config: AttentionConfig, node: Optional[NodeFacts], ruleset: Optional[RuleSet]) -> PlanAnswer:
    """``plan_for`` under vLLM's engine layer (the installed vLLM's version, else 0.33)."""
    return plan_for(config, node, ruleset=ruleset, engine=VLLM_ENGINE)


# The fields a serve line sets on top of the model's own (they apply to every layer group).
LINE_FIELDS = ("dtype", "kv_cache_dtype", "page_size", "attention_backend", "num_speculative_tokens", "dcp_world_size",
               "use_trtllm_attention", "disable_flashinfer_q_quantization")


def flag_fields(*, dtype: str, kv_cache_dtype: str, block_size: Optional[int], attention_backend: Optional[str],
                num_speculative_tokens: int, decode_context_parallel_size: int,
                attention_config: Optional[dict[str, Any]] = None, release: Optional[str] = None) -> dict[str, Any]:
    """The attention fields (LINE_FIELDS) that a serve line's flags set on every layer group; one mapping
    for a pasted line (``ServeLine``) and a whole-model request (``attnplan/request.py ModelRequest``)."""
    out: dict[str, Any] = {}
    if dtype.lower() != "auto":
        out["dtype"] = dtype
    out["kv_cache_dtype"] = vllm_kv_cache_dtype(kv_cache_dtype, release)
    if block_size is not None:
        out["page_size"] = block_size
    # None: the platform picks the block size at startup; attnplan picks the smallest valid one.
    if attention_backend is not None:
        out["attention_backend"] = backend_choice(attention_backend)
    if num_speculative_tokens:
        out["num_speculative_tokens"] = num_speculative_tokens
    if decode_context_parallel_size > 1:
        out["dcp_world_size"] = decode_context_parallel_size
    out.update(attention_config_fields(attention_config or {}))
    return out


# vLLM 0.33 --attention-config keys (vllm/config/attention.py AttentionConfig) and what attnplan makes of them:
# "field" keys map to an attention field, "backend" is --attention-backend, the rest are accepted and listed as
# not modelled (they tune kernels attnplan does not choose: FA versions, cascade, MLA chunking, ...).
ATTENTION_CONFIG_FIELDS = {"use_trtllm_attention": "use_trtllm_attention",
                           "disable_flashinfer_q_quantization": "disable_flashinfer_q_quantization"}


def attention_config_fields(ac: dict[str, Any]) -> dict[str, Any]:
    """The attention fields an ``--attention-config`` object sets; a modelled key's value must be what vLLM's
    pydantic dataclass takes (bool, or null for use_trtllm_attention), else bad input naming the key."""
    out: dict[str, Any] = {}
    for key, field in ATTENTION_CONFIG_FIELDS.items():
        if key not in ac:
            continue
        v = ac[key]
        if v in (0, 1) and not isinstance(v, bool):   # vLLM's CLI form --attention-config.use_trtllm_attention=1
            v = bool(v)
        if not (isinstance(v, bool) or (v is None and key == "use_trtllm_attention")):
            raise InvalidInputError(f"attention_config.{key}", f"takes true or false, got {type(v).__name__}")
        if v is not None:
            out[field] = v
    return out


def vllm_kv_cache_dtype(raw: str, release: Optional[str] = None) -> str:
    """vLLM 0.33's ``--kv-cache-dtype``, exactly as vLLM takes it (policy/dtypes.py VLLM_CACHE_DTYPES, from
    vllm/config/cache.py CacheDType), in the config's vocabulary. A spelling vLLM refuses (fp4, bf16, half,
    fp8_e4m3fn) is bad input in vLLM's terms; one vLLM takes for a cache layout no FlashInfer kernel attnplan
    models reads (fp8_ds_mla, nvfp4_4over6, turboquant_*) is bad input naming what attnplan models."""
    from attnplan.policy.dtypes import VLLM_CACHE_DTYPES

    from attnplan.policy.dtypes import VLLM_CACHE_DTYPES_ABSENT

    name = str(raw)   # exactly: CacheDType is a Literal (no case folding, no stripping)
    absent = VLLM_CACHE_DTYPES_ABSENT.get(release or "", frozenset())
    if name in absent:
        raise InvalidInputError("kv_cache_dtype", f"vLLM {release} has no --kv-cache-dtype {name} (config/cache.py "
                                "CacheDType of that release)", [k for k in VLLM_CACHE_DTYPES if k not in absent])
    if name not in VLLM_CACHE_DTYPES:
        raise InvalidInputError("kv_cache_dtype", "vLLM 0.33 refuses this --kv-cache-dtype at startup (config/cache.py "
                                "CacheDType)", list(VLLM_CACHE_DTYPES))
    mapped = VLLM_CACHE_DTYPES[name]
    if mapped is None:
        modelled = [k for k, v in VLLM_CACHE_DTYPES.items() if v is not None]
        raise InvalidInputError("kv_cache_dtype", f"vLLM 0.33 takes --kv-cache-dtype {name}, a cache layout no FlashInfer "
                                "kernel attnplan models reads", modelled)
    return mapped


def serve_fields(line: ServeLine) -> tuple[dict[str, Any], list[str]]:
    """The model's global attention fields with the line's flags applied (before the TP split)."""
    fields, notes, _raw = _serve_fields(line)
    return fields, notes


def _serve_fields(line: ServeLine) -> tuple[dict[str, Any], list[str], dict[str, Any]]:
    info = read_model(line.model, hf_overrides=line.hf_overrides, revision=line.revision)
    fields = {**info.fields, **flag_fields(
        dtype=line.dtype, kv_cache_dtype=line.kv_cache_dtype, block_size=line.block_size,
        attention_backend=line.attention_backend, num_speculative_tokens=speculative_tokens(line.speculative),
        decode_context_parallel_size=line.decode_context_parallel_size, attention_config=line.attention_config)}
    for k, flag in (("tensor_parallel_size", "--tensor-parallel-size"), ("pipeline_parallel_size", "--pipeline-parallel-size"),
                    ("decode_context_parallel_size", "--decode-context-parallel-size")):
        if getattr(line, k) < 1:
            raise InvalidInputError(k, f"{flag} must be at least 1, got {getattr(line, k)}")
    from attnplan.render.notes import notes_text

    return fields, list(notes_text(info.notes_says)), dict(info.raw)


# When a violated phase would surface in a running vLLM (v1/worker/gpu_model_runner.py: CUDA
# graphs are captured for decode batches at startup; prefill kernels first run on a request).
WHEN = {
    "prefill": "on the first request (its prefill)",
    "decode": "at CUDA-graph capture during startup (decode batches), or the first decode step with --enforce-eager",
    "both": "at startup, when the attention backend is built",
}


def serve_json(sa: ServeAnswer, *, trace: bool = True) -> dict[str, Any]:
    from attnplan.render import finish, plan_json

    line = sa.line
    v = sa.verdict
    return {
        "verdict": finish(v).model_dump(mode="json") if v is not None else None,
        "vllm": {"version": (v.engine.partition("==")[2] if v is not None and "==" in v.engine else sa.release or VLLM_VERSION),
                 "parser": line.parser, "model": line.model,
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
        "per_rank": (plan_json(sa.model, trace=trace) if sa.model is not None
                     else plan_json(sa.answer, trace=trace) if sa.answer is not None else None),
        "notes": sa.notes,
    }


def render_serve(sa: ServeAnswer) -> str:
    from attnplan.render import render_answer

    line = sa.line
    reader = {"vllm": "vLLM 0.33's parser", "table": f"vLLM {VLLM_VERSION}'s flag table (shipped)"}.get(
        line.parser, "attnplan's parser")
    head = (f"vllm serve {line.model}: {sa.ranks} rank(s) (tensor parallel {line.tensor_parallel_size} x pipeline "
            f"{line.pipeline_parallel_size}); flags read by {reader}")
    out = [head]
    if sa.startup_error:
        from attnplan.render import render_verdict

        out += render_verdict(sa.verdict)
        return "\n".join(out)
    c = sa.config
    v = sa.verdict
    if sa.model is not None and sa.answer is None:  # several attention layer groups
        from attnplan.render.groups import render_groups

        out += ["", render_groups(sa.model)]
        if not sa.model.ok and v is not None and v.flashinfer_plan == "command":
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
    out.append(render_answer(sa.answer.model_copy(update={"verdict": v})))
    if not sa.answer.ok and v is not None and v.flashinfer_plan == "command":
        out += ["", *_failures(sa.answer.violations)]
    return "\n".join(out)


def _failures(violations: Any) -> list[str]:
    """When and why vLLM would fail, one line per violated rule (the rule's own outcome where it has one:
    policy/verdict.py violation_outcome)."""
    from attnplan.policy import default_ruleset
    from attnplan.policy.verdict import violation_outcome

    rs = default_ruleset()
    out = []
    for v in violations:
        where = v.phase if v.backend is None else f"{v.phase}/{v.backend}"
        o = violation_outcome(v, rs, VLLM_ENGINE)
        when = ("would run and compute wrong output" if o == "wrong-output"
                else f"would fail {WHEN.get(v.phase, 'at startup') if o != 'fails-at-startup' else 'at startup'}")
        out.append(f"vLLM {when}: [{v.rule}] {where}: {v.message}")
    return out
