"""``python -m attnplan.oracle.vllm``: attnplan's --engine vllm answers against vLLM's own code.

Prints agreement per field and per capability (``--json`` for the figures as data) and the first
disagreements with both sides. Exit status 1 when a field disagrees outside the named exceptions.
A new vLLM version: install it, run this, read the disagreements, edit the rules (or name an exception).

``--release X`` runs vLLM X's code (issue 42): the release's Python files unpacked by
scripts/vllm_releases.py into .venv/releases/vllm-X (or $ATTNPLAN_VLLM_RELEASES/vllm-X), put first on
PYTHONPATH in a process of its own (vLLM is imported once per process, with its platform patched), and
compared with attnplan's ``--engine vllm==X``. Without it: the installed vLLM (0.33.0) against ``--engine vllm``.
"""

from __future__ import annotations

import argparse
import collections
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from attnplan.errors import SetupError

from .cases import CAPABILITIES, generate
from .compare import FIELDS, Row, attnplan_engine, attnplan_fields, judge, load_exceptions

# Set in the process that runs a release's code (vllm_env checks that the vLLM imported is that release).
RELEASE_ENV = "ATTNPLAN_ORACLE_VLLM_RELEASE"
RELEASES_ENV = "ATTNPLAN_VLLM_RELEASES"


def _truth() -> Any:
    """vllm_truth, imported on first use: importing it imports vLLM with its platform patched, so it must
    come before anything else imports vLLM, and only in the process that runs the asked-for release."""
    from . import vllm_truth

    return vllm_truth


def releases_dir() -> Path:
    """Where scripts/vllm_releases.py unpacks releases: $ATTNPLAN_VLLM_RELEASES, else the checkout's .venv/releases."""
    env = os.environ.get(RELEASES_ENV)
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".venv" / "releases"


def available_releases() -> list[str]:
    """The vLLM releases this oracle can run: those unpacked under releases_dir(), and the installed one."""
    out = {p.name.removeprefix("vllm-") for p in releases_dir().glob("vllm-*") if (p / "vllm" / "__init__.py").is_file()}
    try:
        out.add(importlib.metadata.version("vllm"))
    except importlib.metadata.PackageNotFoundError:
        pass
    return sorted(out, key=lambda v: tuple(int(x) if x.isdigit() else 0 for x in v.split(".")))


def _run_release(release: str, argv: list[str]) -> Optional[int]:
    """Run this command again in a process whose vLLM is ``release`` (its unpacked code first on PYTHONPATH);
    None when this process already runs it (asked before, or the installed vLLM is that release)."""
    if os.environ.get(RELEASE_ENV) == release:
        return None
    path = releases_dir() / f"vllm-{release}"
    if not (path / "vllm" / "__init__.py").is_file():
        try:
            installed = importlib.metadata.version("vllm")
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed == release:
            return None
        raise SetupError(f"vLLM {release}'s code is not at {path} (scripts/vllm_releases.py {release} unpacks it; "
                         f"available: {', '.join(available_releases()) or 'none'})")
    env = {**os.environ, RELEASE_ENV: release,
           "PYTHONPATH": os.pathsep.join([str(path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, "-m", "attnplan.oracle.vllm", *argv], env=env).returncode


def run(configs: int, seed: int, capabilities: tuple[int, ...] = CAPABILITIES, engine: str = "vllm",
        cases: Optional[list[Any]] = None) -> list[Row]:
    """Every generated case (or ``cases``, as given), judged: vLLM's code (the release this process imported)
    against attnplan's ``engine`` layer (compare.attnplan_engine)."""
    vllm_truth = _truth()
    exceptions = load_exceptions()
    rows = []
    for case in (cases if cases is not None else generate(configs, seed, capabilities)):
        truth = vllm_truth.truth(case)
        try:
            got = attnplan_fields(case, engine)
        except Exception as exc:   # an attnplan error is a disagreement on every field, never a crash
            got = {f: f"error: {exc}" for f in FIELDS} | {"rules": []}
        rows.append(judge(case, truth, got, exceptions))
    return rows


def examples(engine: str = "vllm") -> list[dict[str, Any]]:
    """Each named exception's own example: the fields where vLLM and attnplan differ there (judged with
    no exceptions), and whether that exception covers every one of them (it must, and there must be one)."""
    from .cases import Case

    vllm_truth = _truth()
    out = []
    for e in load_exceptions():
        if e.example is None:
            out.append({"id": e.id, "differ": [], "covered": False, "why": "no example"})
            continue
        case = Case(**e.example)
        truth = vllm_truth.truth(case)
        row = judge(case, truth, attnplan_fields(case, engine), [])
        differ = [f for f, v in row.verdicts.items() if v == "differ"]
        covered = bool(differ) and all(f in e.fields for f in differ) and e.matches(case, row.exp, row.got)
        out.append({"id": e.id, "differ": differ, "covered": covered,
                    "vllm": {f: row.exp.get(f) for f in differ}, "attnplan": {f: row.got.get(f) for f in differ}})
    return out


def summary(rows: list[Row]) -> dict[str, Any]:
    per_field: dict[str, collections.Counter] = {f: collections.Counter() for f in FIELDS}
    per_cap: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    per_exc: collections.Counter = collections.Counter()
    for r in rows:
        for f, v in r.verdicts.items():
            kind = v.split(":")[0]
            per_field[f][kind] += 1
            per_cap[r.case.capability][kind] += 1
            if kind == "excepted":
                per_exc[v.split(":", 1)[1]] += 1

    def pct(c: collections.Counter) -> Optional[float]:
        judged = c["agree"] + c["differ"]
        return round(100.0 * c["agree"] / judged, 2) if judged else None

    return {
        "cases": len(rows),
        "fields": {f: {**dict(c), "agreement_pct": pct(c)} for f, c in per_field.items()},
        "capabilities": {f"{k // 10}.{k % 10}": {**dict(c), "agreement_pct": pct(c)} for k, c in sorted(per_cap.items())},
        "exceptions": dict(per_exc),
        "disagreements": sum(c["differ"] for c in per_field.values()),
    }


def _table(title: str, data: dict[str, dict[str, Any]]) -> str:
    lines = [f"{title:<16} {'agree':>7} {'differ':>7} {'excepted':>9} {'n/a':>6} {'agree %':>8}"]
    for k, c in data.items():
        p = c.get("agreement_pct")
        lines.append(f"{k:<16} {c.get('agree', 0):>7} {c.get('differ', 0):>7} {c.get('excepted', 0):>9} "
                     f"{c.get('n/a', 0):>6} {('%.2f' % p) if p is not None else '-':>8}")
    return "\n".join(lines)


def _show(row: Row) -> str:
    diffs = [f for f, v in row.verdicts.items() if v == "differ"]
    c = {k: v for k, v in row.case.as_dict().items() if v not in (None, False, 0) or k in ("capability",)}
    lines = [f"- {c}", f"    differ: {', '.join(diffs)}"]
    for f in diffs:
        lines.append(f"    {f}: vllm={row.exp.get(f)!r} attnplan={row.got.get(f)!r}")
    lines.append(f"    vllm reason: {row.exp.get('reason')}; attnplan rules: {row.got.get('rules')}")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attnplan.oracle.vllm", description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=int, default=600, help="configurations, each tried on every capability (default 600)")
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--capability", action="append", help="limit to these capabilities (e.g. 9.0); repeatable")
    ap.add_argument("--json", action="store_true", help="the figures as JSON")
    ap.add_argument("--show", type=int, default=10, help="disagreements to print (default 10)")
    ap.add_argument("--examples", action="store_true", help="re-run each named exception's example instead")
    ap.add_argument("--cases", help="judge these cases instead of generated ones: a JSON file, a list of "
                    "attnplan.oracle.cases.Case fields (each on its own capability)")
    ap.add_argument("--release", help="run this vLLM release's code (unpacked by scripts/vllm_releases.py) "
                    "against attnplan's --engine vllm==RELEASE (default: the installed vLLM, --engine vllm)")
    ap.add_argument("--rules", help="judge these rule packs (a directory of *.yaml) instead of the shipped ones")
    ap.add_argument("--backends", help="judge this backends.yaml instead of the shipped one")
    args = ap.parse_args(argv)
    from .compare import BACKENDS_ENV, RULES_ENV

    for value, name in ((args.rules, RULES_ENV), (args.backends, BACKENDS_ENV)):
        if value:
            os.environ[name] = str(Path(value).resolve())
    if args.release:
        try:
            rc = _run_release(args.release, list(argv if argv is not None else sys.argv[1:]))
        except SetupError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if rc is not None:
            return rc
    version = _truth().env.VLLM_VERSION   # first: vLLM imported with its platform patched, before attnplan's side
    engine, note = attnplan_engine(args.release)
    if note:
        print(f"note: {note}", file=sys.stderr)
    if args.examples:
        ex = examples(engine)
        if args.json:
            print(json.dumps(ex, indent=2, default=str))
        else:
            for e in ex:
                print(f"{'ok ' if e['covered'] else 'BAD'} {e['id']}: differs on {', '.join(e['differ']) or 'nothing'}"
                      + (f" (vllm {e['vllm']}, attnplan {e['attnplan']})" if e.get("vllm") else ""))
        return 0 if all(e["covered"] for e in ex) else 1
    caps = CAPABILITIES
    if args.capability:
        caps = tuple(int(float(c) * 10 + 0.5) for c in args.capability)
    given = None
    if args.cases:
        from .cases import Case

        given = [Case(**c) for c in json.loads(Path(args.cases).read_text(encoding="utf-8"))]
    rows = run(args.configs, args.seed, caps, engine, given)
    s = summary(rows)
    if args.json:
        s["command"] = "python -m attnplan.oracle.vllm " + " ".join(argv if argv is not None else sys.argv[1:])
        s.update(vllm=version, attnplan_engine=engine, note=note, release_features=_truth().RELEASE_FEATURES)
        s["first_disagreements"] = [{"case": r.case.as_dict(), "vllm": r.exp, "attnplan": r.got,
                                     "differ": [f for f, v in r.verdicts.items() if v == "differ"]}
                                    for r in rows if "differ" in r.verdicts.values()][:args.show]
        print(json.dumps(s, indent=2, default=str))
    else:
        print(f"vLLM {version} oracle against attnplan --engine {engine}: {s['cases']} cases "
              + (f"(the cases of {args.cases})\n" if given is not None else
                 f"({args.configs} configurations x {len(caps)} capabilities, seed {args.seed})\n"))
        print(_table("field", s["fields"]))
        print()
        print(_table("capability", s["capabilities"]))
        if s["exceptions"]:
            print("\nnamed exceptions: " + ", ".join(f"{k} ({v})" for k, v in sorted(s["exceptions"].items())))
        shown = [r for r in rows if "differ" in r.verdicts.values()][:args.show]
        if shown:
            print(f"\nfirst {len(shown)} disagreements:")
            print("\n".join(_show(r) for r in shown))
    return 1 if s["disagreements"] else 0


if __name__ == "__main__":
    sys.exit(main())
