"""The web UI's pages about people (issue 28): sharing on purpose and the admin's users page.

- ``POST /shares`` shares a snapshot, tag or the whole archive of the logged-in user with every
  user or by a public link (the link is shown once); ``POST /shares/{id}/revoke`` stops it.
- ``GET /s/{token}`` opens a public link: the browser keeps the token in the ``boxcar_shares``
  cookie (HttpOnly, SameSite=Lax: it rides along to ``/archive/…`` on either origin of this host)
  and lands on what it shares; a revoked or unknown token is a 404.
- ``/admin/users`` (admins only; a member gets a 404): every user's usage and limits, create,
  disable/enable, set limits, and remove — with the removed user's snapshots kept, reassigned to
  the admin or deleted, as the admin chose in the form (never assumed).
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

import anyio.to_thread
from litestar import Controller, Request, get, post
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException
from litestar.params import PathParameter
from litestar.response import Redirect, Template

from boxcar.ingest import access, quotas, routes
from boxcar.ingest.library import SnapshotLibrary
from boxcar.ingest.web import accounts
from boxcar.ingest.web.accounts import opened_share_tokens, require_admin, require_login, viewer_of
from boxcar.ingest.web.pages import _safe_next, _with_flash, render

PathStr = Annotated[str, PathParameter()]


class SharePages(Controller):
    """Making, revoking and opening shares."""

    include_in_schema = False

    @post(routes.SHARES, guards=[require_login])
    async def create(self, request: Request) -> Template | Redirect:
        """Share what the form names; a public link's page shows the link once."""
        form = await request.form()
        viewer = await viewer_of(request)
        kind, audience = str(form.get("kind", "")), str(form.get("audience", ""))
        target = str(form.get("target", ""))[:128]
        db = request.app.state.db
        try:
            share = await anyio.to_thread.run_sync(lambda: access.create_share(db, viewer, kind, target, audience))
        except access.AccessError as exc:
            if kind == "snapshot":  # not the viewer's: as if it did not exist
                raise NotFoundException(str(exc)) from None
            return await render(request, "error.html", status_code=422, code=422, detail=str(exc))
        back = f"/snapshots/{share.target}#sharing" if kind == "snapshot" else "/settings#sharing"
        if not share.token:
            return Redirect(_with_flash(back, "Shared with every user."), status_code=303)
        origin = str(request.base_url).rstrip("/")
        what = {"snapshot": "this snapshot", "tag": f"your tag {share.target!r}", "archive": "your whole archive"}[kind]
        response = await render(
            request,
            "shared.html",
            status_code=201,
            link=f"{origin}{routes.PUBLIC_LINK}/{share.token}",
            what=what,
            back=back,
        )
        response.headers["Cache-Control"] = "no-store"
        return response

    @post(f"{routes.SHARES}/{{share_id:str}}/revoke", guards=[require_login])
    async def revoke(self, request: Request, share_id: PathStr) -> Redirect:
        """Stop sharing (at once: a public link answers 404 from now on)."""
        form = await request.form()
        viewer = await viewer_of(request)
        if not await anyio.to_thread.run_sync(access.revoke_share, request.app.state.db, viewer, share_id[:32]):
            raise NotFoundException("no such share")
        return Redirect(
            _with_flash(_safe_next(str(form.get("next", "/settings"))), "Stopped sharing."), status_code=303
        )

    @get(f"{routes.PUBLIC_LINK}/{{token:str}}")
    async def open(self, request: Request, token: PathStr) -> Redirect:
        """Open a public link: remember it in this browser and go to what it shares."""
        share = await anyio.to_thread.run_sync(access.open_public_share, request.app.state.db, token[:100])
        if share is None:
            raise NotFoundException("this link does not exist or was revoked")
        target = {"snapshot": f"/snapshots/{share.target}", "tag": "/?" + urlencode({"tag": share.target})}.get(
            share.kind, "/"
        )
        kept = [t for t in opened_share_tokens(request.cookies.get(access.SHARES_COOKIE, "")) if t != token]
        kept = [*kept, token][-access.MAX_OPEN_SHARES :]
        response = Redirect(target, status_code=303)
        response.set_cookie(
            access.SHARES_COOKIE,
            ".".join(kept),
            max_age=30 * 24 * 3600,
            httponly=True,
            samesite="lax",
            secure=request.url.scheme == "https",
            path="/",
        )
        return response


class AdminPages(Controller):
    """``/admin/users``: the admin's page of users, their usage and limits."""

    include_in_schema = False
    guards = [require_admin]

    @get(routes.ADMIN_USERS)
    async def users(self, request: Request) -> Template:
        rows = await anyio.to_thread.run_sync(quotas.usage, request.app.state.db)
        return await render(request, "users.html", users=rows, flash=str(request.query_params.get("flash", ""))[:300])

    @post(routes.ADMIN_USERS)
    async def create(self, request: Request) -> Template | Redirect:
        """A new user (a member unless the ``role`` chosen is ``admin``)."""
        form = await request.form()
        name, password = str(form.get("username", ""))[:64], str(form.get("password", ""))[:1024]
        role = "admin" if str(form.get("role", "")) == "admin" else "member"
        db = request.app.state.db
        try:
            operator_name = request.app.state.settings.archive_user
            await anyio.to_thread.run_sync(
                lambda: accounts.create_user(db, name, password, role=role, operator_name=operator_name)
            )
        except accounts.AccountError as exc:
            rows = await anyio.to_thread.run_sync(quotas.usage, db)
            return await render(request, "users.html", status_code=422, users=rows, flash=str(exc), flash_kind="error")
        return Redirect(_with_flash(routes.ADMIN_USERS, f"{role} {name} created."), status_code=303)

    @post(f"{routes.ADMIN_USERS}/{{username:str}}/{{action:str}}")
    async def act(
        self, request: Request, username: PathStr, action: PathStr, library: NamedDependency[SnapshotLibrary]
    ) -> Template | Redirect:
        """``disable``, ``enable``, ``limits`` (empty field: no limit) or ``remove`` (the form's
        ``snapshots``: keep, reassign to this admin, or delete)."""
        form = await request.form()
        viewer = await viewer_of(request)
        db = request.app.state.db
        name = username[:64]
        if name == viewer.username and action in ("disable", "remove"):
            return await render(request, "error.html", status_code=422, code=422, detail="not yourself")
        if action in ("disable", "enable"):
            done = await anyio.to_thread.run_sync(accounts.set_active, db, name, action == "enable")
        elif action == "limits":
            try:
                values = [
                    int(v) if (v := str(form.get(k, "")).strip()) else None for k in ("per_day", "disk", "crawls")
                ]
                done = await anyio.to_thread.run_sync(quotas.set_limits, db, name, *values)
            except (ValueError, quotas.LimitError) as exc:
                return await render(request, "error.html", status_code=422, code=422, detail=f"limits: {exc}")
        elif action == "remove":
            choice = str(form.get("snapshots", ""))
            try:
                removal = await anyio.to_thread.run_sync(
                    lambda: accounts.remove_user(
                        db,
                        name,
                        choice,
                        to=viewer.username if choice == "reassign" else "",
                        delete_snapshot=lambda sid: library.delete(sid, viewer=viewer),
                    )
                )
            except accounts.AccountError as exc:
                return await render(request, "error.html", status_code=422, code=422, detail=str(exc))
            done = removal is not None
        else:
            raise NotFoundException(f"no action {action[:20]}")
        if not done:
            raise NotFoundException(f"no user {name}")
        return Redirect(_with_flash(routes.ADMIN_USERS, f"{name}: {action} done."), status_code=303)
