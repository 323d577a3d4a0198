"""ingest's JSON API (``/api/v1/…``, ``/healthz``, the OpenAPI document at ``/schema``):
controllers (thin: parse, call a service, return a schema), request and response schemas, the
API-token guards, and what the generated OpenAPI document needs added. Scripts use API tokens;
the API never accepts the web UI's session cookie."""
