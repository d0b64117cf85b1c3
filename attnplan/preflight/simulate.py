"""``--simulate "B200=8,GB300=4,H100=16"``: plan a cluster you do not have.

Each entry is a catalog device (or a compute capability such as ``10.3``) and a node count;
the nodes are named ``b200-0 .. b200-7``. Facts are declared once per entry and shared, so a
10,000-node simulation plans each (config, device) pair once. A whole model (a ``ModelRequest``)
is planned per layer group and rank, as a node service would plan it.
"""

from __future__ import annotations

import re
import time
from typing import Any, Optional, Sequence

from attnplan.embedded import plan_for   # finished: the sentences render/ writes, as an HTTP node's JSON has them
from attnplan.policy import InvalidInputError, NodeFacts, RuleSet, default_ruleset, simulated_node

from .model import NamedConfig, Outcome

MAX_NODES = 100_000
_CAP = re.compile(r"^\d{1,2}\.\d$")


def parse_spec(spec: str) -> list[tuple[str, int]]:
    """``"B200=8, GB300=4"`` -> ``[("B200", 8), ("GB300", 4)]``; a bare name counts 1."""
    out: list[tuple[str, int]] = []
    total = 0
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        name, sep, count_s = item.rpartition("=") if "=" in item else (item, "", "1")
        name = name.strip()
        if not name:
            raise InvalidInputError("simulate", f"{item!r}: expected DEVICE=COUNT, e.g. B200=8")
        try:
            count = int(count_s.strip(), 10)
        except ValueError:
            raise InvalidInputError("simulate", f"{item!r}: the count must be an integer, got {count_s.strip()!r}") from None
        if count < 1:
            raise InvalidInputError("simulate", f"{item!r}: the count must be at least 1")
        total += count
        if total > MAX_NODES:
            raise InvalidInputError("simulate", f"more than {MAX_NODES} nodes")
        out.append((name, count))
    if not out:
        raise InvalidInputError("simulate", "no nodes: give e.g. \"B200=8,H100=16\"")
    return out


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "node"


def declared(name: str, *, flashinfer_version: Optional[str] = None, cubins: Optional[str] = None) -> NodeFacts:
    if _CAP.match(name):
        return simulated_node(capability=name, flashinfer_version=flashinfer_version, cubins=cubins)
    return simulated_node(name, flashinfer_version=flashinfer_version, cubins=cubins)


def plan_model_locally(nc: NamedConfig, node: NodeFacts, ruleset: Optional[RuleSet]) -> Any:
    """A model request planned here for ``node``, as the ``ModelAnswer`` a node's JSON parses into
    (``model_answers.served_model_answer``: the same object, no JSON round trip)."""
    from attnplan.request import plan_request

    from .model_answers import served_model_answer

    assert nc.request is not None
    rs = ruleset if ruleset is not None else default_ruleset()
    return served_model_answer(plan_request(nc.request, node, rs), node, rs.revision)


def simulate(spec: str, configs: Sequence[NamedConfig], *, flashinfer_version: Optional[str] = None,
             cubins: Optional[str] = None, ruleset: Optional[RuleSet] = None) -> list[Outcome]:
    """Plan every declared node with ``ruleset`` (the shipped rules by default: ``--rules DIR``
    plans the simulated cluster with your own packs)."""
    entries = parse_spec(spec)
    # Validate every device first: a typo is bad input (exit 2), not a node row.
    facts = []
    for name, count in entries:
        try:
            facts.append((name, count, declared(name, flashinfer_version=flashinfer_version, cubins=cubins)))
        except InvalidInputError as exc:
            raise InvalidInputError("simulate", f"{name!r}: {str(exc).split(': ', 1)[-1]}") from None
    out: list[Outcome] = []
    used: dict[str, int] = {}
    for name, count, node in facts:
        t0 = time.perf_counter()
        answers = [plan_for(c.config, node, ruleset=ruleset, engine=c.engine) if c.request is None
                   else plan_model_locally(c, node, ruleset) for c in configs]
        ms = (time.perf_counter() - t0) * 1000
        base = slug(name)
        start = used.get(base, 0)
        used[base] = start + count
        for i in range(start, start + count):
            out.append(Outcome(name=f"{base}-{i}", address=None, answers=answers, elapsed_ms=ms,
                               extra={"declared": name}))
    return out
