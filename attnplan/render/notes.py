"""Every sentence the planner's answers hold beside the verdict, written here from the data they carry (issue 36
item 6: answers carry data; every sentence is rendered in ``render/``).

The planner (``attnplan.policy``, ``attnplan.model``) leaves a ``Note`` (policy/answer.py) where a sentence goes:
an answer's ``notes_says`` (its ``notes``, in order), a ``Violation.says`` built in code (its ``message``,
``required`` and ``fix``), a ``Suggestion.says`` (its ``message``) and an ``EngineBackend.says`` (its ``note``).
``note_text`` words one; render/verdict.py ``finish`` fills the text fields of an answer with them, so the
JSON contract's text is this module's. The engine's name comes from the answer (``EngineName``: the rule set's
``engines.<name>.display``), never from a table here.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from attnplan.policy.answer import EngineName, Note

NOT_SERVED = "not served by FlashInfer attention"


def engine_words(e: Optional[EngineName]) -> str:
    """``vLLM 0.33.0``, ``SGLang 0.5.23``; attnplan's own adapter has no release of its own."""
    if e is None:
        return ""
    if e.adapter:
        return f"attnplan's {e.display} adapter"
    return " ".join(x for x in (e.display, e.version) if x)


def _engine_selects(n: Note) -> str:
    who, name, fi = engine_words(n.engine), n.backend, n.flashinfer_backend
    if name == "none":
        out = f"{who} finds no valid attention backend here without --attention-backend"
        return out + (f"; the plan below is for --attention-backend {fi}" if n.ok else "")
    if not n.ok:   # a rejection: say what the engine picks, claim nothing about a plan
        return (f"{who} selects {name} here{'' if n.runs_flashinfer else ' (not FlashInfer)'} "
                "without --attention-backend")
    if n.runs_flashinfer:
        return f"{who} selects {name} here without --attention-backend: the plan below is what it runs"
    return (f"{who} selects {name} here (not FlashInfer) without --attention-backend; "
            f"the plan below is what it runs with --attention-backend {fi}")


def _mla_prefill(n: Note) -> str:
    who = engine_words(n.engine)
    if n.backend == "none":
        return f"{who} finds no MLA prefill backend for these dimensions ({n.source})"
    if n.runs_flashinfer:
        return f"{who}'s MLA prefill {n.backend} runs FlashInfer {n.flashinfer_backend}"
    return (f"{who}'s default MLA prefill is {n.backend} (not FlashInfer); the FlashInfer prefill of the plan "
            f"runs with {n.args}")


def _fallback(n: Note) -> str:
    why = "; ".join(f"[{rule}] {message}" for rule, message in n.why) or "no page size shared with the other phase"
    return f"{n.phase}: {n.backend} skipped ({why}); using {n.used}"


def _jit_name_clash(n: Note) -> str:
    differ = ", ".join(n.differ)
    said = "; ".join(f"groups {', '.join(map(str, gs))}: " + ", ".join(f"{k}={w}" for k, w in zip(n.differ, ws))
                     for gs, ws in n.builds)
    return (f"FlashInfer names the {n.call} module {n.name!r} by {', '.join(n.named_by)} alone and compiles "
            f"{differ} into it; this model needs it twice ({said}): one process loads one "
            f"library for both, so a group runs a kernel built for the other's {differ} "
            f"(output left unwritten, hangs; {n.source})")


def _suggestion(n: Note) -> str:
    value = n.value
    if n.field == "flashinfer_cubin":
        if n.on_pypi:
            what = f"pip install flashinfer-cubin=={value} (trtllm-gen cubins from the wheel)"
        else:
            what = (f"install flashinfer-cubin {value} from FlashInfer's wheel index ({n.wheel_index}; the package "
                    f"index stops at {n.pypi_max}), or point FLASHINFER_CUBIN_DIR at a directory holding its trtllm-gen "
                    "cubins")
    else:
        what = _FIELD_WORDS[str(n.field)].format(value=value)
    return f"{what}: then prefill runs {n.prefill}, decode runs {n.decode}"


def _release_pin(n: Note) -> str:
    # the engine as the rule set names it (``vllm 0.32.0``: its id, as the pin's data is keyed)
    who = f"{n.engine.name} {n.engine.version}" if n.engine is not None else ""
    return (f"{who} pins flashinfer-python=={n.pin} ({n.source}); this node has {n.installed}: the kernel rules "
            f"answer for the installed {n.installed}, a combination {who}'s release was not built against")


def _display(n: Note) -> str:
    """The engine's display name (backends.yaml engines.<name>.display), without its release."""
    return n.engine.display if n.engine is not None else ""


_FIELD_WORDS = {
    "kv_cache_dtype": "kv_cache_dtype={value}",
    "page_size": "page_size={value}",
    "batch_invariant": "turn batch-invariant mode off",
    "attention_backend": "let attnplan choose the backend (attention_backend=auto)",
    "flashinfer_version": "install flashinfer-python=={value}",
}

_SAY: dict[str, Callable[[Note], str]] = {
    "text": lambda n: str(n.text),
    "no-candidate": lambda n: f"{n.phase}: no backend candidate for this device",
    "block-size": lambda n: (f"block_size {n.block}: the kernels read pages of {n.page}, the largest kernel page "
                             f"dividing it ({n.source})"),
    "fallback": _fallback,
    "page-size-chosen": lambda n: (f"page_size {n.page} chosen: the smallest that prefill {n.prefill} and decode "
                                   f"{n.decode} both take"),
    "engine-selects": _engine_selects,
    "mla-prefill": _mla_prefill,
    "hybrid-kv-cache": lambda n: (f"hybrid KV cache: attention block raised to {n.block} tokens so that its page "
                                  f"({n.page_bytes} bytes) holds one request's recurrent state ({n.state_bytes} bytes); "
                                  f"kernels still see {n.page}-token pages"),
    "not-served": lambda n: f"layers {n.layers} ({n.group_kind}, {n.mixer}): {NOT_SERVED}",
    "group-not-served": lambda n: f"{NOT_SERVED} (a recurrent mixer); its state is paged beside the KV cache",
    "no-attention": lambda n: "no attention layers: nothing for FlashInfer attention to serve",
    "page-size-clash": lambda n: f"no page size suits both prefill {n.prefill} and decode {n.decode} (one KV cache)",
    "model-page-size": lambda n: ("no page size suits every layer group (one KV block size for the model): "
                                  + "; ".join(f"layers {first}.. {sorted(sizes)}" for first, sizes in n.sizes)),
    "chunked-block": lambda n: (f"chunked local attention splits requests into {n.chunk}-token virtual requests over "
                                f"whole KV blocks; block size {n.block} does not divide {n.chunk} ({n.source})"),
    "jit-name-clash": _jit_name_clash,
    "suggestion": _suggestion,
    "layer-types-overridden": lambda n: (f"layer_types disagrees with {n.source} (sliding window on even layers); "
                                         "planned as vLLM runs it"),
    "parallel-mixer": lambda n: (f"{n.name}: every layer runs attention and a {n.mixer} mixer in parallel "
                                 "(vLLM names layer i's Mamba mixer num_hidden_layers + i)"),
    "multimodal": lambda n: ("multimodal config: the language model's text_config is planned; vision_config is not "
                             "attention served here"),
    "ignored-fields": lambda n: "ignored (they do not change attention): " + ", ".join(n.named_by),
    "config-class-refused": lambda n: (f"transformers' {n.name} config class refused this config.json ({n.value}); "
                                       "read by attnplan's own parser"),
    "unread-fields": lambda n: (f"{n.source}: fields not read by attnplan's parser (install transformers to read "
                                f"them as the model does): {', '.join(n.named_by)}"),
    "release-pin": _release_pin,
    "run-backend": lambda n: f"run {_display(n)}'s {n.backend}",
    "trtllm-off": lambda n: f"keep {_display(n)}'s FlashInfer off trtllm-gen / XQA (its native wrappers run)",
    "nope-temperature": lambda n: (f"{n.name.removesuffix('_text')} NoPE layers: attn_temperature_tuning scales q by "
                                   f"position before the kernel ({n.source}); the kernel's sm_scale stays head_dim^-0.5"),
}

# A violation's ``required`` and ``fix``, by kind (its ``message`` is ``note_text``).
_REQUIRED: dict[str, Callable[[Note], str]] = {
    "page-size-clash": lambda n: (f"a size both {n.prefill} {tuple(n.prefill_pages)} and {n.decode} "
                                  f"{tuple(n.decode_pages)} take"),
    "model-page-size": lambda n: "one page size every layer group takes",
    "chunked-block": lambda n: f"a KV block size that divides attention_chunk_size {n.chunk}",
    "jit-name-clash": lambda n: f"every layer group's {n.call} module compiled alike under one name",
}
_FIX: dict[str, Callable[[Note], str]] = {
    "chunked-block": lambda n: "use a page size that divides the chunk size",
    "jit-name-clash": lambda n: (f"serve these groups with one {', '.join(n.differ)}, or one of them on another "
                                 "backend (the backend is part of the name)"),
}


def note_text(n: Note) -> str:
    """The sentence of one note's data (one layer group's note, on a model of several, names its layers first)."""
    text = _SAY[n.kind](n)
    return f"layers {n.group_layers}: {text}" if n.group_layers else text


def violation_text(n: Note) -> dict[str, Any]:
    """A violation's text fields (``message``, ``required``, ``fix``) from its data."""
    out: dict[str, Any] = {"message": note_text(n)}
    if n.kind in _REQUIRED:
        out["required"] = _REQUIRED[n.kind](n)
    if n.kind in _FIX:
        out["fix"] = _FIX[n.kind](n)
    return out


def notes_text(notes: tuple[Note, ...]) -> tuple[str, ...]:
    return tuple(note_text(n) for n in notes)


# -- a model's notes (model/plan.py plan_model), named for what they read ---------------------------------
def kv_cache_notes(kv: Any) -> list[str]:
    """A KVCacheGroupsPlan's notes: the hybrid block raise, when there was one."""
    if kv is None:
        return []
    return list(notes_text(kv.notes_says)) if kv.notes_says else list(kv.notes)


def group_notes(g: Any) -> list[str]:
    """A layer group's own notes."""
    return list(notes_text(g.notes_says)) if g.notes_says else list(g.notes)


def all_notes_text(m: Any) -> tuple[str, ...]:
    """A ModelPlanAnswer's notes, then each attention group's, as model/plan.py ``all_notes_says`` orders them (a
    note every attention group has once; another one named with its group's layers)."""
    return notes_text(m.all_notes_says())


def model_notes(m: Any) -> list[str]:
    """The notes ``plan_model`` writes about the model (a ModelPlanAnswer), in its order."""
    return list(notes_text(m.notes_says)) if m.notes_says else list(m.notes)
