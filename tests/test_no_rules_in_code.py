"""Rules are data (issue 25 item 1): no capability number, backend name or kernel-call name is written
in attnplan's Python outside the rule loader. What a backend, a call or a capability means lives in
attnplan/rules/ (packs, backends.yaml, devices.yaml); code reads it from there.

The scan is over the AST of attnplan/**/*.py, so comments and docstrings may name anything. It flags:
- a string constant that is exactly a backend name, a family name, an engine's auto name or a call
  name of the shipped backends.yaml (the names come from the data, so a new backend is covered too);
- a capability string ("9.0", "10.3", ...) of devices.yaml or the rules;
- an int constant that is a capability (90, 100, 103, ...) in a statement that speaks of capabilities;
- ``x // 10`` (a capability's family computed by hand: policy.capability.capability_major does it).
Each exception is named in ALLOWED with why; an entry that no longer matches anything fails too, so
the list only shrinks.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from attnplan.policy import default_ruleset
from attnplan.policy.devices import catalog

ROOT = Path(__file__).resolve().parent.parent / "attnplan"
# Modules that model other programs' code (vLLM's and SGLang's own names and numbers), and the loader.
EXCLUDED = ("oracle/", "sglang/", "policy/rulepack.py")

ADAPTER = "the adapter's call registry (adapter/calls/: one KernelCall strategy per call named in backends.yaml)"
VERIFY_CALLS = "verify's call registry: verify/calls.py CALLS is keyed by the call names backends.yaml lists (issue 25 item 4)"
# (file relative to attnplan/, the literal as written, why)
ALLOWED: tuple[tuple[str, str, str], ...] = (
    # The request vocabulary: the names a user may write (SPEC §1); tests/test_rulepack.py keeps them equal
    # to backends.yaml's backends and auto names.
    ("policy/backend_names.py", "fa2", "the request vocabulary (Backend Literal, SPEC §1)"),
    ("policy/backend_names.py", "fa3", "the request vocabulary (Backend Literal, SPEC §1)"),
    ("policy/backend_names.py", "trtllm-gen", "the request vocabulary (Backend Literal, SPEC §1)"),
    ("policy/backend_names.py", "xqa", "the request vocabulary (Backend Literal, SPEC §1)"),
    ("policy/backend_names.py", "fa2-mla", "the request vocabulary (Backend Literal, SPEC §1)"),
    ("policy/backend_names.py", "fa3-mla", "the request vocabulary (Backend Literal, SPEC §1)"),
    ("policy/backend_names.py", "trtllm-gen-mla", "the request vocabulary (Backend Literal, SPEC §1)"),
    ("policy/config.py", "trtllm-gen", "input aliases: trtllm -> trtllm-gen (AttentionConfig._norm_backend)"),
    ("policy/config.py", "fa2-mla", "input aliases: fa2mla -> fa2-mla (AttentionConfig._norm_backend)"),
    ("policy/backend_names.py", "flashinfer-mla", "vLLM's AttentionBackendEnum name -> attnplan's name (input aliases)"),
    ("policy/backend_names.py", "trtllm-ragged", "vLLM's AttentionBackendEnum name -> attnplan's name (input aliases)"),
    # The plan's call vocabulary: PhasePlan.call is a Literal of the calls (SPEC §5, the answer's JSON schema);
    # tests/test_rulepack.py keeps it equal to backends.yaml calls.
    *(("policy/answer.py", c, "the answer schema's call Literal (SPEC §5)") for c in (
        "paged_prefill", "paged_decode", "sink", "xqa_decode", "trtllm_context", "trtllm_decode",
        "mla_paged_decode", "trtllm_mla_decode", "ragged_prefill", "trtllm_ragged")),
    # The capability helpers themselves: "10.3" <-> 103 and 103 -> 10.
    ("policy/capability.py", "// 10", "the one place a capability's family is computed"),
    ("preflight/labels.py", "// 10", "the capability-major node label (a capability's family, not a rule)"),
    # Representative nodes/configs: issue 25 item 3 (h25c) removes the dummy node.
    ("node/probe.py", "trtllm-gen", "FlashInfer's artifact path fmha/trtllm-gen/ (flashinfer/artifacts.py), a directory, not the backend"),
    # Verify's registry and the if-chains over calls (issue 25 item 4, h25b).
    *(("verify/calls.py", c, VERIFY_CALLS) for c in (
        "paged_prefill", "paged_decode", "sink", "xqa_decode", "mla_paged_decode", "ragged_prefill", "xqa")),
    ("verify/generate.py", "xqa", "the JIT identity per module family (backends.yaml calls: verify.jit), not a backend"),
    ("verify/sweep.py", "xqa", "issue 38: the factors each JIT family compiles into a module (COMPILED), keyed by family"),
    ("verify/sweep.py", "native", "issue 38: the factors each JIT family compiles into a module (COMPILED), keyed by family"),
    ("verify/exhaustive.py", "xqa", "issue 38: the exhaustive XQA run enumerates XQA's own template space by construction"),
    ("verify/exhaustive.py", "xqa_decode", "issue 38: the call the exhaustive XQA run probes (backends.yaml calls.xqa_decode)"),
    ("kernels/trtllm_gen/__main__.py", "100", "FlashInfer's kSM_100 constant of the kernel table, named for people"),
    ("kernels/trtllm_gen/__main__.py", "103", "FlashInfer's kSM_103 constant of the kernel table, named for people"),
    ("verify/generate.py", "sink", "the JIT identity per module family (backends.yaml calls: verify.jit), not a backend"),
)


def _names() -> tuple[set[str], set[str], set[str]]:
    rs = default_ruleset()
    backends = set(rs.backends) | set(rs.families)
    for eng in rs.engines.values():
        backends |= set(eng.auto_names)
    backends -= set(rs.engines)   # "flashinfer" is an engine layer and a package as well as a vLLM backend name
    caps = {d.capability_int for d in catalog().devices}
    for sel in (e.selection for e in rs.engines.values()):
        for phases in sel.values():
            for rows in phases.values():
                caps |= {r.capability_major * 10 for r in rows if r.capability_major is not None}
    caps |= {100, 103, 107, 110, 120, 121}
    return backends, set(rs.calls), caps


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                ids.add(id(first.value))
    return ids


# A statement speaks of capabilities when it names one (a capability, a family, an sm_ arch) or builds a node.
CAP_CONTEXT = re.compile(r"cap|sm_?\d|major|node\(", re.I)


def _findings() -> list[tuple[str, int, str]]:
    backends, calls, caps = _names()
    cap_strings = {f"{c // 10}.{c % 10}" for c in caps}
    names = backends | calls
    out: list[tuple[str, int, str]] = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(EXCLUDED):
            continue
        text = path.read_text()
        tree = ast.parse(text)
        lines = text.splitlines()
        docs = _docstrings(tree)
        fstring_parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and id(node) not in docs and id(node) not in fstring_parts:
                v = node.value
                if isinstance(v, str) and (v in names or v in cap_strings):
                    out.append((rel, node.lineno, v))
                elif isinstance(v, int) and not isinstance(v, bool) and v in caps:
                    stmt = lines[node.lineno - 1]
                    if CAP_CONTEXT.search(stmt):
                        out.append((rel, node.lineno, str(v)))
            elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv)
                  and isinstance(node.right, ast.Constant) and node.right.value == 10):
                out.append((rel, node.lineno, "// 10"))
    return out


def _allowed(rel: str, literal: str) -> bool:
    return rel.startswith("adapter/calls/") or any(f == rel and lit == literal for f, lit, _ in ALLOWED)


def test_no_capability_numbers_or_backend_names_in_code():
    bad = [f"attnplan/{rel}:{line}: {lit!r}" for rel, line, lit in _findings() if not _allowed(rel, lit)]
    assert not bad, ("capability numbers / backend or call names written in Python (move them into "
                     "attnplan/rules/ and read them from the loaded rules, or name the exception in ALLOWED):\n"
                     + "\n".join(bad))


def test_every_allow_list_entry_still_matches():
    found = {(rel, lit) for rel, _, lit in _findings()}
    stale = [e for e in ALLOWED if (e[0], e[1]) not in found]
    assert not stale, f"allow-list entries that match nothing any more (remove them): {stale}"


def test_adapter_sites_are_listed_for_item_4():
    # The adapter is being restructured (issue 25 item 4): its call names are allowed wholesale for now,
    # under one named reason, and listed here so that the lead sees what is left.
    adapter = sorted({(rel, lit) for rel, _, lit in _findings() if rel.startswith("adapter/")})
    print(f"{ADAPTER}: {adapter}")
    assert all(rel.startswith("adapter/") for rel, _ in adapter)


@pytest.mark.parametrize("literal", ["fa3", "xqa_decode", "9.0"])
def test_the_scan_finds_a_planted_literal(tmp_path, monkeypatch, literal):
    # The scan is real: a module comparing against a backend name, a call name or a capability is found.
    fake = tmp_path / "attnplan"
    (fake / "policy").mkdir(parents=True)
    (fake / "policy" / "planted.py").write_text(f'def f(x):\n    """{literal} in a docstring is fine."""\n'
                                                f'    return x == "{literal}"\n')
    monkeypatch.setitem(globals(), "ROOT", fake)
    assert _findings() == [("policy/planted.py", 3, literal)]


def test_the_scan_finds_capability_arithmetic(tmp_path, monkeypatch):
    fake = tmp_path / "attnplan"
    (fake / "verify").mkdir(parents=True)
    (fake / "verify" / "planted.py").write_text("def f(capability):\n    return capability // 10 == 10 or capability == 103\n")
    monkeypatch.setitem(globals(), "ROOT", fake)
    assert sorted(_findings()) == [("verify/planted.py", 2, "// 10"), ("verify/planted.py", 2, "103")]


# -- the vocabularies the allow-list names, and the data that replaced the Python -------------------
def test_the_request_and_answer_vocabularies_are_the_data():
    import typing

    from attnplan.policy import BACKEND_CHOICES
    from attnplan.policy.answer import Call

    rs = default_ruleset()
    autos = {n for e in rs.engines.values() for n in e.auto_names}
    assert set(BACKEND_CHOICES) == {"auto"} | set(rs.backends) | autos
    assert set(typing.get_args(Call)) == set(rs.calls)
    used = {c.call for b in rs.backends.values() for t in (b.calls, b.mla_calls, b.sink_calls) for c in t.values()}
    assert used == set(rs.calls), "every call backends.yaml describes is named by some backend, and back"


def _edited_ruleset(tmp_path, old: str, new: str):
    from attnplan.policy.rulepack import load_ruleset
    from attnplan.rules import BACKENDS_FILE, PACKS_DIR, pack_files

    text = BACKENDS_FILE.read_text()
    assert text.count(old) == 1, old
    path = tmp_path / "backends.yaml"
    path.write_text(text.replace(old, new))
    return load_ruleset(pack_files(PACKS_DIR), path)


def test_the_artifactory_check_follows_the_data(tmp_path):
    from attnplan.policy import Fact, NodeFacts
    from attnplan.node.probe import needs_artifactory_check

    node = NodeFacts(capability=Fact.measured(121))
    assert needs_artifactory_check(node)
    rs = _edited_ruleset(tmp_path, "107]}, {fact: node.capability, eq: 90}, {fact: node.capability_major, eq: 12}]}",
                         "107]}, {fact: node.capability, eq: 90}, {fact: node.capability_major, eq: 13}]}")
    assert not needs_artifactory_check(node, rs)
    assert needs_artifactory_check(NodeFacts(capability=Fact.measured(100)), rs)


def test_split_kv_and_tensor_cores_follow_the_data(tmp_path):
    from attnplan.policy import make_config
    from attnplan.policy.plan import build_plan

    nvfp4 = make_config(dict(head_dim=128, num_qo_heads=32, num_kv_heads=32, kv_cache_dtype="nvfp4"))
    rs = default_ruleset()
    plan = build_plan(nvfp4, "fa2", "fa2", 16, (16,), rs, capability=120)
    assert plan.attention.split_kv == "disabled" and plan.decode.use_tensor_cores is False
    edited = _edited_ruleset(tmp_path, "      capability_majors: [12]\n", "      capability_majors: [9]\n")
    assert build_plan(nvfp4, "fa2", "fa2", 16, (16,), edited, capability=120).attention.split_kv == "auto"
    assert build_plan(nvfp4, "fa2", "fa2", 16, (16,), edited, capability=90).attention.split_kv == "disabled"
    # the group at which decode runs on tensor cores, and the backends that always do, are data too
    assert build_plan(nvfp4, "fa3", "fa3", 16, (16,), rs, capability=90).decode.use_tensor_cores is True
    edited = _edited_ruleset(tmp_path, "    tensor_core_decode_group: 4\n", "    tensor_core_decode_group: 1\n")
    assert build_plan(nvfp4, "fa2", "fa2", 16, (16,), edited, capability=120).decode.use_tensor_cores is True


def test_the_loader_refuses_a_call_or_family_it_does_not_describe(tmp_path):
    from attnplan.policy import RulePackError

    with pytest.raises(RulePackError, match="call 'xqa_decode' has no calls entry"):
        _edited_ruleset(tmp_path, "  xqa_decode: {verify:", "  xqa_decodes: {verify:")
    with pytest.raises(RulePackError, match="family 'xqa' has no families entry"):
        _edited_ruleset(tmp_path, "\n  xqa:\n    doc: XQA decode, JIT", "\n  xqa2:\n    doc: XQA decode, JIT")


def test_verify_reads_where_a_call_runs_from_the_data():
    from attnplan.verify.select import runnable_calls, unrunnable_reason

    rs = default_ruleset()
    assert set(runnable_calls(rs)) == {n for n, c in rs.calls.items() if c.verify_probe}
    assert unrunnable_reason("paged_decode", 90, rs) is None
    assert unrunnable_reason("trtllm_decode", 90, rs) == "read from source only: trtllm_decode (trtllm-gen) runs only on a 10.x GPU"
    assert unrunnable_reason("trtllm_decode", 103, rs) == "read from source only: verify has no probe for trtllm_decode yet"
    assert unrunnable_reason("cudnn_prefill", 90, rs) == "verify has no probe for call 'cudnn_prefill'"


def test_the_loader_needs_the_default_engines_sizes(tmp_path):
    from attnplan.policy import RulePackError

    with pytest.raises(RulePackError, match="engine_sizes has no entry for the default engine 'vllm'"):
        _edited_ruleset(tmp_path, "engine_sizes:\n  vllm:\n", "engine_sizes:\n  sglang:\n")


def test_every_dtype_of_a_family_has_its_torch_name_and_size():
    # A dtype added to one Literal without its torch name, storage/view or element size fails here,
    # before a plan for it raises KeyError.
    from attnplan.policy import dtypes, make_config
    from attnplan.policy.plan import kv_storage_view_dtypes

    for d in dtypes.QUERY_DTYPES:
        assert dtypes.TORCH_DTYPE[d] in dtypes.TORCH_DTYPES and d in dtypes.ELEMENT_BYTES
    for kv in dtypes.KV_CACHE_DTYPES:
        cfg = make_config(dict(head_dim=128, num_qo_heads=8, kv_cache_dtype=kv))
        storage, view = kv_storage_view_dtypes(cfg)
        assert storage in dtypes.TORCH_DTYPES and view in dtypes.KV_VIEW_DTYPES, kv
        assert cfg.kv_dtype in dtypes.ELEMENT_BYTES, kv
    assert set(dtypes.KV_DTYPES) | {dtypes.KV_AUTO} | set(dtypes.KV_RESOLVES) == set(dtypes.KV_CACHE_DTYPES)
