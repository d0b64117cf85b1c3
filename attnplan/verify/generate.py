"""Probe configurations on both sides of each kernel rule's boundary, from the rule data.

For one check of a rule and one (backend, phase) it applies to, a probe is a config that
differs from a base config (accepted by every kernel rule on this node) in the facts the check
reads, taking values from the conditions themselves (``domains.py``):

- *accept*: the check holds and no kernel rule refuses the config - if FlashInfer then fails or
  computes it wrong, the rules are **dangerous**;
- *refuse*: the check fails, and as few other rules as possible refuse it too (ideally none) -
  if FlashInfer runs it correctly, every rule that refuses it is **stale**.

The node is this GPU's: facts of the machine (capability, versions, cubins) are never changed,
so a boundary that lies only on them is reported as not reachable here, with the reason.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Optional

from attnplan.policy import AttentionConfig
from attnplan.policy import NodeFacts
from attnplan.policy.facts_catalog import base_context
from attnplan.policy.plan import attention_plan, phase_plan  # the plan's own derivation of the call
from attnplan.policy.jit_names import jit_name  # FlashInfer's name for modules it names short
from attnplan.policy import Check, Rule, RuleSet

from .domains import (CONFIG_FIELD, FIXED_BY_PROBE, dynamic_values, leaves, named_values, static_domains,
                      why_unprobeable)
from . import tolerance as tol
from .call_facts import facts
from .select import is_kernel_rule, kernel_rules, unrunnable_reason

STANDARD_BASE: dict[str, Any] = dict(head_dim=128, num_qo_heads=8, num_kv_heads=2, dtype="bf16",
                                     kv_cache_dtype="auto", page_size=16)
MLA_BASE: dict[str, Any] = dict(num_qo_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                                v_head_dim=128, dtype="bf16", kv_cache_dtype="auto", page_size=16)

MAX_PER_SIDE = 6          # probes per (check, backend, phase, side) in a full run
MAX_PAIRS = 3000          # two-fact mutations tried per check and target


@dataclass(frozen=True)
class Target:
    backend: str
    phase: str
    mla: bool


@dataclass
class Boundary:
    """Why a probe exists: the rule/check whose boundary it probes, the side, what changed."""

    rule: str
    check: int
    side: str                      # accept | refuse
    changed: dict[str, Any]


@dataclass
class Probe:
    id: str
    backend: str
    phase: str
    call: str
    config: dict[str, Any]
    refused_by: tuple[str, ...]
    boundaries: list[Boundary] = field(default_factory=list)
    spec: dict[str, Any] = field(default_factory=dict)      # what the child process runs
    module: str = ""                                         # JIT module key (build pass)
    skip: Optional[str] = None

    def side_for(self, rule_id: str) -> str:
        return "refuse" if rule_id in self.refused_by else "accept"


@dataclass
class Gap:
    """A boundary side no probe covers, and why."""

    rule: str
    check: int
    backend: str
    phase: str
    side: str
    reason: str


@dataclass
class Generated:
    probes: list[Probe]
    gaps: list[Gap]
    rules: list[str]


# -- targets and evaluation ------------------------------------------------------------------
def targets(ruleset: RuleSet) -> list[Target]:
    out = []
    for name, spec in ruleset.backends.items():
        if spec.kind in ("standard", "any"):
            out += [Target(name, ph, False) for ph in spec.calls]
        if spec.kind == "mla":
            out += [Target(name, ph, True) for ph in spec.calls]
        elif spec.kind == "any":
            out += [Target(name, ph, True) for ph in spec.mla_calls]
    return out


def applies(check: Check, t: Target) -> bool:
    """Whether ``check`` is evaluated on (backend, phase) of ``t`` (pair checks always are)."""
    return check.scope == "pair" or check.applies_to(t.backend, t.phase)


def contexts(config: AttentionConfig, node: NodeFacts, t: Target,
             node_part: Optional[dict[str, Any]] = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fact contexts of a pair check (no backend) and of a candidate check on ``t``."""
    pair = base_context(config, node, node_part)
    cand = dict(pair, backend=t.backend, phase=t.phase)
    return pair, cand


def refuses(check: Check, pair: dict[str, Any], cand: dict[str, Any]) -> bool:
    """Whether ``check`` refuses in these contexts (``contexts``): its condition holds, or it has
    none, and its requirement fails."""
    ctx = pair if check.scope == "pair" else cand
    return (check.when is None or check.when.test(ctx)) and not check.require.test(ctx)


def refusals(rules: list[Rule], config: AttentionConfig, node: NodeFacts, t: Target) -> tuple[str, ...]:
    """The kernel rules that refuse ``config`` on (backend, phase) of this node, as the engine
    evaluates them (pair checks without a backend, candidate checks with it)."""
    pair, cand = contexts(config, node, t)
    return tuple(rule.id for rule in rules if any(applies(c, t) and refuses(c, pair, cand) for c in rule.checks))


def mutate(config: dict[str, Any], fact: str, value: Any, mla: bool) -> Optional[dict[str, Any]]:
    """The config with one fact set to ``value`` (None when no valid config has it)."""
    out = dict(config)
    if fact == "config.head_dim" and mla:
        nope = value - int(out["qk_rope_head_dim"]) if isinstance(value, int) else None
        if nope is None or nope < 1:
            return None
        out["qk_nope_head_dim"] = nope
    elif fact == "config.head_dim_vo" and mla:
        out["v_head_dim"] = value
    elif fact == "config.head_dim" and not mla:
        out["head_dim"] = value            # head_dim_vo, when unset, follows it (qk == vo)
    else:
        out[CONFIG_FIELD[fact]] = value
    try:
        AttentionConfig.model_validate(out)
    except ValueError:
        return None
    return out


# -- per check ---------------------------------------------------------------------------------
@dataclass
class _Cand:
    cfg: dict[str, Any]
    changed: dict[str, Any]
    when_ok: bool
    req_ok: bool
    refused: tuple[str, ...]


def _evaluate(check: Check, rules: list[Rule], node: NodeFacts, t: Target, cfg: dict[str, Any],
              changed: dict[str, Any]) -> _Cand:
    config = AttentionConfig.model_validate(cfg)
    pair, cand = contexts(config, node, t)
    ctx = pair if check.scope == "pair" else cand
    when_ok = check.when is None or check.when.test(ctx)
    return _Cand(cfg, changed, when_ok, check.require.test(ctx), refusals(rules, config, node, t))


def _mutable_reads(check: Check) -> list[str]:
    reads = set(check.require.reads) | (set(check.when.reads) if check.when else set())
    return sorted(f for f in reads if f in CONFIG_FIELD)


def _values(fact: str, domains: dict[str, set[Any]], check: Check, ctx: dict[str, Any]) -> list[Any]:
    vals = set(domains.get(fact, set()))
    for leaf in itertools.chain(leaves(check.require), leaves(check.when)):
        vals |= dynamic_values(leaf, ctx).get(fact, set())
    return sorted(vals, key=lambda v: (v is None, str(type(v)), v if v is not None else 0))


def _candidates(check: Check, rules: list[Rule], node: NodeFacts, t: Target, base: dict[str, Any],
                domains: dict[str, set[Any]], need_pairs: bool) -> list[_Cand]:
    config = AttentionConfig.model_validate(base)
    ctx = base_context(config, node)
    facts = _mutable_reads(check)
    singles = []
    for f in facts:
        for v in _values(f, domains, check, ctx):
            if v == ctx.get(f):
                continue
            cfg = mutate(base, f, v, t.mla)
            if cfg is not None:
                singles.append(((f, v), cfg))
    out = [_evaluate(check, rules, node, t, base, {})]
    out += [_evaluate(check, rules, node, t, cfg, {f: v}) for (f, v), cfg in singles]
    if need_pairs(out):
        tried = 0
        for ((f1, v1), c1), ((f2, v2), _c2) in itertools.combinations(singles, 2):
            if f1 == f2 or tried >= MAX_PAIRS:
                continue
            cfg = mutate(c1, f2, v2, t.mla)
            if cfg is not None:
                tried += 1
                out.append(_evaluate(check, rules, node, t, cfg, {f1: v1, f2: v2}))
    return out


def _unprobeable_reads(check: Check) -> list[str]:
    return sorted({f for f in check.require.reads if why_unprobeable(f)})


def _version_leaves(check: Check) -> bool:
    return any(leaf.op == "version" for leaf in leaves(check.require))


def _side_gap_reason(check: Check, side: str, cands: list[_Cand]) -> str:
    if _version_leaves(check):
        return "version specifiers are not probeable (the installed version is the node's)"
    if not any(c.when_ok for c in cands):
        return f"does not apply on this GPU (when: {check.when.describe() if check.when else '-'})"
    fixed = [f for f in sorted(check.require.reads) if f not in CONFIG_FIELD]
    if fixed and not any(f in CONFIG_FIELD for f in check.require.reads):
        where = "; ".join(why_unprobeable(f) or f"{f} is fixed by the probe" for f in fixed)
        here = "accepting" if side == "refuse" else "refusing"
        return f"the boundary lies on {where}: this GPU and backend are on the {here} side"
    if side == "accept":
        return "no config the check accepts is accepted by every kernel rule for this backend and phase"
    return "no config within the conditions' domains makes this check fail"


def _silent(check: Check, cands: list[_Cand]) -> bool:
    """A check that never applies to this target only because of what the target is (MLA or
    not, its backend): nothing to report."""
    return not any(c.when_ok for c in cands) and check.when is not None and check.when.reads <= FIXED_BY_PROBE


def base_for(rules: list[Rule], node: NodeFacts, t: Target, domains: dict[str, set[Any]]) -> Optional[dict[str, Any]]:
    """The base config for a target: the standard (or MLA) base, repaired by the fewest single
    changes from the domains when some kernel rule refuses it on this node."""
    base = dict(MLA_BASE if t.mla else STANDARD_BASE)
    if not refusals(rules, AttentionConfig.model_validate(base), node, t):
        return base
    facts = sorted({f for r in rules for c in r.checks if applies(c, t) for f in _mutable_reads(c)})
    singles = [(f, v) for f in facts for v in sorted(domains.get(f, ()), key=str)]
    for n in (1, 2):
        for combo in itertools.combinations(singles, n):
            cfg: Optional[dict[str, Any]] = base
            for f, v in combo:
                cfg = mutate(cfg, f, v, t.mla) if cfg is not None else None
            if cfg is not None and not refusals(rules, AttentionConfig.model_validate(cfg), node, t):
                return cfg
    return None


def generate(ruleset: RuleSet, node: NodeFacts, *, only: Optional[list[str]] = None, quick: bool = False) -> Generated:
    """Every probe for the kernel rules (or ``only`` those ids) on this node, deduplicated."""
    all_kernel = [r for r in ruleset.rules if is_kernel_rule(r)]
    chosen = kernel_rules(ruleset, only)
    domains = static_domains([p for r in all_kernel for c in r.checks for p in (c.require, c.when)])
    probes: dict[str, Probe] = {}
    gaps: list[Gap] = []
    bases: dict[Target, Optional[dict[str, Any]]] = {}
    for rule in chosen:
        for check in rule.checks:
            for t in targets(ruleset):
                if not applies(check, t):
                    continue
                if t not in bases:
                    bases[t] = base_for(all_kernel, node, t, domains)
                base = bases[t]
                if base is None:
                    reason = _no_base_reason(all_kernel, ruleset, node, t)
                    gaps += [Gap(rule.id, check.index, t.backend, t.phase, side, reason) for side in ("accept", "refuse")]
                    continue
                for side, picked, reason in _pick(check, rule, all_kernel, node, t, base, domains, quick, ruleset):
                    if not picked:
                        gaps.append(Gap(rule.id, check.index, t.backend, t.phase, side, reason))
                    for cand in picked:
                        _add(probes, ruleset, node, t, cand, Boundary(rule.id, check.index, side, cand.changed))
    ordered = sorted(probes.values(), key=lambda p: (p.backend, p.phase, p.module, json.dumps(p.config, sort_keys=True)))
    for i, p in enumerate(ordered):
        p.id = f"p{i:03d}-" + p.id
    unique = list({(g.rule, g.check, g.backend, g.phase, g.side, g.reason): g for g in gaps}.values())
    return Generated(ordered, unique, [r.id for r in chosen])


def _no_base_reason(rules: list[Rule], ruleset: RuleSet, node: NodeFacts, t: Target) -> str:
    config = AttentionConfig.model_validate(MLA_BASE if t.mla else STANDARD_BASE)
    call = phase_plan(config, t.phase, t.backend, ruleset, int(config.page_size or 16)).call
    why = unrunnable_reason(call, node.capability.value)
    refused = ", ".join(refusals(rules, config, node, t))
    return (why + "; " if why else "") + f"no config is accepted by every kernel rule here (refused by {refused})"


def _module_key(ruleset: RuleSet, t: Target, cfg: dict[str, Any]) -> str:
    config = AttentionConfig.model_validate(cfg)
    pp = phase_plan(config, t.phase, t.backend, ruleset, int(config.page_size or 16))
    return jit_identity(config, pp)


def jit_identity(config: AttentionConfig, pp: Any) -> str:
    """What FlashInfer compiles one JIT module for (its URI's parameters), so probes that share a
    module build it once: flashinfer/jit/attention/modules.py get_batch_prefill_uri /
    get_batch_decode_uri (dtypes, head dims, use_swa, use_logits_cap) - the paged and ragged
    prefill, tensor-core decode and speculative decode share the prefill module;
    get_batch_mla_uri (dtypes, ckv, kpe); flashinfer/jit/xqa.py gen_xqa_module (dtypes, page
    size, head dim, GQA group, sliding window, q_seq_len)."""
    flags = f"swa={config.sliding_window is not None}:cap={config.logits_soft_cap is not None}"
    dt = f"{pp.query_dtype}:{pp.kv_view_dtype}:{pp.output_dtype}"
    hd = f"{config.qk_head_dim}x{config.vo_head_dim}"
    f = facts(pp.call)
    family = "prefill" if f.tensor_core_kernel and pp.use_tensor_cores else f.jit
    return _JIT_IDENTITY[family](config, pp, dt, hd, flags)


_JIT_IDENTITY = {
    "xqa": lambda config, pp, dt, hd, flags: (
        f"xqa:{dt}:p={config.page_size}:hd={hd}:g={config.group_size}:swa={config.sliding_window is not None}"
        f":q={pp.q_len_per_req}"),
    "mla": lambda config, pp, dt, hd, flags: (
        f"mla:{pp.flashinfer_backend}:{dt}:ckv={config.kv_lora_rank}:kpe={config.qk_rope_head_dim}"),
    "sink": lambda config, pp, dt, hd, flags: f"sink:{pp.flashinfer_backend}:{dt}:{hd}:{flags}",
    "decode": lambda config, pp, dt, hd, flags: f"decode:{dt}:{hd}:{flags}",
    "prefill": lambda config, pp, dt, hd, flags: f"prefill:{pp.flashinfer_backend}:{dt}:{hd}:{flags}",
}


def _pick(check: Check, rule: Rule, rules: list[Rule], node: NodeFacts, t: Target, base: dict[str, Any],
          domains: dict[str, set[Any]], quick: bool, ruleset: RuleSet) -> list[tuple[str, list[_Cand], str]]:
    def want_pairs(cs: list[_Cand]) -> bool:
        return not any(c.when_ok and not c.req_ok and c.refused == (rule.id,) for c in cs) or \
            not any(c.when_ok and c.req_ok and not c.refused for c in cs)

    cands = _candidates(check, rules, node, t, base, domains, want_pairs)
    if _silent(check, cands):
        return []
    accept = [c for c in cands if c.when_ok and c.req_ok and not c.refused]
    refuse = [c for c in cands if c.when_ok and not c.req_ok and rule.id in c.refused]
    if refuse:
        fewest = min(len(c.refused) for c in refuse)
        refuse = [c for c in refuse if len(c.refused) == fewest]
    # Fewest changes first; among those, values some rule names literally (another backend's
    # head sizes, page sizes, dtypes) before the derived neighbours: they are the configs a
    # user can actually ask for, so --quick probes them.
    # The accepting side prefers a config that moves a fact the check requires (the largest head
    # size it accepts, a page size it names) over the untouched base config.
    named = named_values(rules)
    required = set(check.require.reads)
    rank = lambda c: (len(c.changed), sum(v not in named.get(f, ()) for f, v in c.changed.items()))  # noqa: E731
    # In --quick, only when that costs no JIT module beyond the base config's (a page size does,
    # a head size does not): a lease has minutes, and every module is a build.
    base_module = _module_key(ruleset, t, base)
    accept.sort(key=lambda c: (not (set(c.changed) & required) or (quick and _module_key(ruleset, t, c.cfg) != base_module),
                               *rank(c)))
    refuse.sort(key=rank)
    limit = 1 if quick else MAX_PER_SIDE
    out = []
    for side, picked in (("accept", _distinct(accept)[:limit]), ("refuse", _distinct(refuse)[:limit])):
        out.append((side, picked, "" if picked else _side_gap_reason(check, side, cands)))
    return out


def _distinct(cands: list[_Cand]) -> list[_Cand]:
    seen, out = set(), []
    for c in cands:
        key = json.dumps(c.cfg, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def _add(probes: dict[str, Probe], ruleset: RuleSet, node: NodeFacts, t: Target, cand: _Cand, why: Boundary) -> None:
    key = json.dumps([t.backend, t.phase, cand.cfg], sort_keys=True, default=str)
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    if digest in probes:
        probes[digest].boundaries.append(why)
        return
    spec, module, skip = make_spec(ruleset, node, t, cand.cfg, digest)
    probes[digest] = Probe(id=digest, backend=t.backend, phase=t.phase, call=spec["call"], config=cand.cfg,
                           refused_by=cand.refused, boundaries=[why], spec=spec, module=module, skip=skip)


def make_spec(ruleset: RuleSet, node: NodeFacts, t: Target, cfg: dict[str, Any], digest: str, *,
              q_lens: Optional[list[int]] = None, kv_lens: Optional[list[int]] = None) -> tuple[dict[str, Any], str, Optional[str]]:
    """(what the child process runs, the JIT module key, why it cannot run here or None) for one
    config on (backend, phase): every field is the plan's own (phase_plan, attention_plan)."""
    config = AttentionConfig.model_validate(cfg)
    pp = phase_plan(config, t.phase, t.backend, ruleset, int(config.page_size or 16))
    skip = unrunnable_reason(pp.call, node.capability.value)
    att = attention_plan(config)
    spec = dict(
        call=pp.call, backend=t.backend, flashinfer_backend=pp.flashinfer_backend, phase=t.phase,
        entry_point=pp.entry_point, use_tensor_cores=bool(pp.use_tensor_cores), q_len=pp.q_len_per_req,
        query_dtype=pp.query_dtype, kv_view_dtype=pp.kv_view_dtype, output_dtype=pp.output_dtype,
        head_dim_qk=config.qk_head_dim, head_dim_vo=config.vo_head_dim, num_qo_heads=config.num_qo_heads,
        num_kv_heads=config.kv_heads, page_size=int(config.page_size or 16), mla=config.is_mla,
        kv_lora_rank=config.kv_lora_rank, qk_rope_head_dim=config.qk_rope_head_dim,
        sm_scale=att.sm_scale, window_left=att.window_left, logits_soft_cap=att.logits_soft_cap or None,
        sinks=config.sinks, seed=int(digest, 16) % (2 ** 31),
    )
    if q_lens is not None:
        spec.update(q_lens=list(q_lens), kv_lens=list(kv_lens or ()))
    spec["quantize_query"] = tol.query_quantized_to(spec)
    spec["kernel_key"] = tol.kernel_key(spec)
    spec["tolerance"] = tol.tolerance(spec["kernel_key"], pp.output_dtype)
    spec["tolerance_kind"] = "5x spread of " + spec["kernel_key"]
    # FlashInfer's own name for a module it names by fewer parameters than it compiles (backends.yaml
    # calls.<c>.jit_name): the runner never builds two modules of one name at once (the H100 sweep of
    # 2026-11-25 did, and read their races as kernel failures: bench/logs/h100-2026-11-25c).
    spec["jit_name"] = jit_name(ruleset, pp.call, pp.modules[0]) if pp.modules else None
    return spec, _module_key(ruleset, t, cfg), skip


__all__ = ["Probe", "Boundary", "Gap", "Generated", "Target", "generate", "targets", "refusals", "refuses", "applies", "contexts", "mutate",
           "base_for", "make_spec", "FIXED_BY_PROBE"]
