"""ingest: the HTTP API (Litestar) that creates Crawls and reads progress."""
