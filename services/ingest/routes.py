"""Every path ingest serves, in one place: the JSON API under ``API``, the web UI's pages, and
archived files and replay. Controllers, pages, the CSRF exclusions and the login redirect read
them from here; templates link to the same paths."""

from __future__ import annotations

# --------------------------------------------------------------------------- the JSON API
API = "/api/v1"
CRAWLS = f"{API}/crawls"
CRAWL = f"{CRAWLS}/{{crawl_id:str}}"
SNAPSHOTS = f"{API}/snapshots"
SEARCH = f"{API}/search"
IMPORTS = f"{API}/imports"
EXPORTS = f"{API}/exports"
FEEDS = f"{API}/feeds"
WEBHOOKS = f"{API}/webhooks"
SCHEDULES = f"{API}/schedules"
STATUS = f"{API}/status"
HEALTH = "/healthz"
METRICS = "/metrics"
#: ArchiveBox's API paths that answer here (``api/archivebox.py``)
ARCHIVEBOX_API_ROOT = "/api"
ARCHIVEBOX_CHECK_TOKEN = f"{API}/auth/check_api_token"
ARCHIVEBOX_ADD = f"{API}/cli/add"
ARCHIVEBOX_REMOVE = f"{API}/cli/remove"
SCHEMA = "/schema"

# --------------------------------------------------------------------------- the web UI
HOME = "/"
LOGIN = "/login"
LOGOUT = "/logout"
#: single sign-on with OpenID Connect (``web/sso.py``): off to the provider, and back
LOGIN_OIDC = "/login/oidc"
LOGIN_OIDC_CALLBACK = f"{LOGIN_OIDC}/callback"
ADD = "/add"
ADD_PREVIEW = "/add/preview"
CRAWL_PAGES = "/crawls"
FEED_PAGES = "/feeds"
SETTINGS = "/settings"
SETTINGS_WEBHOOKS = f"{SETTINGS}/webhooks"
BULK = "/snapshots/bulk"
EXPORT_PAGES = "/export"
LIST_VIEW = "/preferences/list-view"
#: sharing (``web/people.py``): make and revoke shares, open a public link
SHARES = "/shares"
PUBLIC_LINK = "/s"
#: the admin's page of users
ADMIN_USERS = "/admin/users"
STATIC = "/static"
#: the installable app (PWA): its manifest, its app-shell service worker, the favicon
MANIFEST = "/manifest.webmanifest"
SERVICE_WORKER = "/sw.js"
FAVICON = "/favicon.ico"

# --------------------------------------------------------------------------- archived content
ARCHIVE = "/archive"
REPLAY = "/replay"
REPLAY_VIEW = "/replay-view"

#: paths whose requests carry an API token, never the session cookie: no CSRF token needed
CSRF_EXEMPT = [f"^{API}/", f"^{HEALTH}", f"^{SCHEMA}"]
#: paths a page GET without a session is not redirected to the login from (they answer 401/404)
NOT_PAGES = (f"{API}/", ARCHIVEBOX_API_ROOT, f"{ARCHIVE}/", REPLAY)
