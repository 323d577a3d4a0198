"""Boxcar's shared library: what every service agrees on.

Modules, one concern each:

- ``settings``   typed settings read from the environment (12-factor)
- ``messages``   every message that crosses a service boundary (msgspec Structs)
- ``bus``        NATS/JetStream streams, consumers, subjects and publishing helpers
- ``db``         SQLAlchemy models, engine set-up and Alembic migrations
- ``storage``    the ArchiveBox-compatible on-disk layout under ``DATA_DIR``
- ``families``   which plugins run in which executor pool, and in which stage
- ``plugins``    the abx-plugins catalogue: hooks, config resolution, required binaries
- ``urls``       URL validation and canonicalization
- ``telemetry``  OpenTelemetry set-up and W3C trace-context propagation
- ``metrics``    every Prometheus metric, defined once, and the ``METRICS_PORT`` server
"""
