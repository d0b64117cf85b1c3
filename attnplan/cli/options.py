"""Flags shared by ``plan``, ``explain`` and ``preflight``: config fields and node facts.

Flag names mirror the field names (``--head-dim`` <-> ``head_dim``; ``--num-heads`` <->
``num_qo_heads``). Values stay strings until the pydantic model validates them, so every bad
value is reported the same way: the field, what was given, what is allowed.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Optional

from attnplan.policy import (AttentionConfig, InvalidInputError, NodeFacts, RuleSet, config_from_hf, default_ruleset,
                             load_rules, make_config, simulated_node)
from attnplan.policy.config import BACKEND_CHOICES, KV_CACHE_DTYPES, QUERY_DTYPES

# (flag, field, kind, help)
CONFIG_FLAGS: list[tuple[str, str, str, str]] = [
    ("--head-dim", "head_dim", "int", "query/key head size"),
    ("--head-dim-vo", "head_dim_vo", "int", "value/output head size (default: --head-dim)"),
    ("--num-heads", "num_qo_heads", "int", "query heads"),
    ("--num-kv-heads", "num_kv_heads", "int", "KV heads (default: --num-heads)"),
    ("--dtype", "dtype", "str", f"query/model dtype: {', '.join(QUERY_DTYPES)} (default bf16)"),
    ("--kv-cache-dtype", "kv_cache_dtype", "str", f"KV cache dtype: {', '.join(KV_CACHE_DTYPES)} (default auto)"),
    ("--page-size", "page_size", "int", "tokens per KV page (default: the smallest valid for both phases)"),
    ("--sliding-window", "sliding_window", "int", "sliding-window size in tokens"),
    ("--logits-soft-cap", "logits_soft_cap", "float", "logits soft-cap (Gemma-2: 50)"),
    ("--num-speculative-tokens", "num_speculative_tokens", "int", "speculative tokens per decode step"),
    ("--kv-lora-rank", "kv_lora_rank", "int", "MLA compressed KV rank (turns MLA on)"),
    ("--qk-nope-head-dim", "qk_nope_head_dim", "int", "MLA non-rope head size"),
    ("--qk-rope-head-dim", "qk_rope_head_dim", "int", "MLA rope head size"),
    ("--v-head-dim", "v_head_dim", "int", "MLA value head size"),
    ("--dcp-world-size", "dcp_world_size", "int", "decode context-parallel world size"),
    ("--attention-backend", "attention_backend", "str", f"force a backend in both phases: {', '.join(BACKEND_CHOICES)}"),
]
BOOL_FLAGS: list[tuple[str, str, str]] = [
    ("--sinks", "sinks", "attention sinks (GPT-OSS)"),
    ("--cascade", "cascade", "cascade (shared-prefix) attention"),
    ("--batch-invariant", "batch_invariant", "batch-invariant mode (default: VLLM_BATCH_INVARIANT on this node)"),
]


def add_config_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("attention config (or --model-config; explicit flags win over the file)")
    g.add_argument("--model-config", metavar="PATH", help="a HuggingFace config.json (or its directory)")
    for flag, field, _kind, help_ in CONFIG_FLAGS:
        g.add_argument(flag, dest=field, metavar=field.upper(), help=help_)
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
    out: dict[str, Any] = {}
    for _flag, field, kind, _h in CONFIG_FLAGS:
        raw = getattr(args, field, None)
        if raw is not None:
            out[field] = _coerce(field, kind, raw)
    for _flag, field, _h in BOOL_FLAGS:
        v = getattr(args, field, None)
        if v is not None:
            out[field] = v
    return out


def config_from_args(args: argparse.Namespace) -> AttentionConfig:
    fields = config_fields_from_args(args)
    if getattr(args, "model_config", None):
        return config_from_hf(args.model_config, **fields)
    if "num_qo_heads" not in fields:
        raise InvalidInputError("num_qo_heads", "required: give --num-heads (or --model-config)")
    return make_config(fields)


def node_from_args(args: argparse.Namespace) -> Optional[NodeFacts]:
    """Declared facts when any node flag is given; None means probe this machine."""
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
