"""One probe and its one-factor variants on the GPU: which factor a failing probe needs (issue 38).

    python3 bench/probe_variants.py --out DIR --from RESULTS.jsonl --id r0023 [--sample 32 --seed 41]
        --vary num_qo_heads=1,8,57 --vary page_size=16,256 --vary shape=short,one-long [--list] [--jobs 6]
    python3 bench/probe_variants.py --out DIR --backend fa2 --phase decode --config '{"head_dim": 64, ...}'
        --q-lens 4,4 --kv-lens 301,4097 --vary ...

The base is a probe of ``attnplan verify`` (found by id among the configurations ``--sample N --seed S``
draws, or the sweep's with ``--sweep``), or a config given whole. Every ``--vary FIELD=V1,V2`` adds one probe
per value with only that field changed (``shape``: ``short`` = one request of 37 tokens, ``one-long`` = one of
4,097, ``base`` = the base's own; a value ``none`` is None). Each probe is the plan's own call for its config
(``verify.generate.make_spec``: call, dtypes, scale, window, cap, tolerance), run against the float32 reference by
``attnplan.verify.child`` with one process per JIT module (``verify.runner.run_modules``), as the sweep runs
them; whether the kernel rules accept each variant on (backend, phase) of a declared node (``verify.generate.refusals``,
as the sample and the sweep judge a probe) is printed beside its outcome. ``DIR/results.jsonl`` (one line per probe: id,
variant, config, module, rules, outcome, rel err) and ``DIR/variants.md`` (the table).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

SHAPES = {"short": ([None], [37]), "one-long": ([None], [4097])}


def _value(text: str) -> Any:
    if text.lower() == "none":
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _base(a: argparse.Namespace, ruleset: Any, node: Any) -> tuple[str, str, dict[str, Any], Any, Any]:
    """(backend, phase, config, q_lens, kv_lens) of the base probe."""
    if a.config:
        cfg = json.loads(a.config)
        ql = [int(x) for x in a.q_lens.split(",")] if a.q_lens else None
        kl = [int(x) for x in a.kv_lens.split(",")] if a.kv_lens else None
        return a.backend, a.phase, cfg, ql, kl
    from attnplan.verify.sweep import sample, sweep

    gen = sample(ruleset, node, a.sample, seed=a.seed) if a.sample else sweep(ruleset, node)
    probes = gen.probes if hasattr(gen, "probes") else gen
    found = [p for p in probes if p.id.startswith(a.id) or p.id.split("-")[-1].startswith(a.id)]
    if len(found) != 1:
        raise SystemExit(f"probe_variants: {len(found)} probes match {a.id!r}")
    p = found[0]
    return p.backend, p.phase, dict(p.config), p.spec.get("q_lens"), p.spec.get("kv_lens")


def variants(base: dict[str, Any], ql: Any, kl: Any, vary: list[str]) -> list[tuple[str, dict[str, Any], Any, Any]]:
    out = [("base", base, ql, kl)]
    for item in vary:
        field, _, values = item.partition("=")
        for v in values.split(","):
            if field == "shape":
                if v == "base":
                    continue
                q, k = SHAPES[v]
                qlen = (ql or [1])[0]
                out.append((f"shape={v}", base, [qlen if x is None else x for x in q], k))
                continue
            val = _value(v)
            if base.get(field) == val:
                continue
            q = ql
            if field == "num_speculative_tokens" and ql:      # the query length follows: 1 + draft tokens
                q = [1 + int(val or 0)] * len(ql)
            out.append((f"{field}={v}", {**base, field: val}, q, kl))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--id", help="the base probe's id (or its digest) among --sample/--sweep's")
    ap.add_argument("--sample", type=int, default=0, help="the base is among `verify --sample N`'s configurations")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config", help="the base config as JSON (with --backend and --phase)")
    ap.add_argument("--backend")
    ap.add_argument("--phase")
    ap.add_argument("--q-lens")
    ap.add_argument("--kv-lens")
    ap.add_argument("--device", default="H100", help="the declared node the rules plan for (default H100)")
    ap.add_argument("--vary", action="append", default=[], metavar="FIELD=V1,V2")
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--build-jobs", type=int, default=4)
    ap.add_argument("--build-timeout", type=float, default=900.0)
    ap.add_argument("--list", action="store_true", help="print the probes and what the rules say; run nothing")
    a = ap.parse_args()
    from attnplan.policy import AttentionConfig, default_ruleset, simulated_node
    from attnplan.verify.generate import Probe, Target, make_spec, refusals
    from attnplan.verify.select import kernel_rules

    ruleset, node = default_ruleset(), simulated_node(a.device)
    backend, phase, base, ql, kl = _base(a, ruleset, node)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    probes, rows = [], {}
    for name, cfg, q, k in variants(base, ql, kl, a.vary):
        digest = hashlib.sha256(json.dumps([backend, phase, cfg, q, k], sort_keys=True).encode()).hexdigest()[:8]
        t = Target(backend, phase, bool(AttentionConfig.model_validate(cfg).is_mla))
        try:
            spec, module, skip = make_spec(ruleset, node, t, cfg, digest, q_lens=q, kv_lens=k)
        except Exception as exc:  # noqa: BLE001 - a variant no plan exists for is a row, not a crash
            rows[digest] = dict(id=digest, variant=name, config=cfg, rules=f"no spec: {exc}", outcome="not run")
            continue
        refused = refusals(kernel_rules(ruleset), AttentionConfig.model_validate(cfg), node, t)
        rules = "refused: " + ", ".join(refused) if refused else "accepted"
        probes.append(Probe(id=digest, backend=backend, phase=phase, call=spec["call"], config=cfg, refused_by=(),
                            spec=spec, module=module, skip=skip))
        rows[digest] = dict(id=digest, variant=name, config=cfg, q_lens=spec.get("q_lens"), kv_lens=spec.get("kv_lens"),
                            call=spec["call"], module=module, rules=rules)
    if a.list:
        for r in rows.values():
            print(json.dumps(r))
        return 0
    from attnplan.verify.runner import batch_subprocess_runner, run_modules

    env = dict(os.environ, MAX_JOBS=str(a.build_jobs))
    log = (out / "results.jsonl").open("a")

    def done(p: Any, res: dict[str, Any]) -> None:
        rows[p.id].update(outcome=res["outcome"], rel_err=res.get("rel_err"), tolerance=res.get("tolerance"),
                          error=res.get("error"), seconds=res.get("seconds"))
        log.write(json.dumps(rows[p.id]) + "\n")
        log.flush()

    run_modules(probes, batch_subprocess_runner(env=env), jobs=a.jobs, build_timeout=a.build_timeout,
                progress=lambda s: print(s, file=sys.stderr, flush=True), on_result=done)
    lines = ["| variant | call | module | rules | outcome | rel err / tolerance |", "|---|---|---|---|---|---|"]
    for r in rows.values():
        err = "" if r.get("rel_err") is None else f"{r['rel_err']:.3g} / {r.get('tolerance') or 0:.3g}"
        lines.append(f"| {r['variant']} | {r.get('call', '')} | {r.get('module', '')} | {r['rules']} | "
                     f"{r.get('outcome', '')} | {err or (r.get('error') or '')[:80]} |")
    (out / "variants.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
