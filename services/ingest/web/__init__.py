"""ingest's web UI (server-rendered pages with htmx): the snapshot list and pages, crawls, the
add page, feeds, settings, login and accounts, and archived files and WARC replay under
``/archive/`` (served with a sandboxing CSP; replay only on the archive origin), with its
templates and static files."""
