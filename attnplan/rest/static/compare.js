"use strict";
// The vLLM-vs-SGLang grid (issue 26): POST /v1/compare, one row per GPU (and layer group), one column per engine.
const $ = (s) => document.querySelector(s);
const TOKEN_KEY = "attnplan-token";

function headers(json) {
  const h = json ? { "Content-Type": "application/json" } : {};
  const token = $("#token").value.trim();
  if (token) h["Authorization"] = "Bearer " + token;
  return h;
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

function phaseText(name, p) {
  const fi = p.flashinfer || "-";
  if (p.engine_backend === null) return `${name}: FlashInfer ${fi}`;
  if (p.runs_flashinfer) return `${name}: ${p.engine_backend} → FlashInfer ${fi}`;
  return `${name}: ${p.engine_backend} (not FlashInfer: ${p.engine_note}; FlashInfer plan: ${fi})`;
}

function cell(r) {
  const td = el("td");
  if (!r) return td;
  td.appendChild(el("span", r.status, "badge " + (r.status === "runs" || r.status === "ok" ? "ok" : "rejected")));
  for (const [n, p] of [["prefill", r.prefill], ["decode", r.decode]]) td.appendChild(el("div", phaseText(n, p)));
  const pg = r.page_size;
  td.appendChild(el("div", `page ${pg.given === null ? "unset" : pg.given} → ${pg.runs ?? "-"}; query ` +
    `${r.prefill.query_dtype || "-"}/${r.decode.query_dtype || "-"}`));
  for (const c of r.coercions) td.appendChild(el("div", `coerced ${c.field}: ${c.given ?? "unset"} → ${c.runs} [${c.rule}]`, "error"));
  for (const v of r.refusals) td.appendChild(el("div", `refused (${v.outcome}, ${v.phase}) [${v.rule}] ${v.message}`, "error"));
  return td;
}

async function run(ev) {
  if (ev) ev.preventDefault();
  $("#error").textContent = "";
  const body = { model: $("#model").value, devices: $("#devices").value.split(",").map((s) => s.trim()).filter(Boolean),
                 tp: Number($("#tp").value) || 1, kv_cache_dtype: $("#kv").value };
  const resp = await fetch("/v1/compare", { method: "POST", headers: headers(true), body: JSON.stringify(body) });
  const data = await resp.json();
  if (!resp.ok) {
    const d = data.detail;
    $("#error").textContent = Array.isArray(d) ? d.map((x) => x.msg).join("; ") : String(d);
    return;
  }
  $("#what").textContent = `${data.model} (${data.architecture || "?"}), tensor parallel ${data.tp}, KV cache ${data.kv_cache_dtype}`;
  const engines = [...new Set(data.rows.map((r) => r.engine))];
  const head = $("#grid thead"); head.textContent = "";
  const hr = el("tr"); hr.appendChild(el("th", "GPU"));
  for (const e of engines) hr.appendChild(el("th", e === "vllm" ? "vLLM 0.33" : "SGLang 0.5.23"));
  head.appendChild(hr);
  const rows = new Map();
  for (const r of data.rows) {
    const key = `${r.device} (${r.capability})` + (r.group ? ` — ${r.group}` : "");
    if (!rows.has(key)) rows.set(key, {});
    rows.get(key)[r.engine] = r;
  }
  const tb = $("#grid tbody"); tb.textContent = "";
  for (const [key, byEngine] of rows) {
    const tr = el("tr"); tr.appendChild(el("th", key));
    for (const e of engines) tr.appendChild(cell(byEngine[e]));
    tb.appendChild(tr);
  }
}

async function init() {
  const tok = $("#token");
  tok.value = sessionStorage.getItem(TOKEN_KEY) || "";
  tok.addEventListener("change", () => sessionStorage.setItem(TOKEN_KEY, tok.value.trim()));
  try {
    const resp = await fetch("/v1/presets", { headers: headers(false) });
    const data = await resp.json();
    for (const p of data.presets || []) $("#model").appendChild(el("option", p.name));
  } catch (e) { $("#error").textContent = String(e); }
  $("#compare-form").addEventListener("submit", run);
}
init();
