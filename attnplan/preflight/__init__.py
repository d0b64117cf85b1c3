"""Cluster preflight: which nodes can run an attention config, on which backends, and why not.

    attnplan preflight --hosts h1:8000,h2:8000 ...    # node services (preflight.http)
    attnplan preflight --ray [ADDRESS] ...            # a Ray cluster (preflight.ray_source)
    attnplan preflight --simulate "B200=8,H100=16"    # declared nodes (preflight.simulate)
    attnplan labels --output .../features.d/attnplan  # Kubernetes/NFD labels (preflight.labels)

Sources yield per-node ``model.Outcome``s; ``report.build_report`` judges them (verdicts,
groups by fingerprint, heterogeneity) into a ``model.PreflightReport`` (SPEC §9), rendered as
text (``report.render_text``), JSON (``PreflightReport.to_json``) or one HTML page
(``html.render_html``). Nothing is imported here, so ``import preflight`` stays free; httpx and
ray are imported only by the source that needs them.
"""
