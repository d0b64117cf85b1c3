"""attnplan's REST service: ``api.app.create_app`` builds it, ``attnplan serve`` runs it.

app.py (wiring, error handlers), routes.py (the endpoints), models.py (bodies and documented
answers), service.py (answer caches), readiness.py (background probe and artifactory check),
security.py (bearer token, body limit), metrics.py (Prometheus), presets.py (examples/ as
form presets), server.py (uvicorn), static/ (the status page).
"""
