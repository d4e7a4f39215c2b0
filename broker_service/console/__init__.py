"""The operations console at ``/console``: server-rendered pages beside the REST API.

Another adapter over the same domain services the routes call (``app.state``), with the same
permission table (:mod:`broker_service.api.permissions`) and through the same gate, which takes a
signed session cookie instead of a request signature on ``/console`` paths only
(:mod:`.sessions`).  Every action is written to the audit log (:mod:`.auditing`).  docs/console.md
is its manual.
"""
