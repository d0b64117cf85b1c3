"""Flags shared by ``plan``, ``explain`` and ``preflight``: config fields and node facts.

Flag names mirror the field names (``--head-dim`` <-> ``head_dim``; ``--num-heads`` <->
``num_qo_heads``). Values stay strings until the pydantic model validates them, so every bad
value is reported the same way: the field, what was given, what is allowed.

vLLM's vocabulary is accepted too (attnplan/vllm): ``--attention-backend FLASHINFER`` (vLLM enum
names through ``attnplan.vllm.backends``; a non-FlashInfer vLLM backend is refused), ``--block-size``
(= ``--page-size``), ``--speculative-config JSON``, ``--dtype auto`` (the model's dtype),
``--tensor-parallel-size`` (per-rank heads as vLLM's ModelConfig computes them), ``--model``
(a directory, config.json or cached HuggingFace repo id; ``--model-config`` is an alias).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Optional

from attnplan.policy import (AttentionConfig, InvalidInputError, NodeFacts, RuleSet, default_ruleset,
                             load_rules, make_config, simulated_node)
from attnplan.policy import BACKEND_CHOICES, KV_CACHE_DTYPES, QUERY_DTYPES

from . import verbosity

# (flag, field, kind, help)
CONFIG_FLAGS: list[tuple[str, str, str, str]] = [
    ("--head-dim", "head_dim", "int", "query/key head size"),
    ("--head-dim-vo", "head_dim_vo", "int", "value/output head size (default: --head-dim)"),
    ("--num-heads", "num_qo_heads", "int", "query heads"),
    ("--num-kv-heads", "num_kv_heads", "int", "KV heads (default: --num-heads)"),
    ("--dtype", "dtype", "str", f"query/model dtype: auto (the model's, as vLLM), {', '.join(QUERY_DTYPES)} (default bf16)"),
    ("--kv-cache-dtype", "kv_cache_dtype", "str", f"KV cache dtype: {', '.join(KV_CACHE_DTYPES)} (default auto)"),
    ("--page-size", "page_size", "int", "tokens per KV page, vLLM's --block-size (default: the smallest valid for both phases)"),
    ("--sliding-window", "sliding_window", "int", "sliding-window size in tokens"),
    ("--logits-soft-cap", "logits_soft_cap", "float", "logits soft-cap (Gemma-2: 50)"),
    ("--num-speculative-tokens", "num_speculative_tokens", "int", "speculative tokens per decode step"),
    ("--kv-lora-rank", "kv_lora_rank", "int", "MLA compressed KV rank (turns MLA on)"),
    ("--qk-nope-head-dim", "qk_nope_head_dim", "int", "MLA non-rope head size"),
    ("--qk-rope-head-dim", "qk_rope_head_dim", "int", "MLA rope head size"),
    ("--v-head-dim", "v_head_dim", "int", "MLA value head size"),
    ("--dcp-world-size", "dcp_world_size", "int", "decode context-parallel world size"),
    ("--attention-backend", "attention_backend", "str",
     f"force a backend: vLLM's FLASHINFER, FLASHINFER_MLA, TRTLLM_RAGGED or {', '.join(BACKEND_CHOICES)}"),
]
# Extra spellings of a flag (vLLM's names).
FLAG_ALIASES: dict[str, tuple[str, ...]] = {"--page-size": ("--block-size",)}
BOOL_FLAGS: list[tuple[str, str, str]] = [
    ("--sinks", "sinks", "attention sinks (GPT-OSS)"),
    ("--cascade", "cascade", "cascade (shared-prefix) attention"),
    ("--batch-invariant", "batch_invariant", "batch-invariant mode (default: VLLM_BATCH_INVARIANT on this node)"),
]


def add_config_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("attention config (or --model-config; explicit flags win over the file)")
    g.add_argument("--model", "--model-config", dest="model_config", metavar="MODEL",
                   help="a model directory, its config.json, or a HuggingFace repo id in the local cache")
    for flag, field, _kind, help_ in CONFIG_FLAGS:
        g.add_argument(flag, *FLAG_ALIASES.get(flag, ()), dest=field, metavar=field.upper(), help=help_)
    g.add_argument("--tensor-parallel-size", dest="tensor_parallel_size", metavar="TP",
                   help="vLLM tensor parallelism: plan one rank (heads/TP query heads, max(1, kv/TP) KV heads)")
    g.add_argument("--speculative-config", dest="speculative_config", metavar="JSON",
                   help='vLLM\'s speculative config, e.g. \'{"method": "eagle", "num_speculative_tokens": 3}\'')
    for flag, field, help_ in BOOL_FLAGS:
        g.add_argument(flag, dest=field, action=argparse.BooleanOptionalAction, default=None, help=help_)


def add_node_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("node (default: probe this machine)")
    g.add_argument("--device", help="plan for a catalog device instead, e.g. B200, GB300, H100, 'RTX PRO 6000'")
    g.add_argument("--capability", help="plan for a compute capability instead, e.g. 10.3")
    g.add_argument("--flashinfer-version", help="declare the node's flashinfer version (default for simulated nodes: supported)")
    g.add_argument("--cubins", choices=["available", "missing"], help="declare whether trtllm-gen cubins are available")


def _coerce(field: str, kind: str, raw: str) -> Any:
    if kind == "int":
        try:
            return int(raw.strip(), 10)
        except ValueError:
            raise InvalidInputError(field, f"must be an integer, got {raw!r}") from None
    if kind == "float":
        try:
            return float(raw)
        except ValueError:
            raise InvalidInputError(field, f"must be a number, got {raw!r}") from None
    return raw


def config_fields_from_args(args: argparse.Namespace) -> dict[str, Any]:
    from attnplan.policy.backend_names import backend_choice

    out: dict[str, Any] = {}
    for _flag, field, kind, _h in CONFIG_FLAGS:
        raw = getattr(args, field, None)
        if raw is not None:
            out[field] = _coerce(field, kind, raw)
    if isinstance(out.get("dtype"), str) and out["dtype"].strip().lower() == "auto":
        del out["dtype"]  # vLLM's default: the model's dtype (hfconfig), else bf16
    if out.get("attention_backend") is not None:
        out["attention_backend"] = backend_choice(out["attention_backend"])
    spec = getattr(args, "speculative_config", None)
    if spec is not None:
        from attnplan.vllm.args import parse_json_arg, speculative_tokens   # only --speculative-config reads it

        n = speculative_tokens(parse_json_arg(spec, "speculative_config"))
        if "num_speculative_tokens" in out and out["num_speculative_tokens"] != n:
            raise InvalidInputError("num_speculative_tokens", f"--num-speculative-tokens {out['num_speculative_tokens']} "
                                    f"contradicts --speculative-config's {n}")
        out["num_speculative_tokens"] = n
    for _flag, field, _h in BOOL_FLAGS:
        v = getattr(args, field, None)
        if v is not None:
            out[field] = v
    return out


def tensor_parallel_from_args(args: argparse.Namespace) -> int:
    """``--tensor-parallel-size`` (default 1), at least 1."""
    raw = getattr(args, "tensor_parallel_size", None)
    if raw is None:
        return 1
    tp = _coerce("tensor_parallel_size", "int", raw)
    if tp < 1:
        raise InvalidInputError("tensor_parallel_size", f"must be at least 1, got {tp}")
    return tp


def config_from_args(args: argparse.Namespace) -> AttentionConfig:
    """The (per-rank, with --tensor-parallel-size) config the flags and model describe. Notes about
    config.json fields attnplan's own parser did not read go to stderr."""
    from attnplan.model.hfconfig import read_model
    from attnplan.policy.parallel import per_rank_fields, startup_errors
    from attnplan.render.notes import notes_text

    fields = config_fields_from_args(args)
    model = getattr(args, "model_config", None)
    if model is not None:
        info = read_model(model)
        for note in notes_text(info.notes_says):   # the reader's notes are data (render/notes.py words them)
            verbosity.note(note)
        fields = {**info.fields, **{k: v for k, v in fields.items() if v is not None}}
    elif "num_qo_heads" not in fields:
        raise InvalidInputError("num_qo_heads", "required: give --num-heads (or --model)")
    tp_raw = getattr(args, "tensor_parallel_size", None)
    if tp_raw is not None:
        tp = tensor_parallel_from_args(args)
        heads = fields["num_qo_heads"]
        if isinstance(heads, int) and not isinstance(heads, bool) and heads >= 1:
            kv = fields.get("num_kv_heads") or heads
            errs = startup_errors(heads, kv, tp, fields.get("dcp_world_size") or 1,
                                  mla=fields.get("kv_lora_rank") is not None)
            if errs:
                raise InvalidInputError("tensor_parallel_size", "vLLM refuses this at startup: " + errs[0])
            fields = per_rank_fields(fields, tp)
    return make_config(fields)


def node_from_args(args: argparse.Namespace) -> Optional[NodeFacts]:
    """Declared facts when any node flag is given; None means probe this machine."""
    for flag in ("device", "capability"):
        v = getattr(args, flag, None)
        if v is not None and not str(v).strip():
            # An empty --device must not fall through to probing this machine.
            raise InvalidInputError(flag, f"--{flag} is empty: name a catalog device (e.g. B200) or a capability (e.g. 10.0)")
    if getattr(args, "device", None) or getattr(args, "capability", None):
        return simulated_node(args.device, capability=args.capability,
                              flashinfer_version=args.flashinfer_version, cubins=args.cubins)
    if getattr(args, "flashinfer_version", None) or getattr(args, "cubins", None):
        raise InvalidInputError("device", "--flashinfer-version/--cubins describe a simulated node: add --device or --capability")
    return None


def add_rules_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rules", metavar="DIR", default=None,
                   help="rule packs (*.yaml) to use instead of the shipped ones (default: $ATTNPLAN_RULES); "
                        "they load whole or not at all")


def rules_dir_from_args(args: argparse.Namespace) -> Optional[Path]:
    raw = getattr(args, "rules", None) or os.environ.get("ATTNPLAN_RULES") or None
    return Path(raw) if raw else None


def ruleset_from_args(args: argparse.Namespace) -> RuleSet:
    """The shipped rules, or ``--rules DIR`` / ``$ATTNPLAN_RULES`` (a pack that fails to load is
    a ``RulePackError``: exit 2 with the file and rule named)."""
    d = rules_dir_from_args(args)
    return load_rules(d) if d is not None else default_ruleset()


def pull_own_flags(words: list[str], into: argparse.Namespace, values: dict[str, str],
                   switches: dict[str, str]) -> list[str]:
    """attnplan's own flags taken out of a pasted engine line wherever they stand (``values``: flag -> the
    attribute its value goes to, ``--flag V`` or ``--flag=V``; ``switches``: flag -> attribute set True), set on
    ``into``; the rest of the line, in order, is the engine's (cli/vllm.py, cli/upgrade.py)."""
    rest: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        name, eq, val = w.partition("=")
        if name in values:
            if not eq:
                if i + 1 >= len(words):
                    raise InvalidInputError(name.lstrip("-"), f"{name} needs a value")
                val = words[i + 1]
                i += 1
            setattr(into, values[name], val)
        elif w in switches:
            setattr(into, switches[w], True)
        else:
            rest.append(w)
        i += 1
    return rest
