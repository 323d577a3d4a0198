"""``/settings``' webhooks: make one (its secret shown once on the page that answers) and
delete one. The list with each webhook's last deliveries is part of ``/settings``
(``pages.settings_page``); the rules are ``boxcar.ingest.webhooks``'."""

from __future__ import annotations

from typing import Annotated

import anyio.to_thread
from litestar import Controller, Request, post
from litestar.exceptions import NotFoundException
from litestar.params import PathParameter
from litestar.response import Redirect, Template

from boxcar.ingest import routes
from boxcar.ingest.api.schemas import WebhookCreate
from boxcar.ingest.services import InputError
from boxcar.ingest.web.accounts import require_login, viewer_of
from boxcar.ingest.web.pages import settings_page
from boxcar.ingest.webhooks import WebhookService

PathStr = Annotated[str, PathParameter(max_length=64)]


class WebhookPages(Controller):
    include_in_schema = False

    @post(routes.SETTINGS_WEBHOOKS, guards=[require_login])
    async def create(self, request: Request) -> Template:
        form = await request.form()
        body = WebhookCreate(
            url=str(form.get("url", ""))[:2048],
            events=[str(e)[:32] for e in form.getall("events", [])][:10],
            scope=str(form.get("scope", "user"))[:16],
        )
        viewer = await viewer_of(request)
        service = WebhookService(request.app.state.db, request.app.state.settings)
        try:
            if not body.events:
                raise InputError("events", "choose at least one event")
            made = await anyio.to_thread.run_sync(lambda: service.create(body, viewer))
        except InputError as exc:
            return await settings_page(request, status_code=422, flash=str(exc), flash_kind="error")
        response = await settings_page(request, status_code=201, new_webhook=made)
        response.headers["Cache-Control"] = "no-store"
        return response

    @post(f"{routes.SETTINGS_WEBHOOKS}/{{webhook_id:str}}/delete", guards=[require_login])
    async def delete(self, request: Request, webhook_id: PathStr) -> Redirect:
        viewer = await viewer_of(request)
        service = WebhookService(request.app.state.db, request.app.state.settings)
        if not await anyio.to_thread.run_sync(lambda: service.delete(webhook_id[:32], viewer)):
            raise NotFoundException("no such webhook")
        return Redirect(f"{routes.SETTINGS}#webhooks", status_code=303)
