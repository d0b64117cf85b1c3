// attnplan status page: node facts, a config form built from the API's own schema, the answer.
// Every value from the server is written with textContent, never parsed as HTML.
"use strict";

const $ = (sel) => document.querySelector(sel);
const TOKEN_KEY = "attnplan-token";
let configFields = [];   // [{name, kind, required, enumValues}]
let presets = [];

function headers(extra) {
  const h = Object.assign({}, extra || {});
  const token = $("#token").value.trim();
  if (token) h["Authorization"] = "Bearer " + token;
  return h;
}

async function api(path, options) {
  const opts = Object.assign({}, options || {});
  opts.headers = headers(opts.headers);
  const resp = await fetch(path, opts);
  let data = null;
  try { data = await resp.json(); } catch (e) { data = null; }
  if (resp.status === 401) throw new Error("this server needs an API token (enter it at the top right)");
  return { status: resp.status, data: data };
}

function cell(row, value, cls) {
  const td = document.createElement("td");
  td.textContent = value === null || value === undefined ? "–" : String(value);
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

function fillTable(tableSel, rows) {
  const body = $(tableSel + " tbody");
  body.replaceChildren();
  for (const r of rows) {
    const tr = document.createElement("tr");
    r.forEach((v, i) => cell(tr, v, i === 0 ? "mono" : ""));
    body.appendChild(tr);
  }
}

function fmtValue(v) {
  if (v === null || v === undefined) return "–";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

async function loadReady() {
  try {
    const r = await fetch("/readyz");
    const d = await r.json();
    const b = $("#ready");
    b.textContent = d.ready ? "ready" : "not ready: " + d.reason;
    b.className = "badge " + (d.ready ? "ok" : "bad");
    return d.ready;
  } catch (e) { return false; }
}

async function loadNode(refresh) {
  $("#node-error").textContent = "";
  try {
    const { status, data } = await api("/v1/node" + (refresh ? "?refresh=true" : ""));
    if (status !== 200) { $("#node-error").textContent = (data && data.detail) || ("HTTP " + status); return; }
    fillTable("#node", Object.entries(data.node).map(([k, f]) => [k, fmtValue(f.value), f.source, f.detail || ""]));
  } catch (e) { $("#node-error").textContent = e.message; }
}

function kindOf(prop) {
  const opts = prop.anyOf ? prop.anyOf.filter((p) => p.type !== "null") : [prop];
  const p = opts[0] || {};
  if (p.enum) return { kind: "enum", enumValues: p.enum };
  if (p.type === "boolean") return { kind: prop.anyOf ? "tristate" : "bool" };
  if (p.type === "integer") return { kind: "int", min: p.minimum, max: p.maximum };
  if (p.type === "number") return { kind: "float" };
  return { kind: "text" };
}

function buildForm(schema) {
  const box = $("#config-fields");
  const required = new Set(schema.required || []);
  for (const [name, prop] of Object.entries(schema.properties)) {
    const k = kindOf(prop);
    const label = document.createElement("label");
    let input;
    if (k.kind === "bool") {
      label.className = "check";
      input = document.createElement("input");
      input.type = "checkbox";
      input.checked = prop.default === true;
    } else if (k.kind === "enum" || k.kind === "tristate") {
      input = document.createElement("select");
      const values = k.kind === "enum" ? k.enumValues : ["true", "false"];
      const dflt = document.createElement("option");
      dflt.value = "";
      dflt.textContent = prop.default === undefined || prop.default === null ? "default" : "default (" + prop.default + ")";
      input.appendChild(dflt);
      for (const v of values) { const o = document.createElement("option"); o.textContent = v; input.appendChild(o); }
    } else {
      input = document.createElement("input");
      input.type = k.kind === "text" ? "text" : "number";
      if (k.kind === "float") input.step = "any";
      if (k.min !== undefined) input.min = k.min;
      if (k.max !== undefined) input.max = k.max;
      if (prop.default !== undefined && prop.default !== null) input.placeholder = String(prop.default);
      else if (!required.has(name)) input.placeholder = "unset";
    }
    input.name = name;
    input.id = "cfg-" + name;
    input.title = prop.description || name;
    const text = document.createTextNode(name + (required.has(name) ? " *" : ""));
    if (k.kind === "bool") { label.appendChild(input); label.appendChild(text); }
    else { label.appendChild(text); label.appendChild(input); }
    box.appendChild(label);
    configFields.push({ name: name, kind: k.kind });
  }
}

function setField(name, value) {
  const el = document.getElementById("cfg-" + name);
  if (!el) return;
  if (el.type === "checkbox") { el.checked = value === true; return; }
  if (el.tagName === "SELECT" && value !== "" && ![...el.options].some((o) => o.value === String(value))) {
    const o = document.createElement("option");   // an alias (bfloat16): the server normalises it
    o.textContent = String(value);
    el.appendChild(o);
  }
  el.value = value === null || value === undefined ? "" : String(value);
}

function applyPreset(name) {
  const preset = presets.find((p) => p.name === name);
  for (const f of configFields) setField(f.name, f.kind === "bool" ? false : "");
  if (preset) for (const [k, v] of Object.entries(preset.fields)) setField(k, v);
}

function collect() {
  const config = {};
  for (const f of configFields) {
    const el = document.getElementById("cfg-" + f.name);
    el.removeAttribute("aria-invalid");
    if (f.kind === "bool") { if (el.checked) config[f.name] = true; continue; }
    const v = el.value.trim();
    if (v === "") continue;
    if (f.kind === "int") config[f.name] = Number.isInteger(Number(v)) ? Number(v) : v;
    else if (f.kind === "float") config[f.name] = Number.isNaN(Number(v)) ? v : Number(v);
    else if (f.kind === "tristate") config[f.name] = v === "true";
    else config[f.name] = v;
  }
  const body = { config: config };
  const node = {};
  for (const [key, sel] of [["device", "#node-device"], ["capability", "#node-capability"],
                            ["flashinfer_version", "#node-flashinfer"], ["cubins", "#node-cubins"]]) {
    const v = $(sel).value.trim();
    if (v) node[key] = v;
  }
  if (Object.keys(node).length) body.node = node;
  const engine = $("#engine").value.trim();   // absent: the node's default engine layer
  if (engine) body.engine = engine;
  return body;
}

function nodeLabel(n) {
  const name = n.gpu_name && n.gpu_name.value ? n.gpu_name.value : "no GPU";
  const cap = n.capability && n.capability.value ? n.capability.value : "?";
  return name + " (capability " + cap + ", " + (n.capability ? n.capability.source : "unknown") + ")";
}

function showAnswer(a) {
  $("#answer-section").hidden = false;
  const st = $("#status");
  st.textContent = a.status;
  st.className = "badge " + a.status;
  const eng = a.engine ? a.engine.name + (a.engine.version ? " " + a.engine.version : "") : "?";
  $("#answer-node").textContent = "for " + nodeLabel(a.node) + " · engine " + eng + " · rules revision " + a.rules_revision;
  const p = a.plan;
  $("#plan-part").hidden = !p;
  if (p) {
    const mib = (b) => (b / 1048576).toFixed(0) + " MiB";
    fillTable("#backends", [
      ["backend", p.prefill.backend, p.decode.backend],
      ["kernel", p.prefill.kernel, p.decode.kernel],
      ["query dtype", p.prefill.query_dtype, p.decode.query_dtype],
      ["KV storage / view", p.prefill.kv_storage_dtype + " / " + p.prefill.kv_view_dtype,
        p.decode.kv_storage_dtype + " / " + p.decode.kv_view_dtype],
      ["workspace", mib(p.prefill.workspace_bytes), mib(p.decode.workspace_bytes)],
      ["tensor cores", "–", fmtValue(p.decode.use_tensor_cores)],
      ["q_len / request", "–", p.decode.q_len_per_req],
      ["warm-up", p.prefill.modules.map((m) => m.kind + " " + m.name).join(", "),
        p.decode.modules.map((m) => m.kind + " " + m.name).join(", ")],
    ]);
    const kv = p.kv_cache;
    $("#kv").textContent = "KV cache: layout " + kv.layout + ", page_size " + kv.page_size + ", storage " +
      kv.kv_storage_dtype + " viewed as " + kv.kv_view_dtype + ", " + kv.num_kv_heads + " KV heads × " + kv.head_dim_k;
  }
  $("#violations-part").hidden = a.violations.length === 0;
  fillTable("#violations", a.violations.map((v) => [v.rule, v.phase, v.backend || "–", fmtValue(v.observed), v.required, v.message]));
  $("#suggestions-part").hidden = a.suggestions.length === 0;
  fillTable("#suggestions", a.suggestions.map((s) => [s.field, fmtValue(s.value), s.prefill || "–", s.decode || "–", s.message]));
  $("#notes-part").hidden = a.notes.length === 0;
  const ul = $("#notes");
  ul.replaceChildren();
  for (const n of a.notes) { const li = document.createElement("li"); li.textContent = n; ul.appendChild(li); }
  $("#raw").textContent = JSON.stringify(a, null, 2);
}

const NODE_INPUTS = { device: "#node-device", capability: "#node-capability",
  flashinfer_version: "#node-flashinfer", cubins: "#node-cubins" };

function inputFor(field) {   // "config.head_dim" / "node.device" / "engine" -> its form control
  if (field === "engine") return $("#engine");
  const [where, name] = field.split(".");
  if (where === "config" && name) return document.getElementById("cfg-" + name);
  if (where === "node" && NODE_INPUTS[name]) return $(NODE_INPUTS[name]);
  return null;
}

async function submitPlan(ev) {
  ev.preventDefault();
  $("#form-error").textContent = "";
  $("#answer-section").hidden = true;   // never leave an earlier answer under a new question
  $("#status").textContent = "";
  for (const sel of Object.values(NODE_INPUTS)) $(sel).removeAttribute("aria-invalid");
  $("#engine").removeAttribute("aria-invalid");
  $("#submit").disabled = true;
  try {
    const { status, data } = await api("/v1/plan?trace=false", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(collect()),
    });
    if (status === 200) { showAnswer(data); $("#answer-section").scrollIntoView({ block: "start" }); return; }
    if (status === 422 && data && Array.isArray(data.detail)) {
      const msgs = [];
      for (const e of data.detail) {
        msgs.push(e.field + ": " + e.msg);
        const el = inputFor(e.field);
        if (el) el.setAttribute("aria-invalid", "true");
      }
      $("#form-error").textContent = msgs.join("; ");
      return;
    }
    $("#form-error").textContent = (data && data.detail) ? String(data.detail) : "HTTP " + status;
  } catch (e) {
    $("#form-error").textContent = e.message;
  } finally {
    $("#submit").disabled = false;
  }
}

// -- a whole model: every layer group, drawn as a strip of layers coloured by group --------------
function modelBody() {
  const node = collect();   // the node and engine of the "plan for" fields
  const body = {};
  if (node.node) body.node = node.node;
  if (node.engine) body.engine = node.engine;
  const line = $("#serve-line").value.trim();
  if (line) return { path: "/v1/plan/serve", body: Object.assign({ line: line }, body) };
  const raw = $("#model-json").value.trim();
  if (raw) {
    try { body.model = JSON.parse(raw); } catch (e) { throw new Error("config.json: not valid JSON (" + e.message + ")"); }
  } else {
    const ref = $("#model-ref").value.trim();
    if (!ref) throw new Error("give a model, its config.json, or a vllm serve line");
    body.model = ref;
  }
  const tp = $("#model-tp").value.trim();
  if (tp) body.tensor_parallel_size = Number.isInteger(Number(tp)) ? Number(tp) : tp;
  const kv = $("#model-kv").value.trim();
  if (kv) body.kv_cache_dtype = kv;
  return { path: "/v1/plan", body: body };
}

function groupClass(i, g) { return g.status === "not_served" ? "gn" : "g" + (i % 6); }

function showModel(a) {
  $("#model-answer").hidden = false;
  const st = $("#model-status");
  st.textContent = a.status;
  st.className = "badge " + (a.status === "ok" ? "ok" : "rejected");
  const strip = $("#layer-strip");
  strip.replaceChildren();
  $("#layer-groups tbody").replaceChildren();
  $("#kv-groups").textContent = "";
  $("#startup-error").textContent = a.startup_error ? "vLLM would refuse at startup: " + a.startup_error : "";
  $("#model-raw").textContent = JSON.stringify(a, null, 2);
  const per = a.per_rank;
  $("#model-summary").textContent = (a.vllm ? a.vllm.model : "") + " · " + a.ranks + " rank(s)" +
    (per ? " · " + per.model_type + ", " + per.num_layers + " layers · engine " + per.engine.name +
      (per.engine.version ? " " + per.engine.version : "") : "");
  if (!per) return;
  const byLayer = [];
  per.layer_groups.forEach((g, i) => g.layers.forEach((l) => { byLayer[l] = [i, g]; }));
  byLayer.forEach((x, l) => {
    const s = document.createElement("span");
    s.className = groupClass(x[0], x[1]) + " " + x[1].status;
    s.title = "layer " + l + ": " + x[1].kind + " (" + x[1].status + ")";
    strip.appendChild(s);
  });
  const body = $("#layer-groups tbody");
  per.layer_groups.forEach((g, i) => {
    const tr = document.createElement("tr");
    const sw = cell(tr, "", "swatch");
    const dot = document.createElement("span");
    dot.className = groupClass(i, g);
    sw.appendChild(dot);
    const c = g.config || {};
    const att = g.attention || {};
    cell(tr, g.kind);
    cell(tr, compactLayers(g.layers));
    cell(tr, g.layers.length);
    cell(tr, g.sliding_window || g.chunk_size || "–");
    cell(tr, c.num_qo_heads !== undefined ? c.num_qo_heads + "/" + (c.num_kv_heads || (c.kv_lora_rank ? "MLA" : c.num_qo_heads)) : "–");
    cell(tr, c.head_dim || (c.kv_lora_rank ? "MLA " + c.kv_lora_rank : "–"));
    cell(tr, att.sm_scale !== undefined ? Number(att.sm_scale).toPrecision(6) : "–");
    cell(tr, g.prefill ? g.prefill.backend : "–");
    cell(tr, g.decode ? g.decode.backend : "–");
    cell(tr, g.status, g.status === "ok" ? "ok" : "");
    cell(tr, g.violations.map((v) => v.rule).filter((r, k, xs) => xs.indexOf(r) === k).join(", ") || "–");
    body.appendChild(tr);
  });
  const kv = per.kv_cache_groups;
  if (kv) $("#kv-groups").textContent = "KV cache: " + kv.groups.length + " vLLM KV-cache group(s) of " +
    kv.layers_per_group + " layers, block " + kv.block_size + " tokens (kernel page " + kv.kernel_page_size + "), " +
    kv.page_bytes + " bytes per block";
}

function compactLayers(xs) {   // [0,1,2,5] -> "0-2,5"
  const out = [];
  let start = null, prev = null;
  for (const x of xs.concat([null])) {
    if (x !== null && prev !== null && x === prev + 1) { prev = x; continue; }
    if (start !== null) out.push(start === prev ? String(start) : start + "-" + prev);
    start = prev = x;
  }
  return out.join(",");
}

async function submitModel(ev) {
  ev.preventDefault();
  $("#model-error").textContent = "";
  $("#model-answer").hidden = true;
  $("#model-submit").disabled = true;
  try {
    const req = modelBody();
    const { status, data } = await api(req.path + "?trace=false", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(req.body),
    });
    if (status === 200) { showModel(data); return; }
    if (status === 422 && data && Array.isArray(data.detail)) {
      $("#model-error").textContent = data.detail.map((e) => e.field + ": " + e.msg).join("; ");
      return;
    }
    $("#model-error").textContent = (data && data.detail) ? String(data.detail) : "HTTP " + status;
  } catch (e) {
    $("#model-error").textContent = e.message;
  } finally {
    $("#model-submit").disabled = false;
  }
}

async function init() {
  const tok = $("#token");
  tok.value = sessionStorage.getItem(TOKEN_KEY) || "";
  tok.addEventListener("change", () => { sessionStorage.setItem(TOKEN_KEY, tok.value.trim()); start(); });
  $("#plan-form").addEventListener("submit", submitPlan);
  $("#model-form").addEventListener("submit", submitModel);
  $("#preset").addEventListener("change", (e) => applyPreset(e.target.value));
  $("#refresh").addEventListener("click", () => loadNode(true));
  const schema = await (await fetch("/openapi.json")).json();
  const cfg = Object.values(schema.components.schemas).find(
    (s) => s.properties && s.properties.num_qo_heads && s.properties.kv_cache_dtype);
  buildForm(cfg);
  await start();
  document.body.dataset.ready = "1";   // tests wait for this
}

async function start() {
  const ready = await loadReady();
  if (ready) await loadNode(false);
  else setTimeout(start, 1000);
  try {
    const p = await api("/v1/presets");
    if (p.status === 200) {
      presets = p.data.presets;
      const sel = $("#preset");
      sel.replaceChildren(sel.options[0]);
      for (const x of presets) { const o = document.createElement("option"); o.textContent = x.name; sel.appendChild(o); }
      const ml = $("#model-presets");
      ml.replaceChildren();
      for (const x of presets) { const o = document.createElement("option"); o.value = x.name; ml.appendChild(o); }
    }
    const d = await api("/v1/devices");
    if (d.status === 200) {
      const dl = $("#devices");
      dl.replaceChildren();
      for (const x of d.data.devices) { const o = document.createElement("option"); o.value = x.name; o.textContent = x.capability; dl.appendChild(o); }
    }
  } catch (e) { $("#node-error").textContent = e.message; }
}

document.addEventListener("DOMContentLoaded", init);
