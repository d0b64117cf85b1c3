"""Reading a ``python -m sglang.launch_server`` line, and its answer (``attnplan sglang launch_server``); the line is
planned as a request by attnplan/lines.py plan_launch.

SGLang's own parser (``ServerArgs.add_cli_args``) is used when ``sglang`` imports; SGLang 0.5.23 does
not import without its CUDA-side dependencies (orjson, triton, sgl_kernel...), so on a CPU machine the
named subset below reads the line, and any other flag is named in one error line, never ignored.
The flag names, defaults and backend choices are SGLang 0.5.23's (arg_groups/fields/*.py, choices.py).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Mapping

from attnplan.policy import InvalidInputError, PlanAnswer
from attnplan.model import ModelPlanAnswer
from attnplan.policy.answer import Verdict

from .flags import SglangFlags, kv_dtype

# arg_groups/choices.py ATTENTION_BACKEND_CHOICES (SGLang 0.5.23)
ATTENTION_BACKEND_CHOICES = (
    "triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed", "fa3", "fa4", "flashinfer",
    "llada2_cfg_flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla", "trtllm_mha", "hpc_ops",
    "minicpm_flashattn", "minicpm_flashinfer", "aiter", "wave", "intel_amx", "ascend", "intel_xpu",
)
# (flags, dest, type, default): SGLang's ServerArgs fields this subset reads.
SUBSET: list[tuple[tuple[str, ...], str, Any, Any]] = [
    (("--model-path", "--model"), "model_path", str, None),
    (("--tp-size", "--tensor-parallel-size", "--tp"), "tp_size", int, 1),
    (("--attention-backend",), "attention_backend", str, None),
    (("--prefill-attention-backend",), "prefill_attention_backend", str, None),
    (("--decode-attention-backend",), "decode_attention_backend", str, None),
    (("--kv-cache-dtype",), "kv_cache_dtype", str, "auto"),
    (("--page-size",), "page_size", int, None),
    (("--dtype",), "dtype", str, "auto"),
    (("--speculative-algorithm",), "speculative_algorithm", str, None),
    (("--speculative-eagle-topk",), "speculative_eagle_topk", int, None),
    (("--speculative-num-steps",), "speculative_num_steps", int, None),
    (("--speculative-num-draft-tokens",), "speculative_num_draft_tokens", int, None),
    (("--speculative-draft-model-path",), "speculative_draft_model_path", str, None),
    (("--context-length",), "context_length", int, None),
    (("--host",), "host", str, None),
    (("--port",), "port", int, None),
    (("--mem-fraction-static",), "mem_fraction_static", float, None),
    # data-parallel attention: each attention group runs tp_size / attn_dp_size of the heads
    # (runtime_context.py derive_attn_tp_size; parallel_hook.py _handle_deprecated_dp_attention turns
    # `--dp-size N --enable-dp-attention` into `--attn-dp-size N`)
    (("--dp-size", "--dp"), "dp_size", int, 1),
    (("--attn-dp-size", "--attention-data-parallel-size"), "attn_dp_size", int, 1),
]
BOOL_FLAGS = ("--enable-deterministic-inference", "--trust-remote-code", "--enable-dp-attention")
SUBSET_FLAGS = tuple(f for flags, *_ in SUBSET for f in flags) + BOOL_FLAGS
PREFIXES = ("python", "python3", "-m", "sglang.launch_server", "launch_server")


@dataclass(frozen=True)
class LaunchLine:
    model: str
    flags: SglangFlags
    dtype: str = "auto"
    speculative_tokens: int = 0
    parser: str = "subset"
    attn_dp_size: int = 1   # attention data parallelism: the heads split over tp_size / attn_dp_size ranks
    given: tuple[str, ...] = ()   # the flags as typed (a release that lacks one refuses the line: lines.py)


class _OneLine(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise InvalidInputError("sglang launch_server", message)


def _strip(argv: Sequence[str]) -> list[str]:
    out = list(argv)
    while out and (out[0] in PREFIXES or out[0].endswith(("/python", "/python3"))):
        out.pop(0)
    return out


def _backend(raw: Optional[str], flag: str) -> Optional[str]:
    if raw is None:
        return None
    b = raw.strip()
    if b not in ATTENTION_BACKEND_CHOICES:
        raise InvalidInputError(flag.lstrip("-").replace("-", "_"), f"SGLang 0.5.23 has no {flag} {raw!r}",
                                ATTENTION_BACKEND_CHOICES)
    return b


def parse_launch_text(text: str) -> LaunchLine:
    """``[python -m] sglang.launch_server --model-path M [flags]`` as one string (a REST body) -> LaunchLine."""
    import shlex

    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError("line", "give a launch_server line, e.g. 'python -m sglang.launch_server --model-path "
                                        "llama-3.1-8b --tp 2'")
    try:
        words = shlex.split(text.replace("\\\n", " "))
    except ValueError as exc:
        raise InvalidInputError("line", f"cannot split the line as a shell would: {exc}") from None
    return parse_launch_line(words)


def parse_launch_line(argv: Sequence[str], architecture: Optional[str] = None) -> LaunchLine:
    """A launch_server argument list (``python -m sglang.launch_server`` pasted whole, or only its flags)."""
    argv = _strip(argv)
    p = _OneLine(prog="sglang.launch_server", add_help=False, allow_abbrev=False)
    for flags, dest, typ, default in SUBSET:
        p.add_argument(*flags, dest=dest, type=typ, default=default)
    for f in BOOL_FLAGS:
        p.add_argument(f, action="store_true", default=False)
    ns, extra = p.parse_known_args(argv)
    if extra:
        names = [a.split("=", 1)[0] for a in extra if a.startswith("-")] or extra
        raise InvalidInputError("sglang launch_server",
                                f"not in attnplan's SGLang subset (SGLang itself does not import here): {' '.join(names)}",
                                SUBSET_FLAGS)
    if not ns.model_path:
        raise InvalidInputError("model_path", "give the model: attnplan sglang launch_server --model-path M [flags]")
    if not 1 <= ns.tp_size <= 4096:   # the bound a REST request holds tensor_parallel_size to
        raise InvalidInputError("tp_size", f"--tp-size must be 1..4096, got {ns.tp_size}")
    for dest, flag in (("dp_size", "--dp-size"), ("attn_dp_size", "--attn-dp-size")):
        if getattr(ns, dest) < 1:
            raise InvalidInputError(dest, f"{flag} must be at least 1, got {getattr(ns, dest)}")
    attn_dp = ns.attn_dp_size if ns.attn_dp_size > 1 else (ns.dp_size if ns.enable_dp_attention else 1)
    if ns.page_size is not None and ns.page_size < 1:
        raise InvalidInputError("page_size", f"--page-size must be at least 1, got {ns.page_size}")
    algo = ns.speculative_algorithm.upper() if ns.speculative_algorithm else None
    draft = ns.speculative_num_draft_tokens
    if algo and draft is None and ns.speculative_num_steps is not None:
        draft = ns.speculative_num_steps + 1   # topk 1: a chain of num_steps drafts plus the verified token
    flags = SglangFlags(
        attention_backend=_backend(ns.attention_backend, "--attention-backend"),
        prefill_attention_backend=_backend(ns.prefill_attention_backend, "--prefill-attention-backend"),
        decode_attention_backend=_backend(ns.decode_attention_backend, "--decode-attention-backend"),
        kv_cache_dtype=str(ns.kv_cache_dtype), page_size=ns.page_size,
        enable_deterministic_inference=bool(ns.enable_deterministic_inference),
        speculative_algorithm=algo, speculative_eagle_topk=ns.speculative_eagle_topk,
        speculative_num_draft_tokens=draft, speculative_num_steps=ns.speculative_num_steps, tp_size=ns.tp_size, architecture=architecture)
    kv_dtype(flags.kv_cache_dtype)  # refuses a dtype attnplan does not model, by name
    given = tuple(dict.fromkeys(a.split("=", 1)[0] for a in argv if a.startswith("--")))
    return LaunchLine(model=ns.model_path, flags=flags, dtype=ns.dtype, given=given,
                      speculative_tokens=max(0, (draft or 1) - 1) if algo else 0, parser="subset", attn_dp_size=attn_dp)


@dataclass(frozen=True)
class LaunchAnswer:
    line: LaunchLine
    ranks: int
    answer: Optional[PlanAnswer]
    model: Optional[ModelPlanAnswer] = None
    startup_error: Optional[str] = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        if self.startup_error:
            return False
        if self.model is not None:
            return self.model.ok
        return self.answer is not None and self.answer.ok

    @property
    def verdict(self) -> Optional[Verdict]:
        """The verdict of the line (policy/verdict.py): SGLang's own refusal of the parallel split, else the
        model's (every attention layer group's worst), else the one answer's."""
        if self.startup_error is not None:
            from attnplan.policy.verdict import layout_refusal

            return layout_refusal("sglang", "0.5.23", self.startup_error,
                                  "sglang/srt/configs/model_config.py (heads vs tp_size)")
        if self.model is not None:
            return self.model.verdict
        return self.answer.verdict if self.answer is not None else None


def launch_json(la: LaunchAnswer, *, trace: bool = True) -> dict[str, Any]:
    from attnplan.render import finish, plan_json

    f = la.line.flags
    per_rank = (plan_json(la.model, trace=trace) if la.model is not None
                else plan_json(la.answer, trace=trace) if la.answer is not None else None)
    v = la.verdict
    return {
        "verdict": finish(v).model_dump(mode="json") if v is not None else None,
        "sglang": {"version": "0.5.23", "parser": la.line.parser, "model_path": la.line.model, "tp_size": f.tp_size,
                   "attention_backend": f.attention_backend, "prefill_attention_backend": f.prefill_attention_backend,
                   "decode_attention_backend": f.decode_attention_backend, "kv_cache_dtype": f.kv_cache_dtype,
                   "page_size": f.page_size, "enable_deterministic_inference": f.enable_deterministic_inference,
                   "speculative_algorithm": f.speculative_algorithm, "speculative_eagle_topk": f.speculative_eagle_topk,
                   "speculative_num_draft_tokens": f.speculative_num_draft_tokens,
                   "speculative_num_steps": f.speculative_num_steps, "architecture": f.architecture,
                   "attn_dp_size": la.line.attn_dp_size},
        "ranks": la.ranks,
        "status": "startup_error" if la.startup_error else (
            la.model.status if la.model is not None else (la.answer.status if la.answer else None)),
        "startup_error": la.startup_error,
        "per_rank": per_rank,
        "notes": la.notes,
    }


def engine_lines(a: PlanAnswer) -> list[str]:
    """SGLang's pick per phase, said plainly, then its silent coercions and refusals."""
    out = []
    phases = a.engine_phases or {}
    for ph in ("prefill", "decode"):
        eb = phases.get(ph)
        if eb is None:
            continue
        fi = getattr(a.plan, ph).backend if a.plan is not None else None
        if eb.runs_flashinfer:
            # the note's first clause names the FlashInfer backend(s); a second one (after ';') says a kernel
            # the plan does not name (flashinfer's ragged prefill wrapper), kept for --json / the answer's note
            fis = eb.note.removeprefix('runs FlashInfer ').split(';')[0]
            out.append(f"  {ph:8s} SGLang {eb.name:12s} -> FlashInfer {fi or fis + ' (no plan: refused)'}")
        else:
            out.append(f"  {ph:8s} SGLang {eb.name:12s} -> not FlashInfer: {eb.note}"
                       + (f" (attnplan's FlashInfer plan here: {fi})" if fi else ""))
    for c in a.coercions:
        given = "unset" if c.given is None else c.given
        out.append(f"  coerced  {c.field}: {given} -> {c.runs}  [{c.rule}] (silently)")
    for v in a.violations:
        if v.outcome:
            out.append(f"  refused  at {v.outcome}: [{v.rule}] {v.message}")
    return out


def render_launch(la: LaunchAnswer) -> str:
    from attnplan.render import render_answer

    f = la.line.flags
    out = [f"sglang.launch_server --model-path {la.line.model}: {la.ranks} rank(s) (tensor parallel {f.tp_size}); "
           f"flags read by attnplan's SGLang subset (SGLang 0.5.23)"]
    if la.startup_error:
        from attnplan.render import render_verdict

        out += render_verdict(la.verdict)
        return "\n".join(out)
    if la.model is not None and la.answer is None:
        from attnplan.render.groups import render_groups

        for i, g in enumerate(la.model.attention_groups):
            if g.answer is not None:
                out.append(f"SGLang's pick, attention layer group {i} ({g.kind if hasattr(g, 'kind') else ''}):")
                out += engine_lines(g.answer)
        out += ["", render_groups(la.model)]
        return "\n".join(out)
    assert la.answer is not None
    out.append("SGLang's pick per phase:")
    out += engine_lines(la.answer)
    out += ["", render_answer(la.answer.model_copy(update={"verdict": la.verdict}))]
    return "\n".join(out)
