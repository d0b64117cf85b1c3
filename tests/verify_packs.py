"""A test's own kernel pack, loadable whole: the shipped loader (policy/shipped.py) checks the
rule set as a whole (issue 40 #3: every rule an engine's resolver or verdict names is held by a
pack), so a directory holding only a test's kernel rules no longer loads. Beside the test's pack
go the shipped packs that hold engine rules only (vllm, sglang: policy, which ``verify`` never
probes), so the test's kernel rules stay the only kernel rules of the set."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from attnplan.rules import PACKS_DIR


def _engine_only(pack: Path) -> bool:
    rules = (yaml.safe_load(pack.read_text(encoding="utf-8")) or {}).get("rules", [])
    return bool(rules) and all(r.get("layer") == "engine" for r in rules)


def with_engine_packs(d: Path) -> Path:
    """Copy into ``d`` every shipped pack whose rules are all engine rules; returns ``d``."""
    for pack in sorted(Path(PACKS_DIR).glob("*.yaml")):
        if _engine_only(pack):
            shutil.copy(pack, d / f"engine-{pack.name}")
    return d
