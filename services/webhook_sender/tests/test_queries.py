"""The webhook-sender's delivery rows, on SQLite and Postgres: an event redelivered inserts
nothing more, a claimed delivery is leased (nobody claims it again until the lease ends), and
an attempt's outcome is recorded only by the sender of that attempt."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update

from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database
from boxcar.shared.db.models import User, Webhook, WebhookDelivery
from boxcar.webhook_sender import queries as q


def test_deliveries_are_idempotent_leased_and_guarded(db: Database):
    now = utcnow()
    with db.write() as s:
        for name, role in (("alice", "member"), ("bob", "member"), ("root", "admin")):
            s.add(User(id=name.ljust(32, "0"), username=name, password_hash="!", role=role, created_at=now))
        for id_, owner, scope, events in (
            ("a" * 32, "alice", "user", ["snapshot.sealed"]),
            ("b" * 32, "bob", "user", ["snapshot.sealed"]),
            ("c" * 32, "root", "instance", ["crawl.sealed"]),
        ):
            s.add(
                Webhook(
                    id=id_, owner=owner, url="http://x/", secret_sealed="", events=events, scope=scope, created_at=now
                )
            )
    with db.write() as s:
        hooks = q.matching_webhooks(s, "snapshot.sealed", "alice", now)
        assert [h.id for h in hooks] == ["a" * 32]  # hers only, and only those wanting the event
        assert [h.id for h in q.matching_webhooks(s, "crawl.sealed", "alice", now)] == ["c" * 32]  # the instance's
        assert q.matching_webhooks(s, "snapshot.sealed", "alice", now - timedelta(seconds=1)) == []  # made later
        s.execute(update(User).where(User.username == "root").values(role="member"))
        assert q.matching_webhooks(s, "crawl.sealed", "alice", now) == []  # a demoted admin: no one's events
        s.execute(update(User).where(User.username == "alice").values(is_active=False))
        assert q.matching_webhooks(s, "snapshot.sealed", "alice", now) == []  # a disabled user's: nothing
        s.execute(update(User).values(is_active=True))
        s.execute(update(User).where(User.username == "root").values(role="admin"))
        assert q.add_deliveries(s, hooks, "snapshot.sealed", "snapshot.sealed:s1", lambda d: {"id": d}, now) == 1
    with db.write() as s:  # the same event again
        assert q.add_deliveries(s, hooks, "snapshot.sealed", "snapshot.sealed:s1", lambda d: {"id": d}, now) == 0
        (delivery,) = q.due_deliveries(s, now, 10)
        assert s.get(WebhookDelivery, delivery).payload == {"id": delivery}
        assert q.claim(s, delivery, now, now + timedelta(seconds=60))
        assert not q.claim(s, delivery, now, now + timedelta(seconds=60))  # leased
        assert q.due_deliveries(s, now + timedelta(seconds=30), 10) == []
        assert q.retry_later(s, delivery, 1, 500, "HTTP 500", now)
        assert q.claim(s, delivery, now, now + timedelta(seconds=60))  # attempt 2
        assert not q.mark_delivered(s, delivery, 1, 204, now)  # attempt 1's sender, too late
        assert q.mark_failed(s, delivery, 2, None, "x" * 5000)
        row = s.get(WebhookDelivery, delivery)
        assert (row.status, row.attempts, len(row.last_error), row.next_attempt_at) == ("failed", 2, 1000, None)
        assert not q.claim(s, delivery, now + timedelta(days=1), now)
