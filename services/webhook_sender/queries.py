"""Every change the webhook-sender makes to ``WebhookDelivery`` rows, each a named statement with
its guard in view (DESIGN.md: one writer per row, conditional transitions):

==================  ===========================  =====================================================
statement           from                         to
==================  ===========================  =====================================================
``add_deliveries``  (none)                       pending, due now; nothing when (webhook, event_key)
                                                 exists (a redelivered event)
``claim``           pending, due                 pending, ``attempts + 1``, leased to
                                                 ``next_attempt_at = lease_until``
``mark_delivered``  pending, this attempt        delivered
``retry_later``     pending, this attempt        pending, due at the back-off
``mark_failed``     pending, this attempt        failed (the last attempt failed)
==================  ===========================  =====================================================

"this attempt" (``attempts == attempt``) makes a sender whose lease ran out, and whose delivery
another replica claimed again, unable to overwrite that replica's outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from boxcar.shared.db import insert_for
from boxcar.shared.db.models import User, Webhook, WebhookDelivery
from boxcar.shared.ids import new_id

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
MAX_ERROR = 1000


def matching_webhooks(s: Session, event: str, owner: str, at: datetime, operator_name: str = "system") -> list[Webhook]:
    """The active webhooks that want ``event`` of ``owner``'s archive: theirs, and the
    instance-wide ones; only those made before the event (a new webhook is not sent the past).
    Only as long as their owner may still have them: an active user (a webhook of a disabled or
    removed user sends nothing), and for an instance-wide one an admin (one demoted stops getting
    everyone's events); the operator (``ARCHIVE_USER``) is always both."""
    active = select(User.username).where(User.is_active.is_(True))
    admins = active.where(User.role == "admin")
    rows = s.scalars(
        select(Webhook).where(
            Webhook.is_active.is_(True),
            or_(
                and_(Webhook.scope == "user", Webhook.owner == owner),
                and_(Webhook.scope == "instance", or_(Webhook.owner.in_(admins), Webhook.owner == operator_name)),
            ),
            or_(Webhook.owner.in_(active), Webhook.owner == operator_name),
            Webhook.created_at <= at,
        )
    ).all()
    return [w for w in rows if event in (w.events or [])]


def add_deliveries(
    s: Session,
    webhooks: list[Webhook],
    event: str,
    event_key: str,
    payload: Callable[[str], dict[str, Any]],
    now: datetime,
) -> int:
    """One pending delivery of ``event`` per webhook, due now (``payload(delivery_id)`` is its
    body); a (webhook, ``event_key``) already there is left alone. Returns how many were added."""
    insert = insert_for(s)
    added = 0
    for webhook in webhooks:
        delivery_id = new_id()
        result = s.execute(
            insert(WebhookDelivery)
            .values(
                id=delivery_id,
                webhook_id=webhook.id,
                event=event,
                event_key=event_key,
                payload=payload(delivery_id),
                status=PENDING,
                attempts=0,
                next_attempt_at=now,
                last_error="",
                created_at=now,
            )
            .on_conflict_do_nothing(index_elements=["webhook_id", "event_key"])
            .returning(WebhookDelivery.id)
        )
        added += result.scalar() is not None
    return added


def due_deliveries(s: Session, now: datetime, limit: int) -> list[str]:
    """Ids of pending deliveries due by ``now`` (of active webhooks), oldest first."""
    return list(
        s.scalars(
            select(WebhookDelivery.id)
            .join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
            .where(
                WebhookDelivery.status == PENDING,
                WebhookDelivery.next_attempt_at <= now,
                Webhook.is_active.is_(True),
            )
            .order_by(WebhookDelivery.next_attempt_at, WebhookDelivery.id)
            .limit(limit)
        )
    )


def claim(s: Session, delivery_id: str, now: datetime, lease_until: datetime) -> bool:
    """Take a due pending delivery for one attempt: ``attempts + 1``, leased until
    ``lease_until`` (another replica's ``due_deliveries`` skips it until then)."""
    result = s.execute(
        update(WebhookDelivery)
        .where(
            WebhookDelivery.id == delivery_id,
            WebhookDelivery.status == PENDING,
            WebhookDelivery.next_attempt_at <= now,
        )
        .values(attempts=WebhookDelivery.attempts + 1, next_attempt_at=lease_until)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def _this_attempt(delivery_id: str, attempt: int) -> Any:
    return and_(
        WebhookDelivery.id == delivery_id,
        WebhookDelivery.status == PENDING,
        WebhookDelivery.attempts == attempt,
    )


def mark_delivered(s: Session, delivery_id: str, attempt: int, response_status: int, now: datetime) -> bool:
    result = s.execute(
        update(WebhookDelivery)
        .where(_this_attempt(delivery_id, attempt))
        .values(
            status=DELIVERED, response_status=response_status, delivered_at=now, next_attempt_at=None, last_error=""
        )
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def retry_later(
    s: Session, delivery_id: str, attempt: int, response_status: int | None, error: str, at: datetime
) -> bool:
    result = s.execute(
        update(WebhookDelivery)
        .where(_this_attempt(delivery_id, attempt))
        .values(next_attempt_at=at, response_status=response_status, last_error=error[:MAX_ERROR])
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def mark_failed(s: Session, delivery_id: str, attempt: int, response_status: int | None, error: str) -> bool:
    result = s.execute(
        update(WebhookDelivery)
        .where(_this_attempt(delivery_id, attempt))
        .values(status=FAILED, next_attempt_at=None, response_status=response_status, last_error=error[:MAX_ERROR])
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]
