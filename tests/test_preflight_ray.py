"""Preflight on a real local multi-node Ray cluster (ray.cluster_utils.Cluster).

Ray runs only inside a private network namespace holding nothing but loopback
(``unshare -n``), so it never touches the machine's outward address: pytest starts this file as
a script under ``unshare -n`` and checks what it prints.

Per-node declared facts are an explicit injection, not a mock of Ray: each worker node is
started with a Ray node label naming its device (``attnplan.io/device=B200``), and the preflight
runs with ``declare_label`` / ``--ray-declare-label`` set, so each task - pinned to its node by
NodeAffinitySchedulingStrategy - reads the label *of the node it actually runs on*. The head
node has no label: it is probed (NVML), finds no GPU here, and must be reported as such.
One node is killed (its raylet SIGKILLed) while its task runs: its row must be an error with
the reason, and the other nodes must still be answered.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LABEL = "attnplan.io/device"
DOOM = "attnplan-test/doomed"
LLAMA = ["--head-dim", "128", "--num-heads", "32", "--num-kv-heads", "8"]


def _unshare_ok() -> str | None:
    if not shutil.which("unshare"):
        return "unshare(1) is not installed"
    try:
        r = subprocess.run(["unshare", "-n", "sh", "-c", "ip link set lo up 2>/dev/null || true; true"],
                           capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare -n failed: {exc}"
    if r.returncode != 0:
        return f"unshare -n is not permitted here: {r.stderr.decode(errors='replace').strip()[:120]}"
    return None


@pytest.fixture(scope="module")
def ray_run(tmp_path_factory):
    pytest.importorskip("ray")
    why = _unshare_ok()
    if why:
        pytest.skip(f"Ray tests run Ray only inside a loopback-only network namespace; {why}")
    out = tmp_path_factory.mktemp("ray") / "result.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1")
    cmd = f"ip link set lo up && exec {sys.executable} {Path(__file__).resolve()} {out}"
    t0 = time.monotonic()
    proc = subprocess.run(["unshare", "-n", "sh", "-c", cmd], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=240)
    took = time.monotonic() - t0
    assert proc.returncode == 0 and out.exists(), f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    data = json.loads(out.read_text())
    data["took"] = took
    return data


pytestmark = pytest.mark.ray
GEMMA3 = ROOT / "tests" / "models" / "gemma-3-27b-it.json"


def test_every_node_answers_from_its_own_node(ray_run):
    lib = ray_run["library"]
    rows = {r["extra"]["node_id"]: r for r in lib["nodes"]}
    ids = ray_run["ids"]
    assert set(rows) == set(ids.values()), "one row per alive node"
    b, h = rows[ids["b200"]], rows[ids["h100"]]
    assert b["status"] == "ok" and b["device"] == "B200" and b["capability"] == "10.0"
    assert b["results"][0]["prefill"] == "trtllm-gen" and b["results"][0]["kv_layout"] == "HND"
    assert h["status"] == "ok" and h["device"] == "H100"
    # vLLM 0.33 (the default layer) runs its own FLASH_ATTN on 9.0; the kernel layer's own order: fa3 + fa2
    assert (h["results"][0]["prefill"], h["results"][0]["decode"]) == ("FLASH_ATTN", "FLASH_ATTN")
    assert (h["results"][0]["outcome"], h["results"][0]["modelled"]) == ("runs", False)
    assert (h["results"][1]["prefill"], h["results"][1]["decode"]) == ("fa3", "fa2")
    assert [c["engine"] for c in lib["query"]["configs"]] == [None, "flashinfer"]
    assert b["extra"]["declared"] is True and h["extra"]["declared"] is True
    # the two declared nodes disagree: flagged
    assert lib["summary"]["heterogeneous"] is True


def test_node_without_gpu_is_reported_as_such(ray_run):
    lib = ray_run["library"]
    head = next(r for r in lib["nodes"] if r["extra"]["node_id"] == ray_run["ids"]["head"])
    assert head["extra"]["head"] is True and head["extra"]["declared"] is False  # probed, not declared
    assert head["status"] == "no-gpu" and head["verdict"] == "skip"
    assert "GPU" in head["reason"]
    assert head["results"][0]["verdict"] == "skip"  # never a pass


def test_node_dying_mid_task_is_a_row_with_reason(ray_run):
    lib = ray_run["library"]
    dead = next(r for r in lib["nodes"] if r["extra"]["node_id"] == ray_run["ids"]["doomed"])
    assert ray_run["killed_while_running"] is True
    assert dead["status"] == "unreachable" and dead["verdict"] == "error"
    assert "died" in dead["reason"] or "lost" in dead["reason"], dead["reason"]
    assert lib["summary"]["exit_code"] == 3
    assert lib["summary"]["line"].startswith("4 nodes: 2 ok, 0 rejected, 1 unreachable, 1 without GPU")


def test_cli_ray_flag_on_the_same_cluster(ray_run):
    cli = ray_run["cli"]
    assert cli["out"].lstrip().startswith("{"), (cli["out"][:1500], cli["err"][-1500:])
    data = json.loads(cli["out"])
    assert cli["rc"] == 0, (data["summary"], [(r["name"], r["status"], r["reason"]) for r in data["nodes"]])
    assert data["query"]["source"] == "ray"
    statuses = sorted(r["status"] for r in data["nodes"])
    assert statuses == ["no-gpu", "ok", "ok"]  # the killed node is gone from the cluster
    assert data["summary"]["heterogeneous"] is True
    assert ray_run["cli_seconds"] < 30


def test_ray_workers_plan_every_layer_group_of_a_model(ray_run):
    """Gemma-3's 52 sliding and 10 global layers, planned on each worker, as a simulated node plans them."""
    from attnplan.cli.main import main as cli_main

    cli = ray_run["cli_model"]
    assert cli["out"].lstrip().startswith("{"), cli["err"][-1500:]
    data = json.loads(cli["out"])
    got = {r["device"]: r["results"][0] for r in data["nodes"] if r["status"] in ("ok", "rejected")}
    assert set(got) == {"B200", "H100"}
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        cli_main(["preflight", "--simulate", "B200=1,H100=1", "--model-config", str(GEMMA3), "--json"])
    want = {r["device"]: r["results"][0] for r in json.loads(buf.getvalue())["nodes"]}
    for d in got:
        assert [(g["kind"], g["count"], g["status"], g["prefill"], g["decode"]) for g in got[d]["layer_groups"]] == \
            [(g["kind"], g["count"], g["status"], g["prefill"], g["decode"]) for g in want[d]["layer_groups"]]
        assert [g["count"] for g in got[d]["layer_groups"]] == [52, 10]


def test_ray_stays_within_budget(ray_run):
    assert ray_run["took"] < 120, ray_run["took"]


# -- the script pytest runs under `unshare -n` -----------------------------------------------------
def _scenario(out_path: str) -> None:  # pragma: no cover - runs in the subprocess
    sys.path.insert(0, str(ROOT))
    import ray
    from ray.cluster_utils import Cluster

    from attnplan.policy import default_ruleset, make_config, parse_engine
    from attnplan.preflight.model import NamedConfig
    from attnplan.preflight.ray_source import declared_or_probed, ray_preflight
    from attnplan.preflight.report import build_report

    marker = Path(tempfile.mkdtemp()) / "doomed-task-started"
    fast_death = {"health_check_period_ms": 500, "health_check_timeout_ms": 500, "health_check_failure_threshold": 3}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "_system_config": fast_death})
    nodes = {"b200": cluster.add_node(num_cpus=1, labels={LABEL: "B200"}),
             "h100": cluster.add_node(num_cpus=1, labels={LABEL: "H100"}),
             "doomed": cluster.add_node(num_cpus=1, labels={LABEL: "GB300", DOOM: "yes"})}
    cluster.wait_for_nodes()
    ids = {k: n.node_id for k, n in nodes.items()}
    ids["head"] = cluster.head_node.node_id
    result: dict = {"ids": ids}
    ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")

    def facts(labels: dict) -> object:
        # Test-only wrapper around the production path: the doomed node says it started, then hangs.
        if labels.get(DOOM):
            marker.write_text("started")
            time.sleep(300)
        return declared_or_probed(labels, LABEL)

    killed = {}

    def killer() -> None:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        killed["while_running"] = marker.exists()
        cluster.remove_node(nodes["doomed"], allow_graceful=False)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    llama = make_config({"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8})
    # the same config for the kernel layer: each node plans it for the engine it is asked for
    configs = [NamedConfig("llama", llama), NamedConfig("llama-kernel", llama, parse_engine("flashinfer", default_ruleset()))]
    t0 = time.monotonic()
    outcomes = ray_preflight(configs, timeout=60, facts_fn=facts)
    result["library_seconds"] = time.monotonic() - t0
    t.join(5)
    result["killed_while_running"] = killed.get("while_running", False)
    report = build_report(source="ray", targets=[cluster.address], configs=configs, outcomes=outcomes)
    result["library"] = report.to_json()
    deadline = time.monotonic() + 30  # let the GCS mark the killed node dead before the CLI run
    while time.monotonic() < deadline and any(n["NodeID"] == ids["doomed"] and n["Alive"] for n in ray.nodes()):
        time.sleep(0.2)
    ray.shutdown()

    # The CLI, as a user runs it, against the same cluster (now three alive nodes).
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "attnplan", "preflight", "--ray", cluster.address,
                           "--ray-declare-label", LABEL, *LLAMA, "--json", "--timeout", "45"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    result["cli_seconds"] = time.monotonic() - t0
    result["cli"] = {"rc": proc.returncode, "out": proc.stdout, "err": proc.stderr}
    # A whole model: each Ray worker plans every layer group locally.
    proc = subprocess.run([sys.executable, "-m", "attnplan", "preflight", "--ray", cluster.address,
                           "--ray-declare-label", LABEL, "--model-config", str(GEMMA3), "--json", "--timeout", "45"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    result["cli_model"] = {"rc": proc.returncode, "out": proc.stdout, "err": proc.stderr}
    cluster.shutdown()
    Path(out_path).write_text(json.dumps(result))


if __name__ == "__main__":  # pragma: no cover
    _scenario(sys.argv[1])
