"""The rule set attnplan ships (``attnplan/rules/``), loaded once, and loading another directory's packs.

Its own module, below both ``engine`` (which evaluates) and ``candidates`` (which one candidate's
check reads), so that neither imports the other to find the rules.
"""

from __future__ import annotations

import functools
from pathlib import Path

from .rulepack import RuleSet, check_whole, load_ruleset, pack_paths_in


def _load_whole(packs_dir: Path, backends_file: Path) -> RuleSet:
    """A directory of packs and its catalog, validated as a whole (rulepack.py check_whole): every
    rule the code or the catalog names exists, or the load fails naming it (issue 40 #3)."""
    rs = load_ruleset(pack_paths_in(packs_dir), backends_file)
    check_whole(rs, str(backends_file), str(packs_dir))
    return rs


@functools.lru_cache(maxsize=8)
def _load(packs_dir: str, backends_file: str) -> RuleSet:
    return _load_whole(Path(packs_dir), Path(backends_file))


def default_ruleset() -> RuleSet:
    """The rules shipped in ``rules/`` (loaded once)."""
    from attnplan.rules import BACKENDS_FILE, PACKS_DIR

    return _load(str(PACKS_DIR), str(BACKENDS_FILE))


def load_rules(packs_dir: str | Path, backends_file: str | Path | None = None) -> RuleSet:
    """Load rule packs from another directory (all or nothing; read afresh on every call).
    A missing, empty or oversized directory is an error naming it (fail closed)."""
    from attnplan.rules import BACKENDS_FILE

    return _load_whole(Path(packs_dir), Path(backends_file or BACKENDS_FILE))
