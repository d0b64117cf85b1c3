"""Cluster preflight: which nodes can run an attention config, on which backends, and why not.

    attnplan preflight --hosts h1:8000,h2:8000 ...    # node services (preflight.http)
    attnplan preflight --ray [ADDRESS] ...            # a Ray cluster (preflight.ray_source)
    attnplan preflight --simulate "B200=8,H100=16"    # declared nodes (preflight.simulate)
    attnplan labels --output .../features.d/attnplan  # Kubernetes/NFD labels (preflight.labels)

Sources yield per-node ``model.Outcome``s (an HTTP answer counts only when ``answers``
accepts it); ``report.build_report`` judges them (``verdicts``: one node; ``grouping``: groups
by fingerprint, heterogeneity) into a ``model.PreflightReport`` (docs/contract.md, Errors and exit codes), rendered as text
(``text.render_text``, node strings cleaned of control characters), JSON
(``PreflightReport.to_json``) or one HTML page (``html.render_html``). Nothing is imported
here, so ``import attnplan.preflight`` stays free; httpx and ray are imported only by the
source that needs them.
"""
