"""The --html report in headless Chromium (Debian's package, driven by Playwright): the grid's
colours, a click showing violations and suggestions, and no request leaving the file."""

from __future__ import annotations

import re
import shutil

import pytest

from attnplan.cli.main import main as cli_main

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
LLAMA = ["--head-dim", "128", "--num-heads", "32", "--num-kv-heads", "8"]


def rgb(css: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", css)[:3])


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("html")
    cfgs = d / "configs.yaml"
    cfgs.write_text("- {name: llama, head_dim: 128, num_qo_heads: 32, num_kv_heads: 8}\n"
                    # still rejected on 9.0 and 12.x under vLLM 0.33 (head_dim 64: _nvfp4_kv_on_fa2), ok on 10.x
                    "- {name: nvfp4-kv, head_dim: 64, num_qo_heads: 32, num_kv_heads: 8, kv_cache_dtype: nvfp4}\n")
    out = d / "report.html"
    rc = cli_main(["preflight", "--simulate", "B200=3,H100=2,RTX PRO 6000=1", "--configs", str(cfgs),
                   "--html", str(out)])
    assert rc == 1
    return out


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def test_grid_colours_and_click_details(browser, page_file):
    page = browser.new_page()
    requests: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(page_file.as_uri())

    assert "6 nodes: 3 ok, 3 rejected, 0 unreachable" in page.locator("#summary").inner_text()
    # nodes x configs grid: 6 rows x 2 configs
    assert page.locator("#nodes tr[data-node]").count() == 6
    assert page.locator("#nodes td.cell").count() == 12
    green = page.locator('#nodes tr[data-node="b200-0"] td.cell').nth(0)
    red = page.locator('#nodes tr[data-node="h100-1"] td.cell').nth(1)
    g, r = rgb(green.evaluate("e => getComputedStyle(e).backgroundColor")), \
        rgb(red.evaluate("e => getComputedStyle(e).backgroundColor"))
    assert g[1] > g[0] and g[1] > g[2], g  # green
    assert r[0] > r[1] and r[0] > r[2], r  # red

    details = page.locator("#details")
    assert details.is_hidden()
    red.click()
    assert details.is_visible()
    text = details.inner_text()
    assert "h100-1" in text and "nvfp4-kv" in text
    rules = details.locator("table.violations td:first-child").all_inner_texts()
    assert "vllm.nvfp4" in rules
    assert "9.0" in details.locator("table.violations").inner_text()  # observed
    sugg = details.locator("table.suggestions").inner_text()
    assert "kv_cache_dtype" in sugg and "then prefill runs" in sugg

    # a green cell shows its plan, no violations table
    green.click()
    assert "prefill trtllm-gen, decode trtllm-gen, KV HND" in details.inner_text()
    assert details.locator("table.violations").count() == 0
    # keyboard works too, and the close button hides the panel
    page.locator('#groups td.cell.v-fail').first.focus()
    page.keyboard.press("Enter")
    assert "group" in details.locator("h2").inner_text()
    details.locator("button.close").click()
    assert details.is_hidden()

    assert errors == []
    assert requests and all(u.startswith("file://") for u in requests), requests  # self-contained
    page.close()


def test_unreachable_nodes_are_grey_with_reason(browser, tmp_path):
    import json as _json

    from attnplan.preflight.html import write_html
    from attnplan.preflight.model import NamedConfig, Outcome
    from attnplan.preflight.report import build_report
    from attnplan.policy import make_config, plan_for, simulated_node

    cfg = {"head_dim": 128, "num_qo_heads": 32, "num_kv_heads": 8}
    outs = [Outcome(name="ok-1", answers=[plan_for(cfg, simulated_node("B200"))]),
            Outcome(name="gone-1", kind="unreachable", reason="connection refused"),
            Outcome(name='<b>"x"</b>', kind="error", reason="malformed JSON: <script>alert(1)</script>")]
    report = build_report(source="hosts", targets=["a"], configs=[NamedConfig("c", make_config(cfg))], outcomes=outs)
    f = write_html(report, tmp_path / "r.html")
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f.as_uri())
    cell = page.locator('#nodes tr[data-node="gone-1"] td.cell')
    c = rgb(cell.evaluate("e => getComputedStyle(e).backgroundColor"))
    assert max(c) - min(c) < 20, c  # grey
    cell.click()
    assert "connection refused" in page.locator("#details").inner_text()
    page.locator("#nodes td.cell.v-error").nth(1).click()
    assert "<script>alert(1)</script>" in page.locator("#details").inner_text()  # shown as text
    assert dialogs == []
    assert _json.loads(page.locator("#report-data").inner_text())["groups"][0]["count"] == 1
    page.close()


def test_model_cells_show_every_layer_group(browser, tmp_path):
    """A whole model: the cell names the first failing group's rule, the click lists every group."""
    from pathlib import Path

    gpt_oss = Path(__file__).resolve().parent / "models" / "gpt-oss-20b.json"
    out = tmp_path / "model.html"
    # vLLM's FlashInfer backend asked for: on the A100 it refuses sinks (vLLM itself would run TRITON_ATTN)
    rc = cli_main(["preflight", "--simulate", "B200=1,A100=1", "--model-config", str(gpt_oss), "--attention-backend",
                   "FLASHINFER", "--html", str(out)])
    assert rc == 1
    page = browser.new_page()
    page.goto(out.as_uri())
    red = page.locator('#nodes tr[data-node="a100-0"] td.cell')
    assert "vllm.sinks" in red.inner_text() and "sliding" in red.inner_text()
    red.click()
    rows = page.locator("#details table.layer-groups tr").all_inner_texts()
    assert len(rows) == 3 and "sliding" in rows[1] and "full" in rows[2]  # header + 12 sliding + 12 full layers
    assert all("rejected" in r and "vllm.sinks" in r for r in rows[1:])
    green = page.locator('#nodes tr[data-node="b200-0"] td.cell')
    assert "2 layer groups" in green.inner_text()
    green.click()
    assert page.locator("#details table.layer-groups").inner_text().count("trtllm-gen") == 4
    page.close()
