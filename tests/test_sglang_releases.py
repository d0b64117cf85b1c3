"""Issue 42: the SGLang layer per release, held by each release's own code through the oracle
(attnplan/oracle/sglang.py ``--release X``): SGLang 0.5.21, 0.5.22 and 0.5.23's selection functions, taken out of
each release's sglang/srt (``make setup`` unpacks them: .venv/sglang-src for 0.5.23, .venv/releases/sglang-X for
the older ones), run on a seeded sample against attnplan asked for ``sglang==X``.

attnplan models each release (backends.yaml ``engines.sglang`` items with ``versions:``, the sglang pack's range
and per-rule ranges); an unmodelled release would be compared against the newest modelled one, said so.
"""

from __future__ import annotations

import pytest
from packaging.version import Version

from attnplan.oracle import sglang as o

SAMPLE, SEED = 3000, 42


def _src_or_skip(release: str):
    src = o.release_src(release)
    if not (src / "arg_groups").is_dir():
        pytest.skip(f"SGLang {release}'s sglang/srt is not at {src} (make setup unpacks it)")
    return src


def _group(group: str) -> list[o.Case]:
    return [c for c in o.release_cases() if o.release_group(c) == group]


@pytest.mark.parametrize("release", o.RELEASES)
def test_each_release_runs_its_own_functions_and_agrees_on_the_core_space(release):
    """The core configuration space (cases()): every release's own functions against attnplan. SGLang did not
    change these paths between 0.5.21 and 0.5.23 (a full run of all 552,896 agrees for each), so the 0.5.23
    tables hold them for all three."""
    src = _src_or_skip(release)
    rep = o.compare(sample=SAMPLE, seed=SEED, release=release)
    assert rep["release"] == release and rep["src"] == str(src)
    assert rep["disagreements"] == []
    assert all(v["of"] > 0 and v["agree"] == v["of"] for v in rep["agreement"].values())
    assert rep["agreement"]["refused"]["of"] + rep["excepted"] == SAMPLE


@pytest.mark.parametrize("release", o.RELEASES)
def test_the_extraction_reads_each_releases_own_code(release):
    """Not one source read three times: the functions a release added or removed are there exactly in the
    releases that have them (OPTIONAL / REMOVED), and the compiled code names its release."""
    src = _src_or_skip(release)
    ns = o._sglang(str(src))
    assert ns["get_default_attn_backend"].__code__.co_filename == f"sglang-{release}-functions"
    v = Version(release)
    assert ("_forces_eagle_topk_one" in ns) == (v >= Version("0.5.23"))
    assert ("is_sm110_supported" in ns) == (v >= Version("0.5.22"))
    assert ("create_tokenspeed_mla_backend" in ns) == (v <= Version("0.5.22"))


def test_dflash_on_sm100_is_where_0_5_22_and_0_5_23_differ():
    """model_override_base.py get_default_attn_backend: 0.5.23 counts DFLASH as a declared top-k
    (_forces_eagle_topk_one) and picks trtllm_mha on SM100; 0.5.22 falls through to flashinfer."""
    ns22, ns23 = (o._sglang(str(_src_or_skip(r))) for r in ("0.5.22", "0.5.23"))
    c = o.Case(100, "12.8", False, False, False, None, None, None, None, "auto", None, False, None, algorithm="DFLASH")
    assert (o._run_case(ns22, c)["prefill"], o._run_case(ns23, c)["prefill"]) == ("flashinfer", "trtllm_mha")


@pytest.mark.parametrize("release", o.RELEASES)
def test_attnplan_answers_for_the_release_asked(release):
    _src_or_skip(release)
    tables, modelled, note = o.attnplan_tables(release)
    assert (modelled, note) == (release, None)


@pytest.mark.parametrize("release", o.RELEASES)
def test_dflash_default_backend_per_release(release):
    """DFLASH with no top-k on SM100: trtllm_mha / fa4 from 0.5.23, flashinfer / triton before
    (the per-release DFLASH item (versions) of choices.default)."""
    _src_or_skip(release)
    rep = o.compare(release=release, pool=_group("dflash"))
    assert rep["cases"] > 0 and rep["disagreements"] == []


@pytest.mark.parametrize("release", o.RELEASES)
def test_tokenspeed_mla_per_release(release):
    _src_or_skip(release)
    rep = o.compare(release=release, pool=_group("tokenspeed_mla"))
    assert rep["cases"] > 0 and rep["disagreements"] == []


@pytest.mark.parametrize("release", o.RELEASES)
def test_gemma4_per_release(release):
    _src_or_skip(release)
    rep = o.compare(release=release, pool=_group("gemma4"))
    assert rep["cases"] > 0 and rep["disagreements"] == []


def test_cli_names_the_release_and_what_attnplan_compared_against(capsys):
    release = o.RELEASES[0]
    _src_or_skip(release)
    rc = o.main(["--release", release, "--sample", "200", "--seed", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and f"SGLang {release} oracle" in out
    modelled = o.attnplan_tables(release)[1]
    assert f"against attnplan's sglang=={modelled}" in out
    assert ("note:" in out) == (modelled != release)


def test_an_unknown_release_is_refused():
    from attnplan.errors import SourceNotFoundError

    with pytest.raises(SourceNotFoundError, match="0.5.20"):
        o.release_src("0.5.20")
