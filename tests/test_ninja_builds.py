"""Warm-up's module builds (kernels_adapter/ninja_builds.py) with real ninja on the CPU: edges
that sleep and log when they start and end stand in for nvcc, each writing a depfile read with
``deps = gcc`` as FlashInfer's are, so the tests see how many compilers ran at once and whether
each project's own ninja - what FlashInfer's getter runs at the first request - has work left."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from attnplan.adapter.ninja_builds import BuildError, NinjaBuild, build_together, has_work, pending_edges

ninja_pkg = pytest.importorskip("ninja")
NINJA = str(Path(ninja_pkg.BIN_DIR) / "ninja")
if not os.path.exists(NINJA):
    pytest.skip("needs the ninja binary (pip install ninja)", allow_module_level=True)

EDGE_S = 0.3


def project(root: Path, name: str, edges: int, fail: bool = False) -> NinjaBuild:
    """A FlashInfer-like project: absolute outputs, one header every object depends on (known to
    ninja only through the depfile), and a link edge over the objects."""
    d = root / name
    d.mkdir()
    (d / "kernel.h").write_text("// header\n")
    trace = root / "trace"
    body = (f"echo start $$(date +%s.%N) {name} >> {trace}; sleep {EDGE_S}; "
            f"echo end $$(date +%s.%N) {name} >> {trace}; echo \"$out: {d / 'kernel.h'}\" > $out.d")
    cmd = "exit 3" if fail else f"{body}; touch $out"      # a failure comes at once, mid-build for the rest
    lines = ["ninja_required_version = 1.3",
             "rule cc", f"  command = sh -c '{cmd}'",
             "  depfile = $out.d", "  deps = gcc",
             "rule link", "  command = cat $in > $out", ""]
    objs = [str(d / f"o{i}.o") for i in range(edges)]
    for i, o in enumerate(objs):
        (d / f"s{i}.cu").write_text(f"// source {i}\n")
        lines.append(f"build {o}: cc {d / f's{i}.cu'}")
    lines.append(f"build {d / (name + '.so')}: link {' '.join(objs)}")
    (d / "build.ninja").write_text("\n".join(lines) + "\n")
    return NinjaBuild(d, d / "build.ninja", edges)


def events(root: Path) -> list[tuple[float, str, str]]:
    if not (root / "trace").exists():
        return []
    return sorted((float(t), kind, name) for kind, t, name in
                  (line.split() for line in (root / "trace").read_text().splitlines()))


def peak(evs) -> int:
    now = most = 0
    for _t, kind, _n in evs:
        now += 1 if kind == "start" else -1
        most = max(most, now)
    return most


def own_ninja(b: NinjaBuild) -> str:
    """What the getter does: the project's ninja, from its own directory."""
    return subprocess.run([NINJA, "-C", str(b.workdir), "-f", str(b.ninja_file)],
                          capture_output=True, text=True, check=True).stdout


def test_one_ninja_builds_all_within_the_slots_and_each_project_then_has_no_work(tmp_path):
    builds = [project(tmp_path, "small", 2), project(tmp_path, "big", 6), project(tmp_path, "mid", 3)]
    assert all(has_work(b, NINJA) for b in builds)
    built = build_together(builds, slots=4, ninja=NINJA)
    assert [b.workdir.name for b in built] == ["big", "mid", "small"]        # heaviest first
    evs = events(tmp_path)
    assert sum(1 for e in evs if e[1] == "start") == 11
    assert peak(evs) == 4                           # one scheduler: the slots used, never exceeded
    for b in builds:
        assert (b.workdir / f"{b.workdir.name}.so").exists()
        assert "no work to do" in own_ninja(b)      # the getter finds the log and deps records
        assert not has_work(b, NINJA)
    assert len(events(tmp_path)) == 22              # nothing ran again


def test_records_carry_the_header_dependencies(tmp_path):
    """The deps records are the ones ninja took from the depfiles: touching a header that only
    a depfile names makes exactly that project's objects stale again."""
    a, b = project(tmp_path, "a", 2), project(tmp_path, "b", 2)
    build_together([a, b], slots=4, ninja=NINJA)
    time.sleep(0.05)
    os.utime(a.workdir / "kernel.h")                # now: newer than a's objects
    assert has_work(a, NINJA) and not has_work(b, NINJA)
    assert build_together([a, b], slots=4, ninja=NINJA) == [a]
    assert not has_work(a, NINJA)


def test_only_projects_with_work_are_built(tmp_path):
    a = project(tmp_path, "a", 2)
    build_together([a], slots=2, ninja=NINJA)
    b = project(tmp_path, "b", 3)
    assert build_together([a, b], slots=2, ninja=NINJA) == [b]
    assert {n for _t, _k, n in events(tmp_path)} == {"a", "b"}
    assert sum(1 for e in events(tmp_path) if e[2] == "a") == 4      # a's 2 edges ran once
    assert build_together([a, b], slots=2, ninja=NINJA) == []


def test_a_failed_build_names_its_project_and_keeps_what_compiled(tmp_path):
    good, bad = project(tmp_path, "good", 2), project(tmp_path, "bad", 1, fail=True)
    with pytest.raises(BuildError) as err:
        build_together([good, bad], slots=4, ninja=NINJA)
    assert err.value.workdir == bad.workdir
    assert "ninja build failed in" in str(err.value) and "FAILED" in err.value.output
    # good's objects compiled beside the failure (-j 4) and are recorded in its directory:
    # only its link is left for its own ninja.
    dry = subprocess.run([NINJA, "-n", "-C", str(good.workdir)], capture_output=True, text=True).stdout
    assert "[1/1]" in dry and "good.so" in dry
    assert pending_edges(good, NINJA) == 1 and pending_edges(NinjaBuild(tmp_path, tmp_path / "none.ninja"), NINJA) is None


def test_missing_ninja_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(BuildError, match="ninja is not on PATH"):
        build_together([project(tmp_path, "a", 1)])


class FakeSpec:
    """What warm-up reads of a FlashInfer JitSpec: name, lock, build dir, ninja file, sources,
    AOT path; ``write_ninja`` writes a project like ``project`` above."""

    def __init__(self, root: Path, name: str, edges: int, aot: bool = False):
        self.name, self.root, self.edges = name, root, edges
        self.build_dir = root / name
        self.ninja_path = self.build_dir / "build.ninja"
        self.lock_path = root / f"{name}.lock"
        self.sources = [f"s{i}.cu" for i in range(edges)]
        self.aot_path = root / f"{name}.aot.so"
        if aot:
            self.aot_path.write_text("prebuilt")
        self.writes = 0

    def write_ninja(self):
        self.writes += 1
        if not self.build_dir.exists():
            project(self.root, self.name, self.edges)


def test_warmup_prebuild_builds_the_plans_jit_modules_once(tmp_path, monkeypatch):
    import attnplan.adapter.warmup as wu
    from attnplan.policy import JitModule

    monkeypatch.setenv("PATH", f"{ninja_pkg.BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}")
    specs = {"fa3": FakeSpec(tmp_path, "fa3", 3), "fa2": FakeSpec(tmp_path, "fa2", 2),
             "aot": FakeSpec(tmp_path, "aot", 2, aot=True)}
    monkeypatch.setattr(wu, "_module_spec", lambda mod: specs[mod.params["key"]])
    mods = [JitModule(name=k, kind="jit", phase="prefill", backend="fa3", params={"key": k}) for k in specs]
    mods.append(JitModule(name="cubin", kind="cubin", phase="decode", backend="trtllm-gen", params={"key": "x"}))
    seen = []
    wu.prebuild(mods, seen.append)
    assert [e["event"] for e in seen] == ["build-start", "build-done"]
    assert seen[0]["modules"] == ["fa2", "fa3"]                 # no AOT module, no cubin
    assert seen[1]["built"] == ["fa3", "fa2"]
    assert not (tmp_path / "aot").exists()
    for name in ("fa3", "fa2"):
        assert "no work to do" in own_ninja(NinjaBuild(tmp_path / name, tmp_path / name / "build.ninja"))
    seen.clear()
    wu.prebuild(mods, seen.append)
    assert seen[1]["built"] == [] and len(events(tmp_path)) == 2 * 5     # nothing compiled again
