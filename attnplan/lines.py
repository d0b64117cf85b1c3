"""Engine command lines as the one request (issue 36: one parse, one pipeline, one answer).

A pasted ``vllm serve MODEL [flags]`` and a pasted ``[python -m] sglang.launch_server --model-path MODEL [flags]``
both become a ``ModelRequest`` (attnplan/request.py: the flags every engine shares, and SGLang's own in its
``sglang`` fields) and are planned by ``plan_request``; ``plan_launch`` is that pipeline for a parsed launch line.
This module sits above both engines' packages (vllm/ and sglang/ import neither it nor each other's planners),
so neither engine's code depends on the other's.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from attnplan.policy import InvalidInputError, NodeFacts, RuleSet
from attnplan.render.verdict import finish
from attnplan.sglang.launch import LaunchAnswer, LaunchLine, parse_launch_text
from pydantic import ValidationError

from attnplan.request import ModelRequest, SglangLineFields, plan_request, request_error


def is_launch_line(text: Any) -> bool:
    """Whether a pasted line is SGLang's launch_server (its first words name it), not a vllm serve line."""
    if not isinstance(text, str):
        return False
    words = text.replace("\\\n", " ").split()[:4]
    return any(w.rsplit("/", 1)[-1] in ("sglang.launch_server", "launch_server") for w in words)


# launch_server flags and backend names that arrived in a later release than the oldest modelled (the release's
# arg_groups/fields/*.py and choices.py; issue 42): a line for an older release naming one is refused as its parser
# refuses it.
SINCE = {"--attn-dp-size": "0.5.22", "--attention-data-parallel-size": "0.5.22", "llada2_cfg_flashinfer": "0.5.22"}


def _release_refuses(line: LaunchLine, release: Optional[str]) -> None:
    from packaging.version import Version

    if release is None:
        return
    f = line.flags
    used = [*line.given, *(b for b in (f.attention_backend, f.prefill_attention_backend, f.decode_attention_backend) if b)]
    for name in used:
        since = SINCE.get(name)
        if since is not None and Version(release) < Version(since):
            raise InvalidInputError("sglang launch_server", f"SGLang {release} has no {name} (from {since})")


def request_from_launch_line(line: LaunchLine, *, engine: Optional[str] = None, model: Any = None) -> ModelRequest:
    """A parsed launch line as a request; ``engine``: an SGLang release (default: sglang); ``model``: the
    config.json already read (a REST client's preset), else the line's model reference."""
    f = line.flags
    if engine is not None and not str(engine).strip().lower().startswith("sglang"):
        raise InvalidInputError("engine", f"a launch_server line is SGLang's; got engine {engine!r}")
    _release_refuses(line, str(engine).partition("==")[2].strip() or None if engine else None)
    try:   # bounds as a REST body's (a negative --speculative-num-draft-tokens is bad input naming the field)
        extra = SglangLineFields(
            prefill_attention_backend=f.prefill_attention_backend, decode_attention_backend=f.decode_attention_backend,
            speculative_algorithm=f.speculative_algorithm, speculative_eagle_topk=f.speculative_eagle_topk,
            speculative_num_draft_tokens=f.speculative_num_draft_tokens, speculative_num_steps=f.speculative_num_steps,
            enable_deterministic_inference=f.enable_deterministic_inference, attn_dp_size=line.attn_dp_size)
    except ValidationError as exc:
        raise request_error(exc) from None
    return ModelRequest.build(model=line.model if model is None else dict(model), engine=engine or "sglang",
                              tensor_parallel_size=f.tp_size, dtype=line.dtype, kv_cache_dtype=f.kv_cache_dtype,
                              block_size=f.page_size, attention_backend=f.attention_backend,
                              num_speculative_tokens=line.speculative_tokens,
                              sglang=None if extra == SglangLineFields() else extra)


def request_from_line(text: str, *, engine: Optional[str] = None) -> ModelRequest:
    """A pasted engine command: ``vllm serve ...`` or ``[python -m] sglang.launch_server ...``. A launch line is
    SGLang's whatever the default engine of the caller (``engine`` counts only when it names an SGLang release)."""
    if is_launch_line(text):
        sg = engine if engine is not None and str(engine).strip().lower().startswith("sglang") else None
        return request_from_launch_line(parse_launch_text(text), engine=sg)
    return ModelRequest.from_serve_text(text, engine=engine or "vllm")


def plan_launch(line: LaunchLine, node: NodeFacts, ruleset: Optional[RuleSet] = None, *,
                data: Optional[Mapping[str, Any]] = None, engine: Optional[str] = None) -> LaunchAnswer:
    """What SGLang would run for this line on ``node``, for one tensor-parallel rank: the line as a request,
    planned by ``plan_request`` as every engine line is. ``data``: the model's config.json already read (a REST
    client's line: a preset or a cached repo id, never a path); ``engine``: an SGLang release."""
    req = request_from_launch_line(line, model=data, engine=engine)
    sa = plan_request(req, node, ruleset, allow_paths=data is None, parser=line.parser)
    # the answer leaves the pipeline here: its sentences are written by render/ from the planner's data
    return LaunchAnswer(line, sa.ranks, finish(sa.answer), model=finish(sa.model), startup_error=sa.startup_error,
                        notes=list(sa.notes))
