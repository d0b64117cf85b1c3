"""Every XQA JIT module attnplan accepts on this node, each probed (issue 38).

XQA is compiled per module: ``flashinfer/jit/xqa.py gen_xqa_module`` takes the query dtype, the
KV dtype, the page size (``-DTOKENS_PER_PAGE``), the head dim (``-DHEAD_ELEMS``), the GQA group
(``-DHEAD_GRP_SIZE``), whether a window is used (``-DSLIDING_WINDOW``, the window's size is a run
argument: ``sliding_win_size``), the output dtype and the speculative q_len (``-DSPEC_DEC``,
``-DSPEC_Q_SEQ_LEN``), and names the module by all of them (its URI). Sinks, the window's size,
the batch and the draft mask are run arguments: one module serves every probe that differs only
in them. A pairwise (or t-way) covering cannot see a failure that needs one value of each
of three parameters at once (head 256 x group 32 x fp8 crashed while every pair of them ran):
the template space is small enough to run whole.

``xqa_modules`` enumerates the compile parameters over their whole domains (every head size
gen_xqa_module takes, groups 1-64, every query x KV dtype, window on/off, the speculative q_lens
engines use) and keeps what every kernel rule accepts on this node (``sweep._Judge``); the page
size, compiled in too, rotates over XQA's four so that each (head, group) row holds every page
size across its groups and each module has one. ``xqa_probes`` gives each module two probes that
share it: plain, and with sinks and a wider window (when windowed). The variant is judged on its own
(sinks are a run argument: a module the packs accept may serve a variant they refuse, whose
failure confirms the refusal). ``confirm`` adds modules
the packs refuse where a rule's limit was measured (fp8 at group 32 above head 128; groups the
16-bit kernel has no tiling for are left: they do not build). Tiers order the run: fp8 KV first
(the class that crashed), then speculative fp8, then 16-bit KV, so a run cut short by its lease
has done the most important part; ``tier`` is recorded per probe.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from attnplan.policy import AttentionConfig, NodeFacts, RuleSet

from .generate import Boundary, Probe, Target, make_spec, refusals
from .select import is_kernel_rule
from .sweep import SweepTarget, _Judge

XQA_PAGES = (16, 32, 64, 128)                       # gen_xqa_module: "only 16, 32, 64, 128 are supported"
XQA_HEADS = tuple(range(16, 513, 16))               # gen_xqa_module: divisible by 16, in [16, 512]
XQA_GROUPS = tuple(range(1, 65))
QUERY_DTYPES = ("bf16", "fp16", "fp8_e4m3")
KV_DTYPES = ("fp8_e4m3", "bf16", "fp16", "fp8_e5m2", "nvfp4")
# Speculative tokens engines run XQA with: vLLM 0.33 / SGLang EAGLE and MTP drafts of 1-3 tokens
# (q_len 2-4); the q_len is compiled in (SPEC_Q_SEQ_LEN when q_len x group <= 32, swap_ab_eligible).
SPEC_TOKENS = (0, 1, 2, 3)
WINDOW, WIDE_WINDOW = 64, 1000                      # one shorter than most requests, one longer than some
KV_HEADS = 2                                        # two KV heads: the group's CTAs run per KV head
# Four requests: a partial first page, a few pages, a long one (the last page of each part-full:
# XQA reads whole pages, so the slots past each length hold finite random values).
KV_LENS = (37, 301, 1100, 2050)


@dataclass(frozen=True)
class Module:
    kv: str
    dtype: str
    head: int
    group: int
    window: bool
    spec: int
    page: int
    accepted: bool
    refused_by: tuple[str, ...] = ()

    @property
    def tier(self) -> int:
        """Run order: 1 fp8 KV q_len 1 (bf16 query, then fp16: 2), 3 fp8 speculative, 4 16-bit KV
        q_len 1, 5 16-bit speculative; 0 confirms a measured refusal (run first, it is few)."""
        if not self.accepted:
            return 0
        fp8 = self.kv.startswith("fp8")
        if fp8 and not self.spec:
            return 1 if self.dtype == "bf16" else 2
        if fp8:
            return 3
        return 4 if not self.spec else 5

    def config(self, *, sinks: bool = False, wide: bool = False) -> dict[str, Any]:
        cfg: dict[str, Any] = dict(head_dim=self.head, num_qo_heads=self.group * KV_HEADS, num_kv_heads=KV_HEADS,
                                   dtype=self.dtype, kv_cache_dtype=self.kv, page_size=self.page, sinks=sinks,
                                   num_speculative_tokens=self.spec)
        if self.window:
            cfg["sliding_window"] = WIDE_WINDOW if wide else WINDOW
        return cfg

    def factors(self) -> dict[str, Any]:
        return dict(head=[self.head, self.head], group=self.group, dtype=self.dtype, kv=self.kv, page=self.page,
                    window=self.window, spec=self.spec)


def page_for(head: int, group: int, window: bool, spec: int) -> int:
    """The page size a module is compiled with: rotating over XQA's four along the groups, so a
    (head, dtypes, window, q_len) row builds every page size."""
    return XQA_PAGES[(head // 16 + group + int(window) + spec) % len(XQA_PAGES)]


def _row(m: dict[str, Any], page: int) -> dict[str, Any]:
    return dict(head=(m["head"], m["head"]), group=m["group"], dtype=m["dtype"], kv=m["kv"], page=page,
                window=WINDOW if m["window"] else None, soft_cap=None, sinks=False, spec=m["spec"], shape="exhaustive")


class _XqaJudge(_Judge):
    """The sweep's judge, over XQA rows with two KV heads (the sweep's kv_heads_for differs)."""

    def _accepted(self, row: dict[str, Any]) -> bool:
        try:
            config = AttentionConfig.model_validate(_cfg(row))
        except ValueError:
            return False
        from .generate import contexts, refuses

        pair, cand = contexts(config, self.node, self.t.base, self.node_part)
        return not any(refuses(c, pair, cand) for c in self.checks)


def _cfg(row: dict[str, Any]) -> dict[str, Any]:
    m = Module(row["kv"], row["dtype"], row["head"][0], row["group"], row["window"] is not None, row["spec"],
               row["page"], True)
    return m.config()


def xqa_modules(ruleset: RuleSet, node: NodeFacts, *, spec_tokens: Iterable[int] = SPEC_TOKENS,
                confirm: bool = True) -> list[Module]:
    """Every XQA module every kernel rule accepts here (page size rotated), plus, with
    ``confirm``, the refused modules that confirm a measured limit. Ordered by tier, then by
    group and head (a run cut short still reaches every group of its tier)."""
    t = SweepTarget("xqa", "decode", False, None)
    judge = _XqaJudge(ruleset, node, t, "xqa_decode")
    rules = [r for r in ruleset.rules if is_kernel_rule(r)]
    out: list[Module] = []
    for kv in KV_DTYPES:
        for dtype in QUERY_DTYPES:
            for spec in spec_tokens:
                for window in (False, True):
                    for group in XQA_GROUPS:
                        for head in XQA_HEADS:
                            m = dict(kv=kv, dtype=dtype, head=head, group=group, window=window, spec=spec)
                            page = page_for(head, group, window, spec)
                            ok = judge(_row(m, page))
                            if not ok:
                                # Another page size may be accepted where this one is not.
                                for other in XQA_PAGES:
                                    if other != page and judge(_row(m, other)):
                                        page, ok = other, True
                                        break
                            if ok:
                                out.append(Module(kv, dtype, head, group, window, spec, page, True))
                            elif confirm and _confirms(kv, dtype, head, group, spec):
                                mod = Module(kv, dtype, head, group, window, spec, page, False)
                                refused = refusals(rules, AttentionConfig.model_validate(mod.config()), node,
                                                   Target("xqa", "decode", False))
                                out.append(Module(kv, dtype, head, group, window, spec, page, False, refused))
    out.sort(key=lambda m: (m.tier, m.kv, m.dtype, m.spec, m.window, m.group, m.head))
    return out


def _confirms(kv: str, dtype: str, head: int, group: int, spec: int) -> bool:
    """Refused modules worth a build: fp8 KV at group 32 above head 128 (xqa.group check 4, from
    issue 38's crash), 16-bit-query, no speculative tokens, heads the fp8 kernel takes (<= 256)."""
    return kv == "fp8_e4m3" and dtype in ("bf16", "fp16") and group == 32 and 128 < head <= 256 and spec == 0


def xqa_probes(ruleset: RuleSet, node: NodeFacts, modules: list[Module], *,
               variants: bool = True) -> list[Probe]:
    """Per module: a plain probe and (``variants``) one with sinks and, when windowed, the wider
    window - both on the module's build (sinks and the window's size are run arguments)."""
    out: list[Probe] = []
    t = Target("xqa", "decode", False)
    rules = [r for r in ruleset.rules if is_kernel_rule(r)]
    for m in modules:
        kinds = [dict()] + ([dict(sinks=True, wide=True)] if variants else [])
        for kind in kinds:
            cfg = m.config(**kind)
            q_len = 1 + m.spec
            key = json.dumps(["xqa-exhaustive", cfg, list(KV_LENS)], sort_keys=True)
            digest = hashlib.sha256(key.encode()).hexdigest()[:8]
            spec, module, skip = make_spec(ruleset, node, t, cfg, digest, q_lens=[q_len] * len(KV_LENS),
                                           kv_lens=list(KV_LENS))
            spec["sweep_target"] = "xqa/decode"
            spec["tier"] = m.tier
            changed = dict(m.factors(), sinks=bool(kind.get("sinks")), window=cfg.get("sliding_window"))
            refused = m.refused_by if not m.accepted else ()
            if m.accepted and kind:
                # Sinks and the window's size are run arguments, judged per probe: a module the
                # packs accept can serve a variant they refuse (xqa.spec-sinks refuses sinks at
                # some speculative groups). Its failure then confirms the rule; it is no failure
                # of an accepted configuration.
                refused = refusals(rules, AttentionConfig.model_validate(cfg), node, t)
            out.append(Probe(id=f"x{len(out):05d}-{digest}", backend="xqa", phase="decode", call=spec["call"],
                             config=cfg, refused_by=refused,
                             boundaries=[Boundary("exhaustive", 0, "refuse" if refused else "accept", changed)],
                             spec=spec, module=module, skip=skip))
    return out


def counts(modules: list[Module]) -> dict[str, Any]:
    """Modules per tier and per (kv, query dtype, q_len): what a run costs before it starts."""
    by: dict[str, int] = {}
    tiers: dict[int, int] = {}
    for m in modules:
        k = f"kv={m.kv} q={m.dtype} q_len={1 + m.spec}{'' if m.accepted else ' (refused: confirm)'}"
        by[k] = by.get(k, 0) + 1
        tiers[m.tier] = tiers.get(m.tier, 0) + 1
    return {"modules": len(modules), "tiers": dict(sorted(tiers.items())), "by_dtypes": dict(sorted(by.items()))}


def limit_tiers(modules: list[Module], tiers: Optional[Iterable[int]]) -> list[Module]:
    want = set(tiers) if tiers is not None else None
    return [m for m in modules if want is None or m.tier in want]


__all__ = ["Module", "xqa_modules", "xqa_probes", "counts", "limit_tiers", "page_for", "XQA_PAGES", "XQA_HEADS",
           "SPEC_TOKENS", "KV_LENS"]
