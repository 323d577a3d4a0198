"""crawl-runner: the only owner of Crawl/Snapshot transitions (conditional claims on ``retry_at``)."""
