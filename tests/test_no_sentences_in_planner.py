"""The planner writes no sentence into an answer (issue 36 item 6: answers carry data; every sentence is rendered
in ``render/``). ``attnplan.policy`` and ``attnplan.model`` leave data (``Note``, ``VerdictSays``: policy/answer.py);
render/notes.py and render/verdict.py word it, and ``finish`` fills an answer's text fields where it leaves for a
caller. Checked two ways: an ast scan of the planner's source for English sentences outside the places that
may hold one (the error tree's messages, citations of engine code, docs), and the finished text of real answers
against the text their data says, for every kind of note the planner leaves."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from attnplan import plan_for, plan_model
from attnplan import policy
from attnplan.model import plan_model as model_layer_plan
from attnplan.policy import simulated_node
from attnplan.policy.answer import EngineBackend, Note, NoteKind, Suggestion, Violation
from attnplan.render import compact_layers, finish, render_answer
from attnplan.render.notes import note_text, notes_text, violation_text

ROOT = Path(__file__).resolve().parents[1] / "attnplan"
MODELS = Path(__file__).parent / "models"
# The planner's modules: everything under policy/, and the model planner.
SCANNED = sorted(ROOT.glob("policy/*.py")) + sorted(ROOT.glob("model/*.py"))

# A sentence: four words or more of prose (letters, a space between each). Code, rule ids, facts, flag lines
# and dotted paths are not: they hold no run of four plain words.
_WORDS = re.compile(r"(?:\b[A-Za-z][a-z'\-]+\b[,;:]?\s+){3}\b[A-Za-z][a-z'\-]+\b")

# Calls whose text is no answer's: the error tree names rule, fact and fix (attnplan/errors.py, policy/errors.py),
# a Field's description documents the JSON, Fact sources say where a fact came from.
_ALLOWED_CALLS = {"Field", "InvalidInputError", "ModelConfigError", "RulePackError", "UnsupportedConfigurationError",
                  "ValueError", "TypeError", "KeyError", "AssertionError", "RuntimeError", "NotImplementedError",
                  "AttnplanError", "InvalidRequestError", "declared", "ConditionError"}
# Names and keywords whose text is a citation of engine or FlashInfer code (data: where a rule or choice is read).
_CITATIONS = {"source", "src", "SOURCE", "description"}

# Modules that still hold sentences, each with why (keep this short; an entry goes when its module is reworded).
# Every module this change made data-only (engine, suggest, jit_names, verdict, answer, model/plan; then engines, api
# and model/hfconfig: the release pin, the engine's own fixes and the config reader's notes are Note kinds; then
# candidates: a trace's page input judged over pages is candidates.PagesJudged, worded by render/trace.py) holds none.
ALLOWED = {
    "policy/facts_catalog.py": "each fact's description, for `attnplan rules` and the docs (like a Field description)",
    "policy/parallel.py": "vLLM's own startup errors, quoted verbatim (the engine's words: data, as a pack's reason)",
    "policy/matrix.py": "the capability matrix document's header (docs/capability-matrix.md), not an answer",
    "policy/devices.py": "a declared fact's provenance (Fact.detail): node facts move to their own package",
    "model/layers.py": "an error's value (_show, for ModelConfigError) and a layer group's `source` (where its kinds "
                       "were read): its notes are data (ModelLayers.notes_says)",
}
# A module in ALLOWED is still scanned for what it was allowed: a new sentence elsewhere fails.
SCANNED = sorted(set(SCANNED) | {ROOT / f for f in ALLOWED})


def _text(node: ast.AST) -> str:
    """A literal's text, with ``{}`` for each formatted value of an f-string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return ""


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def sentences(path: Path) -> list[tuple[int, str]]:
    """The English sentences written in ``path`` outside docstrings, the error tree, citations and Field docs."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            skip.add(id(body[0].value))                                    # a docstring
        inside: list[ast.AST] = []
        if isinstance(node, (ast.Raise, ast.Assert)):
            inside = [node]
        elif isinstance(node, ast.Call) and _call_name(node) in _ALLOWED_CALLS:
            inside = [node]
        elif isinstance(node, ast.Call):
            inside = [k.value for k in node.keywords if k.arg in _CITATIONS]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id in _CITATIONS for t in targets):
                inside = [node.value] if node.value is not None else []
        elif isinstance(node, ast.Dict):
            inside = [k for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant) and k.value in _CITATIONS]
            inside += [v for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant) and k.value in _CITATIONS]
        for n in inside:
            skip.update(id(x) for x in ast.walk(n))
    parts = {id(v) for p in ast.walk(tree) if isinstance(p, ast.JoinedStr) for v in p.values}   # an f-string's pieces
    out = []
    for node in ast.walk(tree):
        if id(node) in skip or id(node) in parts or not isinstance(node, (ast.Constant, ast.JoinedStr)):
            continue
        text = _text(node)
        if text and _WORDS.search(text):
            out.append((node.lineno, text))
    return out


def _found() -> dict[tuple[str, str], int]:
    found = {}
    for path in SCANNED:
        for line, text in sentences(path):
            found[(str(path.relative_to(ROOT)), text)] = line
    return found


def test_the_planner_writes_no_sentence_into_an_answer():
    found = {k: v for k, v in _found().items() if k[0] not in ALLOWED}
    assert not found, "sentences in the planner (word them in render/ from data the answer carries):\n" + "\n".join(
        f"  attnplan/{f}:{line}: {t[:100]!r}" for (f, t), line in sorted(found.items(), key=lambda x: (x[0][0], x[1])))


def test_every_allowed_module_still_holds_a_sentence():
    # an entry whose module holds none any more is dropped from ALLOWED, so that the list says what is left
    assert set(ALLOWED) <= {f for f, _ in _found()}


def test_the_scan_finds_the_sentences_it_is_for(tmp_path):
    # the detector itself, on the planner as it was before issue 36 item 6 (policy/engine.py, policy/suggest.py)
    src = '''
def evaluate(phase, p, d, v):
    notes.append(f"{phase}: no backend candidate for this device")
    msg = f"no page size suits both prefill {p} and decode {d} (one KV cache)"
    words = {"batch_invariant": "turn batch-invariant mode off"}
    raise InvalidInputError("suggestion", f"{p} does not apply to this node: apply a suggestion")
    src = "vllm/platforms/cuda.py get_attn_backend_cls (the selected backend's validate_configuration)"
    ok = Field(None, description="the engine code the choice is read from")
    rule = "vllm.engine-backend"
'''
    tmp = tmp_path / "engine.py"
    tmp.write_text(src)
    said = [t for _, t in sorted(sentences(tmp))]
    assert said == ["{}: no backend candidate for this device", "no page size suits both prefill {} and decode {} (one KV cache)",
                    "turn batch-invariant mode off"]


# -- the finished text is the text the data says --------------------------------------------------------------
LLAMA = {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}
DSV3_RANK = {"num_qo_heads": 16, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}
# (config, device, engine): between them every kind of note a single config's answer carries
CONFIGS = [
    (LLAMA, "H100", None),                                                   # page size chosen, vLLM's own pick
    ({**LLAMA, "page_size": 128}, "H100", None),                             # block_size read as kernel pages of 64
    ({**LLAMA, "head_dim": 64, "kv_cache_dtype": "nvfp4"}, "H100", None),   # rejected: suggestions, no valid backend
    ({**LLAMA, "head_dim": 256, "logits_soft_cap": 30.0}, "B200", None),     # wrong output, fixes from suggestions
    (DSV3_RANK, "B200", None),                                               # vLLM's MLA prefill picked apart
    (LLAMA, "GB300", "flashinfer"),                                          # fallbacks with their rules
    (LLAMA, "H100", "sglang"),                                               # the engine resolver's own lines (text)
]


def _planned(cfg, device, engine):
    return policy.plan_for(cfg, simulated_node(device, **({"flashinfer_version": "0.6.7"} if device == "GB300" else {})),
                           engine=engine)


@pytest.mark.parametrize("cfg,device,engine", CONFIGS)
def test_a_planned_answer_carries_data_and_the_finished_one_its_text(cfg, device, engine):
    a = _planned(cfg, device, engine)
    done = finish(a)
    # the planner leaves no text where it left data ...
    assert a.notes == () and done.notes == notes_text(a.notes_says)
    for x, y in zip(a.suggestions, done.suggestions):
        assert x.message == "" and x.says is not None and y.message == note_text(x.says) != ""
    for eb in [a.engine_backend, *(a.engine_phases or {}).values()]:
        if isinstance(eb, EngineBackend) and eb.says is not None:
            assert eb.note == "" and finish(eb).note == note_text(eb.says) != ""
    # ... and the finished answer is the one a caller gets, and what its table and JSON show
    assert plan_for(cfg, simulated_node(device, **({"flashinfer_version": "0.6.7"} if device == "GB300" else {})),
                    engine=engine) == done
    table = render_answer(a)
    assert all(f"  - {n}" in table for n in done.notes)
    data = done.to_json()
    assert data["notes"] == list(done.notes) and [Note.model_validate(n) for n in data.get("notes_says", [])] == list(a.notes_says)
    # finishing is idempotent: a finished answer is handed back as it is
    assert finish(done) is done


def test_the_kinds_the_configs_cover():
    kinds = {n.kind for c in CONFIGS for n in _planned(*c).notes_says}
    kinds |= {eb.says.kind for c in CONFIGS for a in [_planned(*c)]
              for eb in [a.engine_backend, *(a.engine_phases or {}).values()] if eb is not None and eb.says is not None}
    kinds |= {s.says.kind for c in CONFIGS for s in _planned(*c).suggestions}
    assert kinds >= {"text", "block-size", "fallback", "page-size-chosen", "engine-selects", "mla-prefill", "suggestion"}


def test_fallback_notes_quote_the_rules_that_skipped_a_backend():
    a = _planned(LLAMA, "GB300", "flashinfer")
    fb = [n for n in a.notes_says if n.kind == "fallback"]
    assert fb and {(n.phase, n.backend, n.used) for n in fb} == {(f.phase, f.skipped, f.used) for f in a.fallbacks}
    for n in fb:
        text = note_text(n)
        assert text.startswith(f"{n.phase}: {n.backend} skipped (") and text.endswith(f"); using {n.used}")
        assert all(f"[{rule}] {message}" in text for rule, message in n.why)


@pytest.mark.parametrize("name", ["qwen3-next-80b-a3b-instruct", "falcon-h1-7b-instruct", "gemma-3-27b-it"])
def test_a_models_notes_are_data_until_finished(name):
    m = model_layer_plan(json.loads((MODELS / f"{name}.json").read_text()), simulated_node("H100"))
    assert m.notes == () and m.notes_says
    done = plan_model(json.loads((MODELS / f"{name}.json").read_text()), simulated_node("H100"))
    assert done.notes == notes_text(m.notes_says)
    hybrid = m.kv_cache_groups.raised_attention_page_bytes is not None
    assert hybrid == any(n.kind == "hybrid-kv-cache" for n in m.notes_says) == (name != "gemma-3-27b-it")
    if hybrid:
        kv = m.kv_cache_groups
        n, = kv.notes_says
        assert (n.block, n.page_bytes, n.state_bytes, n.page) == (kv.block_size, kv.raised_attention_page_bytes,
                                                                 kv.recurrent_state_bytes, kv.kernel_page_size)
        assert done.kv_cache_groups.notes == (note_text(n),)
    for g, h in zip(m.layer_groups, done.layer_groups):
        assert g.notes == () and h.notes == notes_text(g.notes_says)
        if g.status == "not_served":
            assert [x.kind for x in g.notes_says] == ["group-not-served"]
            assert any(n.kind == "not-served" and n.group_kind == g.kind for n in m.notes_says)


def test_a_chunked_groups_violation_is_worded_from_its_data():
    data = json.loads((MODELS / "llama-4-scout-17b-16e-instruct.json").read_text())
    data["text_config"]["attention_chunk_size"] = 8200      # no KV block size divides it
    m = model_layer_plan(data, simulated_node("H100"))
    v, = [v for g in m.layer_groups for v in g.violations if v.rule == "chunked-local.block-size"]
    assert v.message == "" and v.says.kind == "chunked-block" and (v.says.chunk, v.says.block) == (8200, v.observed)
    done = finish(v)
    assert done.message.startswith("chunked local attention splits requests into 8200-token virtual requests")
    assert done.required == f"a KV block size that divides attention_chunk_size 8200" and done.fix
    # the model's verdict quotes it, worded from the same data
    assert m.verdict.says.detail_says == v.says
    assert plan_model(data, simulated_node("H100")).verdict.message.endswith(done.message)


def test_violations_and_suggestions_built_in_code_carry_their_facts():
    # the cross-phase page clash and the model-level block size: no ordinary config reaches them on the shipped
    # rules, so their data is built here and worded as the planner builds it (policy/engine.py, model/plan.py)
    clash = Violation(rule="page-size", phase="both", message="",
                      says=Note(kind="page-size-clash", prefill="fa3", decode="xqa", prefill_pages=(16,),
                                decode_pages=(32, 64)))
    done = finish(clash)
    assert done.message == "no page size suits both prefill fa3 and decode xqa (one KV cache)"
    assert done.required == "a size both fa3 (16,) and xqa (32, 64) take"
    block = finish(Violation(rule="page-size", phase="both", message="",
                             says=Note(kind="model-page-size", sizes=((0, (16, 32)), (1, (64,))))))
    assert block.message.endswith(": layers 0.. [16, 32]; layers 1.. [64]")
    s = finish(Suggestion(field="flashinfer_cubin", value="0.9.9", target="node", message="",
                          says=Note(kind="suggestion", field="flashinfer_cubin", value="0.9.9", prefill="a", decode="b",
                                    on_pypi=False, wheel_index="https://x", pypi_max="0.6.13")))
    assert s.message.startswith("install flashinfer-cubin 0.9.9 from FlashInfer's wheel index (https://x; the package "
                                "index stops at 0.6.13)") and s.message.endswith(": then prefill runs a, decode runs b")


def test_every_note_kind_is_worded():
    import typing

    for kind in typing.get_args(NoteKind):
        assert isinstance(note_text(Note(kind=kind, text="x", name="llama4_text", field="page_size")), str)
    assert set(violation_text(Note(kind="jit-name-clash", call="sink", name="n", named_by=("a",), differ=("b",),
                                   builds=(((0,), (1,)), ((1,), (2,))), source="s"))) == {"message", "required", "fix"}


def test_the_engines_display_name_comes_from_the_rules():
    # render/ keeps no table of engine names: the verdict carries the rule set's display name (backends.yaml)
    rs = policy.default_ruleset()
    for engine, device in (("vllm", "H100"), ("sglang", "H100"), ("flashinfer", "H100")):
        v = policy.plan_for(LLAMA, simulated_node(device), engine=engine).verdict
        layer = rs.engines[engine]
        assert v.says.display == layer.display and v.says.adapter == layer.adapter
        said = finish(v).message
        assert said.startswith(f"attnplan's {layer.display} adapter" if layer.adapter else layer.display)
    import attnplan.render.verdict as rv
    assert not hasattr(rv, "WHO")


def test_a_fix_made_of_a_suggestion_carries_its_words():
    a = plan_for({**LLAMA, "head_dim": 64, "kv_cache_dtype": "nvfp4"}, simulated_node("H100"))
    made = [f for f in a.verdict.fixes if f.args is None or f.args.startswith("--kv-cache-dtype")]
    assert made and all(f.change for f in made)
    assert {f.change for f in made} <= {s.message for s in a.suggestions}


# -- what the last sentences of the planner became (issue 36 item 6) ---------------------------------------------
def test_the_config_readers_notes_are_data():
    # model/hfconfig.py: Llama-4-Scout's integer attn_temperature_tuning is refused by transformers' class, so
    # attnplan's own parser reads it and names the fields it does not read: both as data, worded in render/
    from attnplan.model.hfconfig import model_info

    pytest.importorskip("transformers")
    info = model_info(json.loads((MODELS / "llama-4-scout-17b-16e-instruct.json").read_text()), "scout.json")
    refused, unread = info.notes_says
    assert (refused.kind, refused.name, unread.kind, unread.source) == ("config-class-refused", "llama4",
                                                                        "unread-fields", "scout.json")
    assert note_text(refused) == (f"transformers' llama4 config class refused this config.json ({refused.value}); "
                                  "read by attnplan's own parser") and refused.value
    assert note_text(unread) == ("scout.json: fields not read by attnplan's parser (install transformers to read them "
                                 "as the model does): " + ", ".join(unread.named_by)) and "attn_scale" in unread.named_by


def test_the_release_pin_note_is_data():
    # policy/engines.py release_node: a node that declares another FlashInfer than the release pins is told so
    rs = policy.default_ruleset()
    a = policy.plan_for(LLAMA, simulated_node("H100", flashinfer_version="0.7.2.post1"), engine="vllm==0.32.0")
    n, = [n for n in a.notes_says if n.kind == "release-pin"]
    pin = rs.engines["vllm"].releases["0.32.0"]
    assert (n.engine.name, n.engine.version, n.pin, n.installed, n.source) == ("vllm", "0.32.0", pin.flashinfer,
                                                                               "0.7.2.post1", pin.source)
    assert finish(a).notes[0] == note_text(n) == (
        f"vllm 0.32.0 pins flashinfer-python=={pin.flashinfer} ({pin.source}); this node has 0.7.2.post1: the kernel "
        "rules answer for the installed 0.7.2.post1, a combination vllm 0.32.0's release was not built against")


def _rules_with(tmp_path, edit):
    import yaml

    from attnplan.policy.rulepack import load_ruleset

    rules = ROOT / "rules"
    data = yaml.safe_load((rules / "backends.yaml").read_text())
    edit(data)
    out = tmp_path / "backends.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_ruleset(sorted((rules / "packs").glob("*.yaml")), out)


def test_the_engines_own_fixes_are_data_named_by_the_rules(tmp_path):
    # policy/api.py fixes_for: vLLM's own backends and its use_trtllm_attention, worded with the display name the
    # rule set gives the engine (backends.yaml engines.vllm.display), never a literal
    cfg = {**LLAMA, "head_dim": 256, "logits_soft_cap": 30.0}
    for rs, display in ((policy.default_ruleset(), "vLLM"),
                        (_rules_with(tmp_path, lambda d: d["engines"]["vllm"].update(display="vLLM-X")), "vLLM-X")):
        v = policy.plan_for(cfg, simulated_node("B200"), ruleset=rs).verdict
        own = [f for f in v.fixes if f.says is not None and f.says.kind in ("run-backend", "trtllm-off")]
        assert {f.says.kind for f in own} == {"run-backend", "trtllm-off"} and all(f.change == "" for f in own)
        for f, done in zip(own, (finish(f) for f in own)):
            assert f.says.engine.display == display
            if f.says.kind == "run-backend":
                assert f.args == f"--attention-backend {f.says.backend}" and done.change == f"run {display}'s {f.says.backend}"
            else:
                assert done.change == f"keep {display}'s FlashInfer off trtllm-gen / XQA (its native wrappers run)"


def test_the_mla_prefill_flag_is_data(tmp_path):
    # policy/engine.py: the flags that run FlashInfer's MLA prefill are backends.yaml engines.vllm.flags data
    from attnplan.policy.errors import RulePackError

    flag = "--attention-config '{\"mla_prefill_backend\": \"X\"}'"
    for rs in (policy.default_ruleset(),
               _rules_with(tmp_path, lambda d: d["engines"]["vllm"]["flags"].update(mla_prefill_flashinfer=flag))):
        a = policy.plan_for(DSV3_RANK, simulated_node("B200"), ruleset=rs)
        pre = a.engine_phases["prefill"]
        assert not pre.runs_flashinfer and pre.says.args == rs.engines["vllm"].flags.mla_prefill_flashinfer
        assert finish(pre).note.endswith(f"runs with {pre.says.args}")
    assert flag in finish(pre).note
    with pytest.raises(RulePackError, match="mla_prefill_flashinfer"):
        _rules_with(tmp_path, lambda d: d["engines"]["vllm"]["flags"].pop("mla_prefill_flashinfer"))


def test_explains_engine_rules_come_from_the_rules(tmp_path):
    # render/tables.py: whose engine rules an explanation evaluates, from the rule set (no table of names in render)
    from attnplan.render.tables import engine_rules_words

    rs = policy.default_ruleset()
    assert {n: engine_rules_words(n, rs) for n in rs.engines} == {
        "vllm": "vLLM", "sglang": "SGLang's, applied by its resolver", "flashinfer": "none"}
    renamed = _rules_with(tmp_path, lambda d: d["engines"]["sglang"].update(display="SGL"))
    assert engine_rules_words("sglang", renamed) == "SGL's, applied by its resolver"
    import attnplan.render.tables as rt
    assert not hasattr(rt, "_ENGINE_RULES")


def test_a_groups_own_note_is_labelled_by_render():
    # model/plan.py all_notes_says: a note one attention group has (not every one) carries its group's layers as
    # data; render/notes.py words "layers X: <note>"
    data = json.loads((MODELS / "gemma-2-9b.json").read_text())
    node = simulated_node("B200")
    m = model_layer_plan(data, node, engine="flashinfer", overrides={"kv_cache_dtype": "fp8"})
    said = m.all_notes_says()
    own = [n for n in said if n.group_layers]
    assert own and m.all_notes() == ()          # data until finished
    groups = {compact_layers(g.layers, m.num_layers): g for g in m.attention_groups}
    for n in own:
        g = groups[n.group_layers]
        bare = n.model_copy(update={"group_layers": None})
        assert bare in g.notes_says and not all(bare in h.notes_says for h in m.attention_groups)
        assert note_text(n) == f"layers {n.group_layers}: {note_text(bare)}"
    done = plan_model(data, node, engine="flashinfer", overrides={"kv_cache_dtype": "fp8"})
    assert done.all_notes() == notes_text(said) and done.to_json()["notes"] == list(notes_text(said))


# -- a trace's page input: the planner leaves the pages it judged, render/trace.py words them ------------------------
@pytest.mark.parametrize("cfg,device,engine,block", [
    (LLAMA, "B200", "flashinfer", None),               # no page given: judged over every page
    ({**LLAMA, "page_size": 32}, "B200", "vllm", 32),  # vLLM's block, read through the kernel pages dividing it
    ({**LLAMA, "kv_cache_dtype": "fp8"}, "H100", "vllm", None),
])
def test_a_trace_s_page_input_is_data_and_render_words_it(cfg, device, engine, block):
    from attnplan.policy import evaluate_candidate, explain, make_config
    from attnplan.policy.candidates import PagesJudged
    from attnplan.render import render_explain
    from attnplan.render.trace import entry_inputs

    a = _planned(cfg, device, engine)
    judged = [e for e in a.trace if isinstance(e.inputs.get("config.page_size"), PagesJudged)]
    assert judged, "no page-reading check judged over pages"
    node = simulated_node(device)
    config = make_config(cfg)
    for e in judged:
        pj = e.inputs["config.page_size"]
        assert pj.block == block
        if block is None:   # the pages that pass are the candidate's own valid pages
            assert pj.passing == evaluate_candidate(config, node, e.phase, e.backend, engine=engine).pages
    # the finished answer (what every surface gets) carries the words, in the trace's JSON too
    done = finish(a)
    worded = {(e.rule, e.check, e.phase, e.backend): e.inputs["config.page_size"] for e in done.trace
              if "config.page_size" in e.inputs}
    for e in judged:
        pj = e.inputs["config.page_size"]
        pages = ", ".join(map(str, pj.passing)) or "none"
        want = (f"unset (valid: {pages})" if block is None
                else f"block {block} (kernel pages dividing it that pass: {pages})")
        assert worded[(e.rule, e.check, e.phase, e.backend)] == want
    dumped = [t["inputs"] for t in done.to_json()["trace"]]
    assert all(isinstance(v, str) for i in dumped for v in i.values())
    assert finish(done) is done
    # explain's grid: the same words in the table, from the cells' data
    ex = explain(config, node, engine=engine)
    cells = [t for t in ex.cells.values() if isinstance(t.inputs.get("config.page_size"), PagesJudged)]
    assert cells
    text = render_explain(ex)
    words = {entry_inputs(t)["config.page_size"] for t in cells}
    assert all(isinstance(w, str) for w in words) and "PagesJudged" not in text
    assert any(f"config.page_size={w}" in text for w in words)   # (a rule's facts are shown for its first cell)


def test_explain_json_words_the_page_input(capsys):
    """``explain --json`` (cli/plan.py ``_grid_json``) prints the page input in the trace's words, not the data object."""
    from attnplan.cli.main import main

    rc = main(["explain", "--device", "B200", "--engine", "flashinfer", "--head-dim", "128", "--num-heads", "32",
               "--num-kv-heads", "8", "--json"])
    assert rc == 0
    cells = json.loads(capsys.readouterr().out)["cells"]
    pages = [c["inputs"]["config.page_size"] for c in cells if "config.page_size" in c["inputs"]]
    assert pages and all(isinstance(p, str) for p in pages)
    assert any(p.startswith("unset (valid: ") for p in pages)
