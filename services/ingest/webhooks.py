"""Webhooks: ingest makes and deletes ``Webhook`` rows and reads their delivery log (the
webhook-sender owns ``WebhookDelivery`` rows and sends them).

A member's webhook hears of their own archive; an admin may make one for the whole instance.
Another member's webhook is as unknown as one that does not exist. A URL the egress policy
refuses (a private address the operator did not allow, one of the stack's own services) is
refused at creation, saying why; the sender checks again at each connection.
"""

from __future__ import annotations

import secrets as random
from urllib.parse import urlsplit

import msgspec
from sqlalchemy import ColumnElement, select, true

from boxcar.ingest.access import Viewer
from boxcar.ingest.api.schemas import WebhookCreate, WebhookCreated, WebhookDeliveryOut, WebhookOut
from boxcar.ingest.services import InputError
from boxcar.shared import secrets
from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database
from boxcar.shared.db.models import WEBHOOK_EVENTS, WEBHOOK_SCOPES, Webhook, WebhookDelivery
from boxcar.shared.egress import EgressPolicy, url_refusal
from boxcar.shared.ids import new_id
from boxcar.shared.settings import Settings

#: deliveries the log shows, newest first
LOG_SIZE = 50


def webhook_out(w: Webhook) -> WebhookOut:
    return WebhookOut(
        id=w.id,
        url=w.url,
        events=list(w.events or []),
        scope=w.scope,
        owner=w.owner,
        is_active=w.is_active,
        created_at=w.created_at,
    )


def _visible(viewer: Viewer) -> ColumnElement[bool]:
    """Which webhooks ``viewer`` may see: their own; an admin every one."""
    return true() if viewer.is_admin else Webhook.owner == viewer.username


class WebhookService:
    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings

    def create(self, body: WebhookCreate, viewer: Viewer) -> WebhookCreated:
        """Store a webhook of ``viewer`` with a new secret (blocking DNS: run it in a thread).

        Raises:
            InputError: a URL that is not http(s) or that the egress policy refuses, an unknown
                event, or an instance-wide webhook asked by a member.
        """
        url = body.url.strip()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or len(url) > 2048:
            raise InputError("url", "an http:// or https:// URL (at most 2048 characters)")
        if parts.username or parts.password:
            raise InputError("url", "no credentials in the URL: the signature authenticates Boxcar")
        unknown = [e for e in body.events if e not in WEBHOOK_EVENTS]
        if unknown:
            raise InputError("events", f"unknown {', '.join(unknown)}; one of {', '.join(WEBHOOK_EVENTS)}")
        if body.scope not in WEBHOOK_SCOPES:
            raise InputError("scope", f"one of {', '.join(WEBHOOK_SCOPES)}")
        if body.scope == "instance" and not viewer.is_admin:
            raise InputError("scope", "only an admin may make an instance-wide webhook")
        refusal = url_refusal(EgressPolicy.from_settings(self.settings), url)
        if refusal:
            raise InputError("url", f"Boxcar may not send to it: {refusal}")
        secret = random.token_urlsafe(32)
        webhook = Webhook(
            id=new_id(),
            owner=viewer.username,
            url=url,
            secret_sealed=secrets.seal(secret),
            events=list(dict.fromkeys(body.events)),
            scope=body.scope,
            is_active=True,
            created_at=utcnow(),
        )
        with self.db.write() as s:
            s.add(webhook)
            s.flush()
            out = webhook_out(webhook)
        return WebhookCreated(webhook=out, secret=secret)

    def list(self, viewer: Viewer) -> list[WebhookOut]:
        with self.db.read() as s:
            rows = s.scalars(select(Webhook).where(_visible(viewer)).order_by(Webhook.created_at, Webhook.id))
            return [webhook_out(w) for w in rows]

    def _get(self, s, webhook_id: str, viewer: Viewer) -> Webhook | None:  # type: ignore[no-untyped-def]
        return s.scalar(select(Webhook).where(Webhook.id == webhook_id, _visible(viewer)))

    def delete(self, webhook_id: str, viewer: Viewer) -> bool:
        """Delete a webhook of ``viewer``'s and its log (False: no such webhook of theirs)."""
        with self.db.write() as s:
            webhook = self._get(s, webhook_id, viewer)
            if webhook is None:
                return False
            s.delete(webhook)
        return True

    def overview(self, viewer: Viewer, last: int = 5) -> list[tuple[WebhookOut, list[WebhookDeliveryOut]]]:
        """The viewer's webhooks, each with its ``last`` deliveries (``/settings``)."""
        return [(w, self.deliveries(w.id, viewer, last) or []) for w in self.list(viewer)]

    def deliveries(self, webhook_id: str, viewer: Viewer, limit: int = LOG_SIZE) -> list[WebhookDeliveryOut] | None:
        """The webhook's last deliveries, newest first (None: no such webhook of theirs)."""
        with self.db.read() as s:
            if self._get(s, webhook_id, viewer) is None:
                return None
            rows = s.scalars(
                select(WebhookDelivery)
                .where(WebhookDelivery.webhook_id == webhook_id)
                .order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id.desc())
                .limit(limit)
            )
            return [msgspec.convert(d, WebhookDeliveryOut, from_attributes=True) for d in rows]
