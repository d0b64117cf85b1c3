"""A covering sweep over what the packs *accept* on this GPU (issue 22).

Boundary probes (generate.py) only run configs a rule's conditions name, so a config no rule
mentions is never run. The sweep instead fixes, per (backend, call, phase) this GPU can run,
a set of factors - head dim, GQA group, query dtype, KV dtype, page size, window, soft cap,
sinks, speculative q_len, batch shape - and builds rows (configs) until every *pair* of factor
values that some accepted config holds is held by at least one accepted row (a pairwise
covering array, built greedily: each new row covers as many uncovered pairs as it can).

With ``strength`` t > 2 the factors the target's JIT family compiles in (``COMPILED``: XQA's
head, group, dtypes, page, window and q_len; fa2/fa3's head, dtypes, window, soft cap and sinks;
MLA's dims and dtypes) are covered t-way - every t-tuple of their values some accepted config holds
is held by a row - and the rest pairwise (issue 38: head 256 x group 32 x fp8 crashed XQA while
every pair of them ran). ``sample`` draws accepted configs uniformly instead, as a second check.

Only configs that every kernel rule accepts on this node are rows: a wrong answer, a crash or a
build failure on any of them means a rule accepts what FlashInfer does not do (*dangerous*).
A pair no accepted config holds is reported as ``refused``, with no probe.

Pure: the node is data, the search is seeded (``random.Random`` over a string seed, so the same
rules, node and seed give the same rows on every machine).
"""

from __future__ import annotations

from attnplan.errors import InvalidInputError

import hashlib
import itertools
import json
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

from attnplan.policy import AttentionConfig, NodeFacts, RuleSet
from attnplan.policy.facts_catalog import node_context
from attnplan.policy.plan import phase_plan

from .generate import Boundary, Probe, Target, applies, contexts, jit_identity, make_spec, refuses, targets
from .select import is_kernel_rule, unrunnable_reason

# -- factors -------------------------------------------------------------------------------------
GROUPS = (1, 2, 4, 8, 16, 24, 32, 48, 64)
# Every head size some backend could take: XQA's multiples of 16 up to 256, 512, and fa3's (192, 128).
HEADS = tuple((d, d) for d in range(16, 257, 16)) + ((512, 512), (192, 128))
QUERY_DTYPES = ("fp16", "bf16", "fp8_e4m3")
KV_DTYPES = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "nvfp4")
PAGES = (1, 8, 16, 32, 64, 128, 256)
WINDOWS = (None, 64, 1000)
SOFT_CAPS = (None, 30.0)
SPEC_TOKENS = (0, 1, 3)
# MLA: (kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim).
MLA_DIMS = ((512, 128, 64, 128), (256, 128, 64, 128), (128, 128, 64, 128), (512, 64, 64, 128),
            (512, 192, 64, 128), (512, 192, 64, 256), (512, 128, 0, 128))
MLA_HEADS = (16, 32, 64, 128)

# Batch shapes: (q_lens, kv_lens) per request. Decode q_lens are the plan's q_len per request.
DECODE_SHAPES: dict[str, tuple[int, ...]] = {
    "b1-short": (37,),
    "b1-long": (4100,),
    "many-short": (5, 9, 17, 33, 45, 64, 90, 160),
    "many-long": (301, 2050, 3000, 4097),
}
PREFILL_SHAPES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "b1-short": ((37,), (37,)),
    "b1-long": ((1500,), (1500,)),
    "many": ((7, 33, 64, 1), (45, 160, 301, 90)),
    "chunked": ((64, 200), (2112, 1200)),          # a chunk of new tokens over a long history
}


def kv_heads_for(group: int) -> int:
    """KV heads for a GQA group: a few for MHA, one for the widest groups (keeps probes small)."""
    return 4 if group == 1 else 2 if group <= 16 else 1


@dataclass(frozen=True)
class SweepTarget:
    backend: str
    phase: str
    mla: bool
    sinks: Optional[bool]          # fixed when sinks change the call (fa2/fa3: the sink wrapper)

    @property
    def base(self) -> Target:
        return Target(self.backend, self.phase, self.mla)

    @property
    def label(self) -> str:
        s = "" if self.sinks is None else ("+sinks" if self.sinks else "")
        return f"{self.backend}/{self.phase}{'/mla' if self.mla else ''}{s}"


def factors(t: SweepTarget) -> list[tuple[str, tuple[Any, ...]]]:
    out: list[tuple[str, tuple[Any, ...]]] = []
    if t.mla:
        out += [("mla_dims", MLA_DIMS), ("heads", MLA_HEADS)]
    else:
        out += [("head", HEADS), ("group", GROUPS)]
    out += [("dtype", QUERY_DTYPES), ("kv", KV_DTYPES), ("page", PAGES), ("window", WINDOWS),
            ("soft_cap", SOFT_CAPS)]
    if t.sinks is None:
        out.append(("sinks", (False, True)))
    if t.phase == "decode":
        out.append(("spec", SPEC_TOKENS))
        out.append(("shape", tuple(DECODE_SHAPES)))
    else:
        out.append(("shape", tuple(PREFILL_SHAPES)))
    return out


def config_of(t: SweepTarget, row: dict[str, Any]) -> dict[str, Any]:
    """The AttentionConfig fields a row sets (the batch shape is the probe's, not the config's)."""
    cfg: dict[str, Any] = dict(dtype=row["dtype"], kv_cache_dtype=row["kv"], page_size=row["page"],
                               sliding_window=row["window"], logits_soft_cap=row["soft_cap"],
                               sinks=row.get("sinks", bool(t.sinks)),
                               num_speculative_tokens=row.get("spec", 0))
    if t.mla:
        rank, nope, rope, v = row["mla_dims"]
        cfg.update(num_qo_heads=row["heads"], kv_lora_rank=rank, qk_nope_head_dim=nope, qk_rope_head_dim=rope,
                   v_head_dim=v)
    else:
        qk, vo = row["head"]
        kvh = kv_heads_for(row["group"])
        cfg.update(head_dim=qk, num_qo_heads=row["group"] * kvh, num_kv_heads=kvh)
        if vo != qk:
            cfg["head_dim_vo"] = vo
    return {k: v for k, v in cfg.items() if v is not None}


def shape_of(t: SweepTarget, row: dict[str, Any], q_len: int) -> tuple[list[int], list[int]]:
    if t.phase == "decode":
        kv = list(DECODE_SHAPES[row["shape"]])
        return [q_len] * len(kv), kv
    q, kv = PREFILL_SHAPES[row["shape"]]
    return list(q), list(kv)


# -- acceptance ----------------------------------------------------------------------------------
class _Judge:
    """Whether every kernel rule accepts a row on (backend, phase) of this node, memoised."""

    def __init__(self, ruleset: RuleSet, node: NodeFacts, t: SweepTarget, call: str):
        self.rules = [r for r in ruleset.rules if is_kernel_rule(r)]
        self.ruleset, self.node, self.t, self.call = ruleset, node, t, call
        # The checks that can refuse on this target, chosen once: a sweep judges ~10^6 rows, and
        # whether a check applies to (backend, phase) does not depend on the row.
        self.checks = [c for r in self.rules for c in r.checks if applies(c, t.base)]
        self.node_part = node_context(node)
        self.memo: dict[frozenset, bool] = {}
        self.modules: dict[frozenset, str] = {}

    def __call__(self, row: dict[str, Any]) -> bool:
        key = frozenset(row.items())
        if key not in self.memo:
            self.memo[key] = self._accepted(row)
        return self.memo[key]

    def module(self, row: dict[str, Any]) -> str:
        """The JIT modules the row's plan builds (what a probe costs on a fresh machine)."""
        key = frozenset(row.items())
        if key not in self.modules:
            config = AttentionConfig.model_validate(config_of(self.t, row))
            pp = phase_plan(config, self.t.phase, self.t.backend, self.ruleset, int(config.page_size or 16))
            self.modules[key] = jit_identity(config, pp)
        return self.modules[key]

    def _accepted(self, row: dict[str, Any]) -> bool:
        try:
            config = AttentionConfig.model_validate(config_of(self.t, row))
        except ValueError:
            return False
        # The call is the plan's: speculative decode on a native backend runs its prefill call
        # (plan.py runs_on_prefill_kernel), still this target's (backend, phase). Accepted when no
        # check refuses: generate.refusals, stopping at the first refusal.
        pair, cand = contexts(config, self.node, self.t.base, self.node_part)
        return not any(refuses(c, pair, cand) for c in self.checks)


Pair = tuple[tuple[str, Any], ...]          # a tuple of (factor, value), factors in factor order

# The factors each JIT family compiles into a module (generate.jit_identity; flashinfer/jit/xqa.py
# gen_xqa_module; flashinfer/jit/attention/modules.py get_batch_prefill_uri / get_batch_decode_uri /
# get_batch_mla_uri): a failure that needs three of them at once (XQA head 256 x group 32 x fp8,
# issue 38) is held by no pairwise covering, so ``strength`` covers these t-way, the rest pairwise.
COMPILED = {
    "xqa": ("head", "group", "dtype", "kv", "page", "window", "spec"),
    "mla": ("mla_dims", "dtype", "kv", "window", "soft_cap"),
    "native": ("head", "dtype", "kv", "window", "soft_cap", "sinks"),
}


def compiled_factors(t: "SweepTarget", names: list[str]) -> list[str]:
    """The factors of ``t`` its JIT family compiles in (factor order)."""
    fam = COMPILED["xqa" if t.backend == "xqa" else "mla" if t.mla else "native"]
    return [n for n in names if n in fam]


def combos(names: list[str], strong: list[str], strength: int) -> list[tuple[str, ...]]:
    """The factor combinations a covering of ``strength`` must hold every value tuple of: every
    pair of factors, and every combination of 3..strength of the ``strong`` (compiled) ones."""
    if strength < 2:
        raise InvalidInputError("strength", "covering strength must be at least 2")
    order = {n: i for i, n in enumerate(names)}
    out = list(itertools.combinations(names, 2))
    strong = sorted(strong, key=order.__getitem__)
    for k in range(3, strength + 1):
        out += list(itertools.combinations(strong, k))
    return out


def _tuples(row: dict[str, Any], cs: list[tuple[str, ...]]) -> set[Pair]:
    return {tuple((n, row[n]) for n in c) for c in cs}


def _pairs(row: dict[str, Any], names: list[str]) -> set[Pair]:
    return _tuples(row, list(itertools.combinations(names, 2)))


@dataclass
class Coverage:
    target: SweepTarget
    call: str
    rows: list[dict[str, Any]]
    pairs_total: int                      # every value tuple to cover (pairs; t-tuples of compiled factors)
    pairs_covered: int                    # held by some accepted row
    refused: list[Pair] = field(default_factory=list)   # held by no accepted config found
    skip: Optional[str] = None            # why this target has no rows here
    strength: int = 2


def _fill(row: dict[str, Any], fixed: set[str], names: list[str], domains: dict[str, tuple[Any, ...]],
          uncovered: set[Pair], judge: _Judge, rng: random.Random, module: Optional[str],
          cs: Optional[list[tuple[str, ...]]] = None) -> dict[str, Any]:
    """Greedily set the factors not in ``fixed`` to values that cover uncovered tuples (of the
    combinations ``cs``; default every pair), keeping the row accepted (and, with ``module``, on
    that JIT module)."""
    cs = cs if cs is not None else list(itertools.combinations(names, 2))
    by_name = {n: [c for c in cs if n in c] for n in names}
    fixed = set(fixed)
    order = [n for n in names if n not in fixed]
    rng.shuffle(order)
    for n in order:
        def gain(v: Any) -> int:
            return sum(1 for c in by_name[n] if all(m == n or m in fixed for m in c)
                       and tuple((m, v if m == n else row[m]) for m in c) in uncovered)
        here = gain(row[n])
        for v in sorted(domains[n], key=lambda v: (-gain(v), rng.random())):
            if gain(v) <= here:
                break
            cand = {**row, n: v}
            if judge(cand) and (module is None or judge.module(cand) == module):
                row = cand
                break
        fixed.add(n)
    return row


def _search_row(pair: Pair, names: list[str], domains: dict[str, tuple[Any, ...]], uncovered: set[Pair],
                judge: _Judge, rng: random.Random, base: dict[str, Any], tries: int,
                reps: Optional[list[dict[str, Any]]] = None,
                cs: Optional[list[tuple[str, ...]]] = None) -> Optional[dict[str, Any]]:
    """An accepted row holding ``pair`` (a value tuple) that covers many uncovered tuples, or None.
    A row on a JIT module already chosen (``reps``: one row per module) is preferred to one that
    needs a new module: modules are what a sweep spends its lease on."""
    cs = cs if cs is not None else list(itertools.combinations(names, 2))
    keep = {n for n, _ in pair}
    reuse = []
    for r in reps or ():
        cand = {**r, **dict(pair)}
        if judge(cand) and judge.module(cand) == judge.module(r):
            reuse.append(cand)
    if reuse:
        reuse.sort(key=lambda c: -len(_tuples(c, cs) & uncovered))
        best = [_fill(c, keep, names, domains, uncovered, judge, rng, judge.module(c), cs) for c in reuse[:3]]
        return max(best, key=lambda c: len(_tuples(c, cs) & uncovered))
    best, best_score = None, -1
    for attempt in range(tries):
        row = dict(base)
        row.update(dict(pair))
        if not judge(row):
            row = _repair(row, keep, names, domains, judge, rng)
            if row is None:
                return best
        row = _fill(row, keep, names, domains, uncovered, judge, rng, None, cs)
        score = len(_tuples(row, cs) & uncovered)
        if score > best_score:
            best, best_score = row, score
    return best


def _key(order_of: dict[str, int], a: str, va: Any, b: str, vb: Any) -> Pair:
    return ((a, va), (b, vb)) if order_of[a] < order_of[b] else ((b, vb), (a, va))


def _repair(row: dict[str, Any], keep: set[str], names: list[str], domains: dict[str, tuple[Any, ...]],
            judge: _Judge, rng: random.Random) -> Optional[dict[str, Any]]:
    """Make ``row`` accepted by changing factors other than ``keep``: one factor at a time, then
    random restarts of all free factors."""
    free = [n for n in names if n not in keep]
    for n in free:
        for v in domains[n]:
            cand = {**row, n: v}
            if judge(cand):
                return cand
    for a, b in itertools.combinations(free, 2):
        for va in domains[a]:
            for vb in domains[b]:
                cand = {**row, a: va, b: vb}
                if judge(cand):
                    return cand
    for _ in range(64):
        cand = {**row, **{n: rng.choice(domains[n]) for n in free}}
        if judge(cand):
            return cand
    return None


def cover(ruleset: RuleSet, node: NodeFacts, t: SweepTarget, *, seed: int = 0, tries: int = 2,
          known: Optional[list[dict[str, Any]]] = None, strength: int = 2) -> Coverage:
    """The covering rows for one target (greedy over the accepted configs: every pair of factor
    values, and with ``strength`` t > 2 every t-tuple of the factors the target's JIT family
    compiles in). ``known``: rows of targets covered before; those of them this target accepts
    on the same JIT module are offered for reuse first (a module the sweep builds anyway costs
    nothing more)."""
    fs = factors(t)
    names = [n for n, _ in fs]
    domains = dict(fs)
    cs = combos(names, compiled_factors(t, names), strength)
    all_pairs: set[Pair] = set()
    for c in cs:
        all_pairs |= {tuple(zip(c, vals)) for vals in itertools.product(*(domains[n] for n in c))}
    call = _target_call(ruleset, t)
    judge = _Judge(ruleset, node, t, call)
    rng = random.Random(f"attnplan-sweep:{seed}:{t.label}")
    base = _base_row(t, domains, judge, names, rng)
    if base is None:
        return Coverage(t, call, [], len(all_pairs), 0, sorted(all_pairs, key=str),
                        skip="no config is accepted by every kernel rule here", strength=strength)
    uncovered = set(all_pairs)
    refused: list[Pair] = []
    refused_set: set[Pair] = set()
    rows: list[dict[str, Any]] = []
    reps: dict[str, dict[str, Any]] = {}
    for other in known or ():
        row = {n: other[n] if n in other and other[n] in domains[n] else base[n] for n in names}
        if judge(row):
            reps.setdefault(judge.module(row), row)
    # Pairs first (in the order a pairwise sweep takes them: its rows do not move when t grows),
    # then longer tuples; a tuple holding a refused shorter one is refused without a search.
    order, nxt = sorted(all_pairs, key=lambda p: (len(p), _pair_sort(p))), 0
    while uncovered:
        while order[nxt] not in uncovered:
            nxt += 1
        pair = order[nxt]
        if len(pair) > 2 and any(sub in refused_set for k in range(2, len(pair))
                                 for sub in itertools.combinations(pair, k)):
            row = None
        else:
            row = _search_row(pair, names, domains, uncovered, judge, rng, base, tries, list(reps.values()), cs)
        if row is None:
            uncovered.discard(pair)
            refused.append(pair)
            refused_set.add(pair)
            continue
        rows.append(row)
        reps.setdefault(judge.module(row), row)
        uncovered -= _tuples(row, cs)
    return Coverage(t, call, rows, len(all_pairs), len(all_pairs) - len(refused), sorted(refused, key=_pair_sort),
                    strength=strength)


def _pair_sort(p: Pair) -> str:
    return json.dumps(p, default=str)


def _target_call(ruleset: RuleSet, t: SweepTarget) -> str:
    spec = ruleset.backends[t.backend]
    if t.mla and spec.kind == "any":
        return spec.mla_calls[t.phase].call
    if t.sinks:
        return spec.sink_calls[t.phase].call
    return spec.calls[t.phase].call


def _base_row(t: SweepTarget, domains: dict[str, tuple[Any, ...]], judge: _Judge, names: list[str],
              rng: random.Random) -> Optional[dict[str, Any]]:
    typical = dict(head=(128, 128), group=4, mla_dims=MLA_DIMS[0], heads=16, dtype="bf16", kv="bf16", page=16,
                   window=None, soft_cap=None, sinks=False, spec=0, shape=next(iter(domains["shape"])))
    row = {n: typical[n] for n in names}
    if judge(row):
        return row
    return _repair(row, set(), names, domains, judge, rng)


def sweep_targets(ruleset: RuleSet, capability: Optional[int]) -> list[tuple[SweepTarget, Optional[str]]]:
    """(target, why it cannot run here or None) per (backend, call, phase)."""
    out = []
    for t in targets(ruleset):
        spec = ruleset.backends[t.backend]
        split = not t.mla and t.phase in getattr(spec, "sink_calls", {})
        for sinks in ((False, True) if split else (None,)):
            st = SweepTarget(t.backend, t.phase, t.mla, sinks)
            out.append((st, unrunnable_reason(_target_call(ruleset, st), capability)))
    return out


@dataclass
class Sweep:
    probes: list[Probe]
    coverage: list[Coverage]
    seed: int
    strength: int = 2

    def summary(self) -> list[dict[str, Any]]:
        return [{"target": c.target.label, "backend": c.target.backend, "phase": c.target.phase, "call": c.call,
                 "rows": len(c.rows), "pairs_total": c.pairs_total, "pairs_covered": c.pairs_covered,
                 "pairs_refused": len(c.refused), "skip": c.skip, "strength": c.strength} for c in self.coverage]


def sweep(ruleset: RuleSet, node: NodeFacts, *, seed: int = 0, only: Optional[Iterable[str]] = None,
          strength: int = 2, progress: Callable[[str], None] = lambda s: None) -> Sweep:
    """Every covering probe on this node (``only``: target labels or backend names; ``strength``:
    cover() - t-way over each family's compiled factors; ``progress``: a line per target)."""
    cap = node.capability.value
    probes: dict[str, Probe] = {}
    cov: list[Coverage] = []
    wanted = set(only or ())
    known: list[dict[str, Any]] = []
    every = sweep_targets(ruleset, cap)
    picked = [not wanted or t.label in wanted or t.backend in wanted for t, _ in every]
    last = max((i for i, p in enumerate(picked) if p), default=-1)   # the targets after it change nothing
    for (t, why), chosen in zip(every[:last + 1], picked):
        if why:
            if chosen:
                cov.append(Coverage(t, _target_call(ruleset, t), [], 0, 0, skip=why))
            continue
        # A target's rows reuse the JIT modules of the targets covered before it (``known``), so
        # those are covered even when not chosen: ``only`` picks probes out of the full sweep,
        # digests and all, and a --target run resumes into (and from) a whole sweep's results.
        progress(f"covering {t.label} (strength {strength})")
        c = cover(ruleset, node, t, seed=seed, known=known, strength=strength)
        known += c.rows
        if not chosen:
            continue
        cov.append(c)
        for row in c.rows:
            p = _probe(ruleset, node, t, row, seed, "sweep")
            probes.setdefault(p.id, p)
    # Round-robin over the targets in the order their rows were made (early rows cover the most
    # pairs), so a run cut short by its deadline has covered every target as far as it got.
    per_target: dict[str, list[Probe]] = {}
    for p in probes.values():
        per_target.setdefault(f"{p.backend}/{p.phase}/{p.call}/{p.config.get('kv_lora_rank')}", []).append(p)
    ordered = [p for group in itertools.zip_longest(*per_target.values()) for p in group if p is not None]
    for i, p in enumerate(ordered):
        p.id = f"s{i:04d}-{p.id}"
    return Sweep(ordered, cov, seed, strength)


def _probe(ruleset: RuleSet, node: NodeFacts, t: SweepTarget, row: dict[str, Any], seed: int, kind: str) -> Probe:
    """The probe of one accepted row (id: its content digest; ``kind``: the pseudo-rule, sweep or sample)."""
    cfg = config_of(t, row)
    config = AttentionConfig.model_validate(cfg)
    q_len = 1 + config.num_speculative_tokens if t.phase == "decode" else 1
    q_lens, kv_lens = shape_of(t, row, q_len)
    key = json.dumps([t.backend, t.phase, cfg, row["shape"], seed], sort_keys=True, default=str)
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    spec, module, skip = make_spec(ruleset, node, t.base, cfg, digest, q_lens=q_lens, kv_lens=kv_lens)
    spec["sweep_target"] = t.label
    changed = {k: (list(v) if isinstance(v, tuple) else v) for k, v in row.items()}
    return Probe(id=digest, backend=t.backend, phase=t.phase, call=spec["call"], config=cfg, refused_by=(),
                 boundaries=[Boundary(kind, 0, "accept", changed)], spec=spec, module=module, skip=skip)


# -- a uniform sample over the accepted space ---------------------------------------------------
# Wider than the covering's grid where a value is an integer the user picks: every GQA group up
# to 64, more windows and speculative lengths (a sample should reach values no grid names).
SAMPLE_DOMAINS: dict[str, tuple[Any, ...]] = {
    "group": tuple(range(1, 65)),
    "window": (None, 32, 64, 128, 1000, 4096),
    "spec": (0, 1, 2, 3),
}


def sample_factors(t: SweepTarget) -> list[tuple[str, tuple[Any, ...]]]:
    return [(n, SAMPLE_DOMAINS.get(n, dom)) for n, dom in factors(t)]


@dataclass
class Sample:
    probes: list[Probe]
    seed: int
    drawn: int                           # configurations drawn (accepted or not)
    per_target: dict[str, int]           # accepted probes per target
    space: dict[str, int]                # grid size per target (the draw's weights)

    def summary(self) -> dict[str, Any]:
        return {"seed": self.seed, "probes": len(self.probes), "drawn": self.drawn, "per_target": self.per_target,
                "space": self.space}


def sample(ruleset: RuleSet, node: NodeFacts, n: int, *, seed: int = 0, only: Optional[Iterable[str]] = None,
           max_draws: Optional[int] = None) -> Sample:
    """``n`` configurations drawn uniformly from what every kernel rule accepts on this node, as
    an independent check beside the covering: a target is drawn with probability proportional to
    its space (the product of its factor domains, ``sample_factors``), a value of each factor
    uniformly, and a draw the rules refuse is drawn again (rejection sampling: uniform over the
    accepted (target, configuration) pairs, not over the grid's cells). Same rules, node and
    seed: the same probes. A configuration drawn twice is one probe (drawn again)."""
    if n < 0:
        raise InvalidInputError("sample", "sample size must be >= 0")
    cap = node.capability.value
    wanted = set(only or ())
    runnable = [t for t, why in sweep_targets(ruleset, cap)
                if why is None and (not wanted or t.label in wanted or t.backend in wanted)]
    rng = random.Random(f"attnplan-sample:{seed}")
    doms = {t.label: sample_factors(t) for t in runnable}
    space = {t.label: _size(doms[t.label]) for t in runnable}
    judges: dict[str, _Judge] = {}
    probes: dict[str, Probe] = {}
    per: dict[str, int] = {}
    drawn = 0
    limit = max_draws if max_draws is not None else 2000 * max(n, 1)
    while runnable and len(probes) < n and drawn < limit:
        t = rng.choices(runnable, weights=[space[x.label] for x in runnable])[0]
        row = {name: rng.choice(dom) for name, dom in doms[t.label]}
        drawn += 1
        judge = judges.get(t.label)
        if judge is None:
            judge = judges[t.label] = _Judge(ruleset, node, t, _target_call(ruleset, t))
        if not judge(row):
            continue
        p = _probe(ruleset, node, t, row, seed, "sample")
        if p.id in probes:
            continue
        probes[p.id] = p
        per[t.label] = per.get(t.label, 0) + 1
    ordered = list(probes.values())
    for i, p in enumerate(ordered):
        p.id = f"r{i:04d}-{p.id}"
    return Sample(ordered, seed, drawn, dict(sorted(per.items())), space)


def _size(fs: list[tuple[str, tuple[Any, ...]]]) -> int:
    out = 1
    for _, dom in fs:
        out *= len(dom)
    return out


def suspects(probes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each (backend, call) with failing sweep probes: the factor values (and pairs) that hold
    in failing probes and in no passing one of the same call - where a rule has to cut."""
    out = []
    by_call: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for p in probes:
        if p["boundaries"] and p["boundaries"][0]["rule"] == "sweep" and p.get("outcome") not in ("skipped", None):
            by_call.setdefault((p["backend"], p["phase"], p["call"]), []).append(p)
    for (backend, phase, call), ps in sorted(by_call.items()):
        bad = [p for p in ps if p["outcome"] != "ok"]
        good = [p for p in ps if p["outcome"] == "ok"]
        if not bad:
            continue
        def items(p: dict[str, Any]) -> set[tuple[str, str]]:
            return {(k, json.dumps(v)) for k, v in p["boundaries"][0]["changed"].items()}
        good_singles = set().union(*(items(p) for p in good)) if good else set()
        good_pairs = set().union(*(set(itertools.combinations(sorted(items(p)), 2)) for p in good)) if good else set()
        singles: dict[tuple[str, str], int] = {}
        pairs: dict[tuple, int] = {}
        for p in bad:
            for it in items(p) - good_singles:
                singles[it] = singles.get(it, 0) + 1
            for pr in set(itertools.combinations(sorted(items(p)), 2)) - good_pairs:
                pairs[pr] = pairs.get(pr, 0) + 1
        out.append({
            "backend": backend, "phase": phase, "call": call, "failing": len(bad), "passing": len(good),
            "values_only_in_failures": [{"factor": k, "value": json.loads(v), "failing": n}
                                        for (k, v), n in sorted(singles.items(), key=lambda x: -x[1])],
            "pairs_only_in_failures": [{"pair": [[a[0], json.loads(a[1])], [b[0], json.loads(b[1])]], "failing": n}
                                       for (a, b), n in sorted(pairs.items(), key=lambda x: -x[1])[:20]],
            "probes": [p["id"] for p in bad],
        })
    return out


__all__ = ["sweep", "Sweep", "Coverage", "sample", "Sample", "combos", "compiled_factors", "COMPILED", "SweepTarget", "cover", "factors", "config_of", "sweep_targets", "suspects",
           "GROUPS", "HEADS"]


# Which config facts each factor sets: where a rule that must change reads.
FACTOR_FACTS = {
    "head": ("config.head_dim", "config.head_dim_vo"), "group": ("config.group_size", "config.num_qo_heads"),
    "dtype": ("config.dtype",), "kv": ("config.kv_dtype", "config.kv_cache_dtype"), "page": ("config.page_size",),
    "window": ("config.sliding_window",), "soft_cap": ("config.logits_soft_cap",), "sinks": ("config.sinks",),
    "spec": ("config.num_speculative_tokens",), "heads": ("config.num_qo_heads",),
    "mla_dims": ("config.kv_lora_rank", "config.qk_rope_head_dim", "config.qk_nope_head_dim", "config.v_head_dim",
                 "config.head_dim", "config.head_dim_vo"),
    "shape": (),
}


def findings(report: dict[str, Any], ruleset: RuleSet) -> dict[str, Any]:
    """The sweep's dangerous probes, the factor values only failures hold, and the rules that must
    change: per failing (backend, call), the kernel rules for that backend whose checks read a fact
    those values set - or, when none does, a new rule for that backend."""
    sweep_probes = [p for p in report["probes"] if p["boundaries"] and p["boundaries"][0]["rule"] == "sweep"]
    dangerous = [p["id"] for p in sweep_probes if p["verdicts"].get("sweep") == "dangerous"]
    sus = suspects(sweep_probes)
    change: dict[str, dict[str, Any]] = {}
    for s in sus:
        facts = {f for v in s["values_only_in_failures"] for f in FACTOR_FACTS.get(v["factor"], ())}
        facts |= {f for pr in s["pairs_only_in_failures"][:5] for item in pr["pair"] for f in FACTOR_FACTS.get(item[0], ())}
        hit = []
        for r in ruleset.rules:
            if not is_kernel_rule(r):
                continue
            for c in r.checks:
                reads = set(c.require.reads) | (set(c.when.reads) if c.when else set())
                if c.applies_to(s["backend"], s["phase"]) and reads & facts:
                    hit.append(r.id)
                    break
        for rid in hit or [f"(new rule for {s['backend']} {s['call']})"]:
            rec = change.setdefault(rid, {"rule": rid, "because": []})
            rec["because"].append(f"{s['backend']}/{s['phase']} {s['call']}: {s['failing']} failing probe(s)")
    return {"dangerous": dangerous, "suspects": sus, "rules_to_change": list(change.values()),
            "pairs_run": pairs_run(sweep_probes)}


def pairs_run(probes: list[dict[str, Any]]) -> dict[str, int]:
    """Per sweep target: the factor-value pairs held by probes that ran to a result (a run cut
    short by its deadline covers fewer than the sweep generated)."""
    out: dict[str, set] = {}
    for p in probes:
        target = p.get("sweep_target")
        if not target:
            continue
        got = out.setdefault(target, set())
        if p.get("outcome") in ("ok", "wrong", "error", "hang"):
            items = sorted((k, json.dumps(v)) for k, v in p["boundaries"][0]["changed"].items())
            got |= set(itertools.combinations(items, 2))
    return {t: len(v) for t, v in sorted(out.items())}


def calibration_probes(probes: list[Probe], *, copies: int = 3) -> list[Probe]:
    """Per kernel (``spec['kernel_key']``), ``copies`` re-seeded runs of its plainest sweep probe
    (fewest factors off the typical config): what the kernel's own spread is measured on."""
    typical = {"head": [128, 128], "group": 4, "dtype": "bf16", "kv": "bf16", "page": 16, "window": None,
               "soft_cap": None, "sinks": False, "spec": 0, "heads": 16, "mla_dims": list(MLA_DIMS[0])}
    best: dict[str, Probe] = {}
    def distance(p: Probe) -> tuple[int, str]:
        ch = p.boundaries[0].changed
        return (sum(1 for k, v in ch.items() if k in typical and v != typical[k]), p.id)
    for p in probes:
        k = p.spec.get("kernel_key")
        if k and not p.skip and (k not in best or distance(p) < distance(best[k])):
            best[k] = p
    out = []
    for k, p in sorted(best.items()):
        for i in range(copies):
            spec = dict(p.spec, seed=(int(p.spec["seed"]) + 7919 * (i + 1)) % (2 ** 31))
            pid = hashlib.sha256(f"calib:{k}:{i}:{p.id}".encode()).hexdigest()[:8]
            out.append(Probe(id=f"c{len(out):03d}-{pid}", backend=p.backend, phase=p.phase, call=p.call, config=p.config,
                             refused_by=(), boundaries=[Boundary("calibration", 0, "accept", dict(p.boundaries[0].changed))],
                             spec=spec, module=p.module, skip=None))
    return out
