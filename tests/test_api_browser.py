"""The status page end to end in headless Chromium (Debian's package, driven by Playwright).

Installs nothing: the browser is the system's `chromium`, the server a real uvicorn on a free
127.0.0.1 port; any request the page makes elsewhere is blocked and fails the test.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from attnplan.rest.app import create_app
from attnplan.rest.server import BackgroundServer
from attnplan.node import ProbeIO

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TOKEN = "browser-token"
LLAMA = {"num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096, "torch_dtype": "bfloat16",
         "model_type": "llama"}
SCREENSHOT = Path(os.environ.get("ATTNPLAN_SCREENSHOT", Path(tempfile.gettempdir()) / "attnplan-status.png"))


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    real = ROOT / "examples"
    if (real / "llama-3.1-8b.json").exists():
        return real
    d = tmp_path_factory.mktemp("examples")
    (d / "llama-3.1-8b.json").write_text(json.dumps(LLAMA))
    return d


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory):
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, headless=True, args=ARGS,
            viewport={"width": 1280, "height": 900})
        yield ctx
        ctx.close()


@pytest.fixture
def page(browser_context):
    pg = browser_context.new_page()
    pg.offsite = []  # type: ignore[attr-defined]

    def guard(route):
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            pg.offsite.append(route.request.url)  # type: ignore[attr-defined]
            route.abort()

    pg.route("**/*", guard)
    pg.errors = []  # type: ignore[attr-defined]
    pg.on("pageerror", lambda exc: pg.errors.append(str(exc)))  # type: ignore[attr-defined]
    yield pg
    assert pg.offsite == [], pg.offsite  # type: ignore[attr-defined]
    assert pg.errors == [], pg.errors  # type: ignore[attr-defined]
    pg.close()


def safe_io() -> ProbeIO:
    return ProbeIO(env={"ATTNPLAN_ARTIFACTORY_CHECK": "never"})


def open_page(page, url: str) -> None:
    page.goto(url + "/")
    page.wait_for_selector("body[data-ready='1']", timeout=15000)


def submit(page) -> None:
    # Selectors, not wait_for_function: the page's CSP (rightly) forbids the eval that needs.
    page.click("#submit")
    page.wait_for_selector("#status:not(:empty), #form-error:not(:empty)", timeout=10000)


def test_status_page_plans_a_preset_and_shows_a_rejection(page, examples):
    with BackgroundServer(create_app(probe_io=safe_io(), examples_dir=examples)) as srv:
        open_page(page, srv.url)
        page.wait_for_selector("#node tbody tr")
        facts = page.locator("#node tbody tr td:first-child").all_text_contents()
        assert "hostname" in facts and "capability" in facts
        assert page.locator("#ready").text_content() == "ready"

        page.select_option("#preset", "llama-3.1-8b")
        assert page.input_value("#cfg-num_qo_heads") == "32" and page.input_value("#cfg-num_kv_heads") == "8"
        page.fill("#node-device", "B200")
        submit(page)
        assert page.locator("#status").text_content() == "ok"
        backend_row = page.locator("#backends tbody tr").first.locator("td").all_text_contents()
        assert backend_row == ["backend", "trtllm-gen", "trtllm-gen"]
        assert "HND" in page.locator("#kv").text_content()
        assert page.locator("#violations-part").is_hidden()

        # NVFP4 KV at head_dim 64 on 12.x: vLLM 0.33 refuses fa2 there (_nvfp4_kv_on_fa2), fa2 misreads it
        page.select_option("#cfg-kv_cache_dtype", "nvfp4")
        page.fill("#cfg-head_dim", "64")
        page.fill("#node-device", "RTX PRO 6000")
        submit(page)
        assert page.locator("#status").text_content() == "rejected"
        assert page.locator("#plan-part").is_hidden()
        rules = page.locator("#violations tbody tr td:first-child").all_text_contents()
        assert "vllm.nvfp4" in rules
        suggested = page.locator("#suggestions tbody tr td:first-child").all_text_contents()
        assert "kv_cache_dtype" in suggested
        page.screenshot(path=str(SCREENSHOT), full_page=True)

        page.fill("#node-device", "B2OO")
        submit(page)
        error = page.locator("#form-error").text_content()
        assert error.startswith("node.device: ") and "unknown device" in error
        assert page.get_attribute("#node-device", "aria-invalid") == "true"
        assert page.locator("#answer-section").is_hidden()  # the earlier answer is not left standing


def test_status_page_with_a_token(page, examples):
    with BackgroundServer(create_app(probe_io=safe_io(), token=TOKEN, examples_dir=examples)) as srv:
        open_page(page, srv.url)
        page.wait_for_selector("#node-error:not(:empty)")
        assert "token" in page.locator("#node-error").text_content()
        page.fill("#token", TOKEN)
        page.dispatch_event("#token", "change")
        page.wait_for_selector("#node tbody tr")
        page.fill("#cfg-head_dim", "128")
        page.fill("#cfg-num_qo_heads", "32")
        page.fill("#node-device", "H100")
        submit(page)
        assert page.locator("#status").text_content() == "ok"
        row = page.locator("#backends tbody tr").first.locator("td").all_text_contents()
        assert row == ["backend", "fa3", "xqa"]  # vLLM 0.33 decodes with XQA on 9.0
        assert "engine vllm 0.33.0" in page.locator("#answer-node").text_content()
        page.fill("#engine", "flashinfer")  # the kernel layer's own order: fa2 decode
        submit(page)
        row = page.locator("#backends tbody tr").first.locator("td").all_text_contents()
        assert row == ["backend", "fa3", "fa2"] and "engine flashinfer" in page.locator("#answer-node").text_content()
        page.fill("#engine", "vllm==0.1.0")
        submit(page)
        assert page.locator("#form-error").text_content().startswith("engine: ")
        assert page.get_attribute("#engine", "aria-invalid") == "true"


def submit_model(page) -> None:
    page.click("#model-submit")
    page.wait_for_selector("#model-status:not(:empty), #model-error:not(:empty)", timeout=20000)


def test_status_page_draws_a_models_layer_groups(page, examples):
    """A preset by name, then a pasted serve line: one square per layer, coloured by its group."""
    import json as _json

    gemma2 = _json.loads((ROOT / "attnplan" / "presets" / "gemma-2-9b.json").read_text())
    n = gemma2["num_hidden_layers"]
    with BackgroundServer(create_app(probe_io=safe_io(), examples_dir=examples)) as srv:
        open_page(page, srv.url)
        page.fill("#node-device", "A100")  # vLLM keeps Gemma-2's soft cap there (fa2); on an H100 it would not
        page.fill("#model-ref", "gemma-2-9b")
        submit_model(page)
        assert page.locator("#model-status").text_content() == "ok"
        assert page.locator("#layer-strip span").count() == n
        kinds = page.locator("#layer-groups tbody tr td:nth-child(2)").all_text_contents()
        assert kinds == ["sliding", "full"]  # alternating sliding-window and global layers
        assert page.locator("#layer-strip span.g0").count() == n // 2 == page.locator("#layer-strip span.g1").count()
        assert "KV cache:" in page.locator("#kv-groups").text_content()

        # a pasted serve line wins over the model fields; tp 3 does not divide the heads: vLLM refuses
        page.fill("#serve-line", f"vllm serve gemma-2-9b -tp 3")
        submit_model(page)
        assert page.locator("#model-status").text_content() == "startup_error"
        assert "divisible by tensor parallel size (3)" in page.locator("#startup-error").text_content()

        page.fill("#serve-line", "vllm serve gemma-2-9b --kv-cache-dtype fp9")
        submit_model(page)
        assert "kv_cache_dtype" in page.locator("#model-error").text_content()
        assert page.locator("#model-answer").is_hidden()
