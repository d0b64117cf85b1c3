"""attnplan's answer for a case, field by field against vLLM's, and the named exceptions.

Fields (issue 21): ``default_backend`` (vLLM's pick without --attention-backend), ``accept`` (does
vLLM serve the case under the forced FlashInfer backend; a silently dropped soft cap counts as a
refusal: attnplan answers those with a rejection, rule ``vllm.softcap-dropped``), and where both
serve it: ``prefill`` / ``decode`` kernel, ``q_prefill`` / ``q_decode`` (query dtype per phase),
``kernel_page`` (the KV page the kernels see).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from attnplan.errors import RulePackError, SourceNotFoundError

FIELDS = ("default_backend", "accept", "prefill", "decode", "q_prefill", "q_decode", "kernel_page")
PLAN_FIELDS = FIELDS[2:]
EXCEPTIONS_FILE = Path(__file__).with_name("exceptions.yaml")

# vLLM's MLA prefill backend names -> the backend an attnplan plan names (None: not a FlashInfer kernel).
MLA_PREFILL = {"TRTLLM_RAGGED": "trtllm-ragged", "FLASHINFER": "fa2"}


def node_for(case: Any) -> Any:
    """The node a case is planned on: its capability, cubins and batch invariance, and the FlashInfer the oracle's
    vLLM side runs (the installed flashinfer, 0.7.2.post1) declared - so a release that pins another FlashInfer
    (0.31.0 / 0.32.0 pin 0.7.0.post1; policy/engines.py release_node) is judged on its engine layer over the same
    kernel layer as vLLM's code ran with, not on a kernel layer the oracle did not run."""
    from attnplan.policy import simulated_node

    return simulated_node(capability=f"{case.capability // 10}.{case.capability % 10}", cubins=case.artifactory,
                          batch_invariant=case.batch_invariant, flashinfer_version=_flashinfer_version())


@functools.lru_cache(maxsize=1)
def _flashinfer_version() -> Optional[str]:
    import importlib.metadata

    try:
        return importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        return None


# Candidate rules to judge instead of the shipped ones (python -m attnplan.oracle.vllm --rules/--backends): a
# rules change for a vLLM release is run through the oracle before it ships. Environment variables, so that the
# process running a release's code (vllm.py --release) judges the same rules.
RULES_ENV, BACKENDS_ENV = "ATTNPLAN_ORACLE_RULES", "ATTNPLAN_ORACLE_BACKENDS"


def ruleset() -> Any:
    """The rules attnplan's side is judged with: the shipped ones, or $ATTNPLAN_ORACLE_RULES (a packs directory)
    and $ATTNPLAN_ORACLE_BACKENDS (a backends.yaml), each defaulting to the shipped one."""
    import os

    from attnplan.policy import default_ruleset
    from attnplan.rules import BACKENDS_FILE, PACKS_DIR

    packs, backends = os.environ.get(RULES_ENV), os.environ.get(BACKENDS_ENV)
    if not packs and not backends:
        return default_ruleset()
    return _candidate_rules(str(Path(packs or PACKS_DIR).resolve()), str(Path(backends or BACKENDS_FILE).resolve()))


@functools.lru_cache(maxsize=4)
def _candidate_rules(packs: str, backends: str) -> Any:
    from attnplan.policy import load_rules

    return load_rules(packs, backends)   # read once per run: every case is judged with the same rules


def attnplan_engine(release: Optional[str] = None) -> tuple[str, Optional[str]]:
    """The ``--engine`` attnplan is asked for against vLLM ``release`` (None: the newest modelled one), and a
    note when attnplan does not model that release: then the newest modelled release's answer is compared
    (issue 42: the differences a release's layer must model show before its data lands), never a crash."""
    if release is None:
        return "vllm", None
    from attnplan.errors import InvalidInputError
    from attnplan.policy import parse_engine

    rs = ruleset()
    try:
        return str(parse_engine(f"vllm=={release}", rs)), None
    except InvalidInputError as exc:
        newest = rs.engines["vllm"].versions[-1]
        return f"vllm=={newest}", (f"attnplan does not model vLLM {release} ({exc}): vLLM {release}'s code is "
                                   f"compared with attnplan's vllm=={newest} layer")


def attnplan_fields(case: Any, engine: str = "vllm") -> dict[str, Any]:
    from attnplan.policy import plan_for

    answer = plan_for(case.attnplan_config(), node_for(case), ruleset=ruleset(), engine=engine)
    eb = getattr(answer, "engine_backend", None)
    out: dict[str, Any] = {"default_backend": eb.name if eb is not None else None,
                           "accept": "ok" if answer.ok else "refused",
                           "rules": sorted({v.rule for v in answer.violations})}
    p = answer.plan
    # an MLA model's prefill is the engine's own backend where that is not FlashInfer (vLLM's default FLASH_ATTN)
    own = (getattr(answer, "engine_phases", None) or {}).get("prefill") if case.mla else None
    out.update(prefill=(own.name if own is not None and not own.runs_flashinfer else p.prefill.backend) if p else None, decode=p.decode.backend if p else None,
               q_prefill=p.prefill.query_dtype if p else None, q_decode=p.decode.query_dtype if p else None,
               kernel_page=p.kv_cache.page_size if p else None)
    return out


def expected_fields(case: Any, truth: dict[str, Any]) -> dict[str, Any]:
    """vLLM's outcome in attnplan's vocabulary."""
    exp = dict(truth)
    if truth.get("softcap_dropped"):
        exp["accept"] = "refused"
    if case.mla and truth["accept"] == "ok":
        exp["prefill"] = MLA_PREFILL.get(truth["prefill"], truth["prefill"])
    return exp


@dataclass
class Exception_:
    id: str
    reason: str
    fields: tuple[str, ...]
    match: dict[str, Any]
    source: str = ""
    example: Optional[dict[str, Any]] = None

    def matches(self, case: Any, exp: dict[str, Any], got: dict[str, Any]) -> bool:
        for key, want in self.match.items():
            scope, _, name = key.partition(".")
            value = (case.as_dict() if scope == "case" else exp if scope == "vllm" else got).get(name)
            if isinstance(want, dict) and "any_of" in want:
                # a list-valued outcome (attnplan.rules): at least one of these is in it
                if not set(value or ()) & set(want["any_of"]):
                    return False
            elif isinstance(want, list):
                if value not in want:
                    return False
            elif isinstance(want, dict) and ("min" in want or "max" in want or "not" in want):
                if "not" in want and value in (want["not"] if isinstance(want["not"], list) else [want["not"]]):
                    return False
                if "min" in want and (value is None or value < want["min"]):
                    return False
                if "max" in want and (value is None or value > want["max"]):
                    return False
            elif value != want:
                return False
        return True


def load_exceptions(path: Path = EXCEPTIONS_FILE) -> list[Exception_]:
    """The named exceptions; a missing file is an error, never "no exceptions" (issue 39: an installed
    oracle without its exceptions file would count every named disagreement as a failure, or - read as
    empty - hide why)."""
    if not path.is_file():
        raise SourceNotFoundError(f"{path}: the oracle's named exceptions are missing (they ship as package data "
                                  f"of attnplan.oracle)")
    data = yaml.safe_load(path.read_text())
    out = []
    for raw in (data or {}).get("exceptions", []):
        fields = tuple(raw["fields"])
        unknown = set(fields) - set(FIELDS)
        if unknown:
            raise RulePackError(str(path), f"names unknown fields {sorted(unknown)}; an exception matches on "
                                f"{', '.join(FIELDS)}", rule=raw["id"])
        out.append(Exception_(raw["id"], raw["reason"], fields, dict(raw["match"]), raw.get("source", ""),
                              raw.get("example")))
    return out


@dataclass
class Row:
    case: Any
    exp: dict[str, Any]
    got: dict[str, Any]
    verdicts: dict[str, str] = field(default_factory=dict)   # field -> agree | differ | excepted:<id> | n/a
    error: Optional[str] = None


def judge(case: Any, truth: dict[str, Any], got: dict[str, Any], exceptions: list[Exception_]) -> Row:
    exp = expected_fields(case, truth)
    row = Row(case, exp, got)
    both_ok = exp["accept"] == "ok" and got["accept"] == "ok"
    for f in FIELDS:
        if f in PLAN_FIELDS and not both_ok:
            row.verdicts[f] = "n/a"
            continue
        if f in ("q_prefill", "q_decode") and case.mla:
            row.verdicts[f] = "n/a"   # vLLM's MLA query dtype is not read by the oracle yet
            continue
        if exp.get(f) == got.get(f):
            row.verdicts[f] = "agree"
            continue
        hit = next((e for e in exceptions if f in e.fields and e.matches(case, exp, got)), None)
        row.verdicts[f] = f"excepted:{hit.id}" if hit else "differ"
    if exp.get("softcap_dropped") and got["accept"] == "refused" and "vllm.softcap-dropped" not in got["rules"]:
        row.verdicts["accept"] = "differ"   # refused, but not for the reason vLLM would go wrong
    return row
