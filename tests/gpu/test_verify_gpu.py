"""verify on a real GPU: the shipped rules' base configs run correctly through FlashInfer itself."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_accepted_base_configs_run_correctly_in_their_own_processes():
    from attnplan.policy import default_ruleset
    from attnplan.node import local_node
    from attnplan.verify import build_report, generate, run_probes, subprocess_runner

    from collections import Counter

    node = local_node()
    gen = generate(default_ruleset(), node, quick=True)
    base = [p for p in gen.probes if not p.refused_by and not p.skip and p.backend == "fa2"]
    assert base, "no accepted fa2 boundary probe on this GPU"
    # The accepted probes of the module most of them share: one build, several rules' base configs
    # (no rule is named: which rules draw fa2 lines changes as the packs learn, e.g. page-size left fa2).
    common = Counter(p.module for p in base).most_common(1)[0][0]
    base = [p for p in base if p.module == common][:8]
    assert len(base) >= 2 and len({b.rule for p in base for b in p.boundaries}) >= 2
    results = run_probes(base, subprocess_runner(), jobs=2, build_timeout=600, probe_timeout=120)
    for p in base:
        assert results[p.id]["outcome"] == "ok", (p.call, results[p.id])
    gen.probes = base
    report = build_report(gen, results, device="gpu", capability=node.capability_str,
                          flashinfer=node.flashinfer_version.value)
    assert all(v == "consistent" for p in report["probes"] for v in p["verdicts"].values())
