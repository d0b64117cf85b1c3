"""``--html FILE``: one self-contained page (no external resources, no network).

A groups x configs grid and a nodes x configs grid, cells green (runs), amber (runs, but unlike
most nodes), red (rejected), grey (unreachable, error, no GPU, skipped); a click on a cell
shows its violations (rule, phase, backend, observed, required, message), the verified
suggestions and notes; for a whole model, each layer group's verdict and backends (the cell names
the first failing group's rule). The data rides along as JSON inside the page and is only ever inserted
with ``textContent``, so node names and messages cannot inject markup.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any


from .files import replace_atomically
from .model import PreflightReport
from .text import compact_names

CSS = """
:root{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;color:#1b1f24;background:#fff}
body{margin:1.2rem 1.6rem}
h1{font-size:1.3rem;margin:0 0 .3rem}
h2{font-size:1.05rem;margin:1.4rem 0 .4rem}
.summary{font-weight:600;margin:.4rem 0}
.exit-0{color:#116329}.exit-1{color:#b42318}.exit-3,.exit-130{color:#9a6700}
.meta{color:#57606a;font-size:.85rem}
ul.warnings li{color:#9a6700}
table{border-collapse:collapse;font-size:.85rem}
th,td{border:1px solid #d0d7de;padding:.25rem .45rem;text-align:left;vertical-align:top}
th{background:#f6f8fa;position:sticky;top:0}
td.cell{cursor:pointer;white-space:nowrap}
td.cell:hover{outline:2px solid #0969da}
td.cell.selected{outline:3px solid #0969da}
.v-pass{background:#b7ebc3}.v-warn{background:#f5e08a}.v-fail{background:#f7b4ae}
.v-error{background:#c9ced4}.v-skip{background:#e6e8eb}
#details{position:fixed;top:0;right:0;width:min(46rem,48vw);height:100vh;overflow:auto;box-sizing:border-box;
 background:#fff;border-left:3px solid #0969da;box-shadow:-4px 0 12px rgba(0,0,0,.15);padding:.8rem 1rem}
#details h2{margin-top:0}
#details button.close{float:right}
#details[hidden]{display:none}
#details table{margin:.3rem 0}
code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace}
"""

JS = r"""
(function(){
  var data = JSON.parse(document.getElementById('report-data').textContent);
  var panel = document.getElementById('details');
  function el(tag, text, cls){ var e=document.createElement(tag); if(text!==undefined&&text!==null) e.textContent=String(text); if(cls) e.className=cls; return e; }
  function tableOf(headers, rows){
    var t=el('table'), tr=el('tr');
    headers.forEach(function(h){ tr.appendChild(el('th',h)); }); t.appendChild(tr);
    rows.forEach(function(r){ var row=el('tr'); r.forEach(function(c){ row.appendChild(el('td', c===null||c===undefined?'-':(typeof c==='object'?JSON.stringify(c):c))); }); t.appendChild(row); });
    return t;
  }
  function show(td){
    var g = data.groups[td.getAttribute('data-group')];
    var ci = +td.getAttribute('data-config');
    var cell = g.results[ci], cfg = data.configs[ci];
    document.querySelectorAll('td.cell.selected').forEach(function(x){ x.classList.remove('selected'); });
    td.classList.add('selected');
    panel.textContent='';
    var close = el('button', 'close \u00d7', 'close'); close.addEventListener('click', function(){ panel.hidden = true; });
    panel.appendChild(close);
    var who = td.getAttribute('data-node') || ('group ' + g.id + ' (' + g.count + ' nodes: ' + g.members + ')');
    panel.appendChild(el('h2', who + ' \u00d7 ' + cfg.name));
    panel.appendChild(el('p', 'verdict: ' + cell.verdict + (cell.reason ? ' \u2014 ' + cell.reason : ''), 'verdict'));
    if (cell.prefill) panel.appendChild(el('p', 'prefill ' + cell.prefill + ', decode ' + cell.decode + ', KV ' + cell.kv_layout + ' page ' + cell.page_size + ' (' + cell.kv_view_dtype + ')'));
    if (g.device) panel.appendChild(el('p', 'device ' + g.device + ', capability ' + g.capability + ', fingerprint ' + g.fingerprint, 'meta'));
    if (cell.layer_groups && cell.layer_groups.length){
      panel.appendChild(el('h3','layer groups (every one must pass)'));
      var lt = tableOf(['kind','layers','count','status','prefill','decode','violations'], cell.layer_groups.map(function(g){ return [g.kind,g.layers,g.count,g.status,g.prefill,g.decode,(g.violations||[]).join(', ')]; }));
      lt.className='layer-groups'; panel.appendChild(lt);
    }
    if (cell.details && cell.details.length){
      panel.appendChild(el('h3','violations'));
      var vt = tableOf(['rule','phase','backend','observed','required','message'], cell.details.map(function(v){ return [v.rule,v.phase,v.backend,v.observed,v.required,v.message]; }));
      vt.className='violations'; panel.appendChild(vt);
    }
    if (cell.suggestions && cell.suggestions.length){
      panel.appendChild(el('h3','suggestions (each verified by re-evaluating every rule)'));
      var st = tableOf(['field','value','result'], cell.suggestions.map(function(s){ return [s.field, s.value, s.message]; }));
      st.className='suggestions'; panel.appendChild(st);
    } else if (cell.verdict === 'fail') {
      panel.appendChild(el('p','no single-field change makes this config valid on this node.'));
    }
    if (cell.notes && cell.notes.length){
      var ul = el('ul'); cell.notes.forEach(function(n){ ul.appendChild(el('li', n)); }); panel.appendChild(el('h3','notes')); panel.appendChild(ul);
    }
    panel.hidden = false;
  }
  document.querySelectorAll('td.cell').forEach(function(td){
    td.addEventListener('click', function(){ show(td); });
    td.addEventListener('keydown', function(e){ if(e.key==='Enter'||e.key===' '){ e.preventDefault(); show(td); } });
  });
})();
"""

CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"


def _e(v: Any) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def _cell_label(c: Any, status: str) -> str:
    if c.verdict in ("pass", "warn"):
        groups = f" ({len(c.layer_groups)} layer groups)" if len(c.layer_groups) > 1 else ""
        return f"{c.prefill} / {c.decode}{groups}" + (" *" if c.verdict == "warn" else "")
    if c.verdict == "fail" and (c.layer_groups or c.first_failing):  # a model: its first failing group's rule
        return "rejected: " + (c.reason or ", ".join(c.violations[:3]))
    if c.verdict == "fail":
        return "rejected: " + ", ".join(c.violations[:3]) + (" ..." if len(c.violations) > 3 else "")
    return {"no-gpu": "no GPU", "unreachable": "unreachable", "error": "error", "skipped": "skipped"}.get(status, status)


def _td(c: Any, status: str, group_index: int, node: str | None) -> str:
    title = c.reason or (f"{c.prefill}/{c.decode} {c.kv_layout}/{c.page_size}" if c.prefill else c.verdict)
    node_attr = f' data-node="{_e(node)}"' if node is not None else ""
    return (f'<td class="cell v-{c.verdict}" tabindex="0" data-verdict="{c.verdict}" data-group="{group_index}" '
            f'data-config="{c.config}"{node_attr} title="{_e(title)}">{_e(_cell_label(c, status))}</td>')


def render_html(report: PreflightReport) -> str:
    s = report.summary
    q = report.query
    gindex = {g.id: i for i, g in enumerate(report.groups)}
    data = {
        "configs": [{"name": c.name, "config": c.config} for c in q.configs],
        "groups": [{"id": g.id, "count": g.count, "members": compact_names(g.members, 200), "device": g.device,
                    "capability": g.capability, "fingerprint": g.fingerprint, "status": g.status,
                    "results": [r.model_dump(mode="json") for r in g.results]} for g in report.groups],
    }
    # No "<", ">" or "&" inside the <script> at all (JSON's \u escapes decode them again).
    blob = (json.dumps(data, ensure_ascii=True, default=str)
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))
    cfg_heads = "".join(f"<th>{_e(c.name)}</th>" for c in q.configs)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>attnplan preflight: {_e(s.line)}</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>attnplan preflight</h1>",
        f'<p class="summary exit-{s.exit_code}" id="summary">{_e(s.line)}</p>',
        f'<p class="meta">source {_e(q.source)} ({_e(", ".join(q.targets)[:300])}); rules revision '
        f"<code>{_e(report.rules_revision)}</code>; generated {_e(report.generated_at)}; exit code {s.exit_code}; "
        f"{s.elapsed_s:.2f} s</p>",
        "<h2>configs</h2><ul>",
    ]
    for c in q.configs:
        fields = c.description
        parts.append(f"<li><b>{_e(c.name)}</b>: <code>{_e(fields)}</code></li>")
    parts.append("</ul>")
    if report.warnings:
        parts.append('<h2>warnings</h2><ul class="warnings">')
        parts += [f'<li data-kind="{_e(w.kind)}">{_e(w.message)}</li>' for w in report.warnings]
        parts.append("</ul>")
    parts.append('<p class="meta">Click a cell for its violations and suggestions. Green: runs; amber (*): runs, '
                 "but with other kernels than most nodes; red: rejected; grey: no answer, error or no GPU.</p>")
    parts.append(f'<h2>groups ({len(report.groups)})</h2><table id="groups"><tr><th>#</th><th>nodes</th>'
                 f"<th>members</th><th>device</th><th>capability</th><th>status</th>{cfg_heads}<th>reason</th></tr>")
    for g in report.groups:
        cells = "".join(_td(c, g.status, gindex[g.id], None) for c in g.results)
        parts.append(f'<tr data-group-id="{g.id}"><td>{g.id}</td><td>{g.count}</td><td>{_e(compact_names(g.members, 80))}</td>'
                     f"<td>{_e(g.device or '-')}</td><td>{_e(g.capability or '-')}</td><td>{_e(g.status)}</td>"
                     f"{cells}<td>{_e(g.reason or '')}</td></tr>")
    parts.append("</table>")
    parts.append(f'<h2>nodes ({len(report.nodes)})</h2><table id="nodes"><tr><th>node</th><th>address</th>'
                 f"<th>device</th><th>capability</th><th>status</th><th>group</th>{cfg_heads}</tr>")
    for r in sorted(report.nodes, key=lambda r: r.group):
        cells = "".join(_td(c, r.status, gindex[r.group], r.name) for c in r.results)
        parts.append(f'<tr data-node="{_e(r.name)}"><td>{_e(r.name)}</td><td>{_e(r.address or "-")}</td>'
                     f"<td>{_e(r.device or '-')}</td><td>{_e(r.capability or '-')}</td><td>{_e(r.status)}</td>"
                     f"<td>{r.group}</td>{cells}</tr>")
    parts.append("</table>")
    parts.append('<section id="details" hidden aria-live="polite"></section>')
    parts.append(f'<script type="application/json" id="report-data">{blob}</script>')
    parts.append(f"<script>{JS}</script>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_html(report: PreflightReport, path: str | Path) -> Path:
    return replace_atomically(Path(path), render_html(report))
