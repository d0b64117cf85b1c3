"""Per-shape decode kernel choice (issue 41 item 3): `--engine flashinfer` carries both valid decode calls
and the measured boundary between them (rules/decode_choice.yaml) in the plan, and the adapter picks per
step by one comparison. CPU only: the plans come from the shipped rules, the adapter's pick is checked on
the executor and on the FlashInfer backend with its kernel calls replaced by recorders."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from attnplan.adapter import AttentionExecutor
from attnplan.adapter.calls import ALTERNATIVE, DEFAULT, DecodeSwitch, batch_pages, needs_finite_page_tail, strategy
from attnplan.adapter.calls import workspace_layout
from attnplan.policy import AttentionConfig, default_ruleset, evaluate_candidate, load_rules, plan_for, simulated_node
from attnplan.policy.errors import RulePackError
from attnplan.rules import BACKENDS_FILE, PACKS_DIR

LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8, dtype="bf16")
CHOICE_FILE = BACKENDS_FILE.parent / "decode_choice.yaml"


def _entry():
    (entry,) = [e for e in default_ruleset().decode_choices if "H100" in e.spec.devices]
    return entry


def _answer(device="H100", engine="flashinfer", ruleset=None, **cfg):
    a = plan_for(AttentionConfig(**{**LLAMA, **cfg}), simulated_node(device), engine=engine, ruleset=ruleset)
    assert a.ok, a.violations
    return a


def _accepted(backend, device="H100", engine="flashinfer", **cfg) -> bool:
    r = evaluate_candidate(AttentionConfig(**{**LLAMA, **cfg}), simulated_node(device), "decode", backend, engine=engine)
    return r.ok


# -- the plan ------------------------------------------------------------------------------------------
def test_flashinfer_on_the_h100_carries_both_decode_calls_and_the_measured_boundary():
    spec = _entry().spec
    a = _answer()
    d, choice = a.plan.decode, a.plan.decode_choice
    assert choice is not None and choice.id == spec.id
    assert _accepted(spec.small) and _accepted(spec.large)          # both pass every rule for this config
    assert {d.backend, choice.alternative.backend} == {spec.small, spec.large}
    row = next(r for r in default_ruleset().layer(a.engine.name).selection["standard"]["decode"] if r.capability_major == 9)
    assert d.backend == row.candidates[0]                             # the selection's own pick stays plan.decode
    assert (choice.small, choice.large, choice.small_up_to_kv_tokens) == (spec.small, spec.large, spec.small_up_to_kv_tokens)
    # the alternative is a whole phase plan of the same plan: its call is the catalog's for its backend
    cat = default_ruleset().backends[choice.alternative.backend]
    assert choice.alternative.call == cat.calls["decode"].call
    assert choice.alternative.query_dtype == d.query_dtype and choice.alternative.output_dtype == d.output_dtype
    # provenance: the log and the command of the measurement
    assert spec.verified[0].log in choice.verified and "bench/xqa_vs_fa2.py" in choice.verified
    # the decode phase lists both calls' modules, the alternative's with its own call for the warm-up loader
    alt_mods = [m for m in d.modules if m.backend == choice.alternative.backend]
    assert alt_mods and all(m.params["call"] == choice.alternative.call for m in alt_mods)
    # metadata and the cache serve both: the native call plans on the host from page indices
    assert a.plan.metadata.decode_only.needs_paged_kv_indices and a.plan.metadata.decode_only.needs_host_seq_lens
    assert needs_finite_page_tail(a.plan)         # XQA reads last-page tails: the cache is zeroed
    plan_json = a.to_json(trace=False)["plan"]
    assert plan_json["decode_choice"]["alternative"]["call"] == choice.alternative.call
    assert plan_json["decode_choice"]["small_up_to_kv_tokens"] == spec.small_up_to_kv_tokens


def test_warmup_builds_both_decode_modules_each_by_its_own_call():
    from attnplan.adapter.warmup import plan_modules

    a = _answer()
    calls = {m.params["call"] for m in plan_modules(a.plan) if m.phase == "decode"}
    assert calls == {a.plan.decode.call, a.plan.decode_choice.alternative.call}


@pytest.mark.parametrize("cfg, why", [
    (dict(logits_soft_cap=30.0), "trtllm.softcap"),            # XQA has no soft cap: the rules refuse it
    (dict(attention_backend="fa2"), None),                     # forced: one candidate, never a switch
])
def test_no_choice_where_the_rules_do_not_accept_both(cfg, why):
    a = _answer(**cfg)
    assert a.plan.decode_choice is None
    assert "decode_choice" not in a.to_json(trace=False)["plan"]
    if why is not None:
        r = evaluate_candidate(AttentionConfig(**{**LLAMA, **cfg}), simulated_node("H100"), "decode",
                               _entry().spec.small, engine="flashinfer")
        assert why in {v.rule for v in r.violations}


def test_no_choice_on_a_gpu_without_a_measured_boundary():
    """The H200 is 9.0 too and its rules accept both kernels: no measurement there, no switch."""
    spec = _entry().spec
    assert "H200" not in spec.devices
    assert _accepted(spec.small, "H200") and _accepted(spec.large, "H200")
    assert _answer("H200").plan.decode_choice is None
    # a node declared by capability alone names no GPU: nothing measured for it either
    bare = plan_for(AttentionConfig(**LLAMA), simulated_node(capability="9.0"), engine="flashinfer")
    assert bare.ok and bare.plan.decode_choice is None


def test_no_choice_outside_the_measured_config_shape():
    """head 64 (group 4, bf16): the rules accept both kernels, the entry's ``when`` does not hold."""
    spec = _entry().spec
    assert _accepted(spec.small, head_dim=64) and _accepted(spec.large, head_dim=64)
    assert _answer(head_dim=64).plan.decode_choice is None


def _rules_without_choice(tmp_path: Path):
    d = tmp_path / "nochoice"
    d.mkdir()
    shutil.copy(BACKENDS_FILE, d / "backends.yaml")
    return load_rules(PACKS_DIR, d / "backends.yaml")


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_other_engines_answer_as_without_the_measurements(tmp_path, engine):
    """vLLM and SGLang pick their own kernel: the same config on the same H100 answers the same whether
    the measured choices are loaded or not (the rules' revision aside)."""
    bare = _rules_without_choice(tmp_path)
    assert not bare.decode_choices and default_ruleset().decode_choices
    with_ = _answer(engine=engine).to_json(trace=False)
    without = _answer(engine=engine, ruleset=bare).to_json(trace=False)
    for j in (with_, without):
        j.pop("rules_revision")
    assert with_ == without
    assert "decode_choice" not in with_["plan"]


def test_flashinfer_without_the_measurements_keeps_one_decode_kernel(tmp_path):
    bare = _rules_without_choice(tmp_path)
    a, b = _answer(), _answer(ruleset=bare)
    assert b.plan.decode_choice is None and b.plan.decode.backend == a.plan.decode.backend
    assert [m.name for m in b.plan.decode.modules] == [m.name for m in a.plan.decode.modules
                                                       if m.backend == a.plan.decode.backend]


# -- the loader ----------------------------------------------------------------------------------------
def _entry_data() -> dict:
    return yaml.safe_load(CHOICE_FILE.read_text())["decode_choice"][0]


@pytest.mark.parametrize("change, words", [
    (lambda e: e.pop("verified"), "verified"),
    (lambda e: e.update(verified=[]), "verified"),
    (lambda e: e.update(small_up_to_kv_tokens=0), "small_up_to_kv_tokens"),
    (lambda e: e.update(small_up_to_kv_tokens="16k"), "small_up_to_kv_tokens"),
    (lambda e: e.update(small="fa9"), "fa9"),
    (lambda e: e.update(large=e["small"]), "same backend"),
    (lambda e: e.update(engine="vllm"), "adapter"),
    (lambda e: e.update(engine="nope"), "nope"),
    (lambda e: e.update(devices=["H100X"]), "H100X"),
    (lambda e: e.update(devices=["H20"]), "verified record"),           # measured on the H100, not the H20
    (lambda e: e["verified"][0].pop("log"), "log"),
    (lambda e: e.update(flashinfer="~~0.7"), "version specifier"),
    (lambda e: e.update(when={"fact": "config.head_dimm", "eq": 128}), "config.head_dimm"),
    (lambda e: e.update(threshold=3), "threshold"),
])
def test_the_loader_refuses_a_malformed_entry(tmp_path, change, words):
    d = tmp_path / "rules"
    d.mkdir()
    shutil.copy(BACKENDS_FILE, d / "backends.yaml")
    e = _entry_data()
    change(e)
    (d / "decode_choice.yaml").write_text(yaml.safe_dump({"decode_choice": [e]}, sort_keys=False))
    with pytest.raises(RulePackError) as err:
        load_rules(PACKS_DIR, d / "backends.yaml")
    assert "decode_choice.yaml" in str(err.value) and words in str(err.value)


def test_the_loader_reads_a_well_formed_copy(tmp_path):
    d = tmp_path / "rules"
    d.mkdir()
    shutil.copy(BACKENDS_FILE, d / "backends.yaml")
    e = _entry_data()
    e["small_up_to_kv_tokens"] = 4096
    (d / "decode_choice.yaml").write_text(yaml.safe_dump({"decode_choice": [e]}, sort_keys=False))
    rs = load_rules(PACKS_DIR, d / "backends.yaml")
    assert _answer(ruleset=rs).plan.decode_choice.small_up_to_kv_tokens == 4096      # the data decides


# -- the adapter's pick --------------------------------------------------------------------------------
def test_the_executor_picks_by_the_boundary_in_pages():
    a = _answer()
    ex = AttentionExecutor(a, device="cpu", backend="reference")
    choice, page = a.plan.decode_choice, a.plan.kv_cache.page_size
    small = a.plan.decode if a.plan.decode.backend == choice.small else choice.alternative
    large = choice.alternative if small is a.plan.decode else a.plan.decode
    edge = choice.small_up_to_kv_tokens // page
    assert ex.decode_call_for(1) is small and ex.decode_call_for(edge) is small
    assert ex.decode_call_for(edge + 1) is large and ex.decode_call_for(10 * edge) is large
    # without a choice the plan's one decode call, whatever the batch
    one = AttentionExecutor(_answer("H200"), device="cpu", backend="reference")
    assert one.decode_call_for(1) is one.plan.decode and one.decode_call_for(10 ** 6) is one.plan.decode


def test_batch_pages_reads_host_ints_the_metadata_holds():
    import torch

    with_indices = SimpleNamespace(kv_indices=torch.empty(37, dtype=torch.int32), num_reqs=4, max_kv_len=10 ** 6)
    assert batch_pages(with_indices, 16) == 37
    bound = SimpleNamespace(kv_indices=None, num_reqs=4, max_kv_len=33)
    assert batch_pages(bound, 16) == 4 * 3
    sw = DecodeSwitch(_answer().plan)
    assert sw.pick(with_indices) == sw.for_pages(37) and sw.pick(bound) == sw.for_pages(12)


def test_the_executor_plans_real_steps_with_the_choice_on_the_cpu():
    """The metadata a real step builds gives the switch its page count (decode-only and mixed)."""
    import torch

    from attnplan.adapter import StepInput

    a = _answer()
    ex = AttentionExecutor(a, device="cpu", backend="reference")
    sw = DecodeSwitch(a.plan)
    page = a.plan.kv_cache.page_size
    for seq, q_lens, nd in (([17, 40], [1, 1], 2), ([17, 40, 9], [1, 1, 9], 2)):
        width = max(-(-s // page) for s in seq)
        inp = StepInput(query_lens=q_lens, seq_lens=torch.tensor(seq, dtype=torch.int32), num_decodes=nd,
                        seq_lens_cpu=torch.tensor(seq, dtype=torch.int32),
                        block_table=torch.arange(len(seq) * width, dtype=torch.int32).view(len(seq), width))
        step = ex.plan_step(inp)
        pages = sum(-(-s // page) for s in seq[:nd])
        assert batch_pages(step.decode, page) == pages
        assert sw.pick(step.decode) == sw.for_pages(pages)


class _Recorder:
    def __init__(self):
        self.events: list[tuple[str, str]] = []


@pytest.fixture
def fake_kernels(monkeypatch):
    """The FlashInfer backend over recorders: every kernel call's construct / plan / run records
    (call, what) instead of touching FlashInfer, which needs a GPU to build its wrappers."""
    pytest.importorskip("flashinfer")
    rec = _Recorder()
    from attnplan.adapter.calls import registry

    for name, call in registry().items():
        monkeypatch.setattr(call, "construct",
                            lambda b, pp, _n=name, **kw: SimpleNamespace(call=_n) if strategy(_n).host_planned else None)
        monkeypatch.setattr(call, "plan", lambda b, w, batch, phase, _n=name: rec.events.append((_n, "plan:" + b.plan.decode.call)))
        monkeypatch.setattr(call, "run", lambda b, w, step, phase, q, cache, out, _n=name, **kw:
                            rec.events.append((_n, "run:" + b.plan.decode.call)))
    return rec


def _decode_step(plan, pages: int):
    import torch

    from attnplan.adapter.step import StepMetadata

    batch = SimpleNamespace(kv_indices=torch.empty(pages, dtype=torch.int32), num_reqs=2, max_kv_len=pages * 8)
    return StepMetadata(kind="decode_only", needs=plan.metadata.decode_only, num_tokens=2, slots=None, decode=batch)


def test_the_flashinfer_backend_switches_per_step_by_one_comparison(fake_kernels):
    from attnplan.adapter.flashinfer_backend import FlashInferBackend
    from attnplan.adapter.params import AttentionParams

    a = _answer()
    plan, choice = a.plan, a.plan.decode_choice
    fb = FlashInferBackend(plan, AttentionParams.from_answer(a), "cpu")
    # both calls built at startup; the XQA workspace is zeroed memory no wrapper writes
    assert [c.plan.decode.call for c in fb.decode_contexts] == [plan.decode.call, choice.alternative.call]
    roles = workspace_layout({"decode": plan.decode, "alt": choice.alternative})["roles"]
    assert ("private" in roles.values()) == (fb.device_workspace is not fb.workspace)
    edge = choice.small_up_to_kv_tokens // plan.kv_cache.page_size
    small = choice.alternative.call if choice.alternative.backend == choice.small else plan.decode.call
    large = plan.decode.call if small == choice.alternative.call else choice.alternative.call
    for pages, want in ((3, small), (edge, small), (edge + 1, large), (50 * edge, large)):
        fake_kernels.events.clear()
        step = _decode_step(plan, pages)
        fb.plan_step(step)
        fb.run_decode(step, None, None, None)
        ran = [e for e in fake_kernels.events if e[1].startswith("run:")]
        assert ran == [(want, "run:" + want)], (pages, fake_kernels.events)
        planned = [e for e in fake_kernels.events if e[1].startswith("plan:")]
        # only a host-planned call is planned, and only when it is the one that runs
        assert planned == ([(want, "plan:" + want)] if strategy(want).host_planned else [])
    # forced (warm-up, benchmarks): the other call whatever the batch
    with fb.forced_decode(DEFAULT if small == choice.alternative.call else ALTERNATIVE):
        fake_kernels.events.clear()
        step = _decode_step(plan, 3)
        fb.plan_step(step)
        fb.run_decode(step, None, None, None)
        assert [e for e in fake_kernels.events if e[1].startswith("run:")] == [(large, "run:" + large)]
    assert fb.decode_index_for(edge) == fb.switch.for_pages(edge)


def test_a_plan_without_a_choice_runs_its_one_decode_call(fake_kernels):
    from attnplan.adapter.flashinfer_backend import FlashInferBackend
    from attnplan.adapter.params import AttentionParams

    a = _answer("H200")
    fb = FlashInferBackend(a.plan, AttentionParams.from_answer(a), "cpu")
    assert fb.switch is None and len(fb.decode_contexts) == 1
    for pages in (1, 10 ** 5):
        fake_kernels.events.clear()
        step = _decode_step(a.plan, pages)
        fb.plan_step(step)
        fb.run_decode(step, None, None, None)
        assert [e[0] for e in fake_kernels.events if e[1].startswith("run:")] == [a.plan.decode.call]
        assert "decode_context" not in step.extra


def test_both_decode_calls_bind_to_flashinfer_through_the_executor(monkeypatch):
    """Each decode call of the choice, run through the real executor and backend (FlashInfer's entry
    points replaced by recorders, tests/test_adapter_strategies_bind.py): what reaches FlashInfer binds to
    its 0.7.2 signatures and carries that call's own backend argument; warm-up's forced steps reach both."""
    pytest.importorskip("flashinfer")
    from attnplan.adapter import calls
    from attnplan.adapter.warmup import exercise
    from test_adapter_strategies_bind import _recorder, bind_log

    logs: dict[str, list] = {}
    for name, st in calls.STRATEGIES.items():
        logs[name] = []
        monkeypatch.setattr(st, "_resolved", _recorder(st, logs[name]))
    a = _answer()
    ex = AttentionExecutor(a, device="cpu", backend="flashinfer", check=False)
    # one switch per executor: the backend picks with the object decode_call_for answers from
    assert ex.backend.switch is ex._switch is not None
    pps = (a.plan.decode, a.plan.decode_choice.alternative)
    for index, pp in enumerate(pps):
        with ex.backend.forced_decode(index):
            exercise(ex, "decode_only")
        st = calls.strategy(pp.call)
        log = logs[pp.call]
        st._resolved = None
        bind_log(st.entry(), log)
        assert {w for w, _, _ in log} == ({"__init__", "plan", "run"} if st.host_planned else {"call"}), pp.call
        assert {kw.get("backend") for w, _, kw in log if w in ("__init__", "call")} - {None} == {pp.flashinfer_backend}
        st._resolved = _recorder(st, logs[pp.call])
