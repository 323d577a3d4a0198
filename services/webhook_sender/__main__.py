"""``python -m boxcar.webhook_sender``: run one webhook-sender replica."""

from __future__ import annotations

from boxcar.shared.service import run_main, run_service
from boxcar.webhook_sender.sender import WebhookSender


async def main() -> None:
    async with run_service("webhook-sender") as (settings, db, stopping):
        assert db is not None
        sender = WebhookSender(settings, db)
        stopping.add_done_callback(lambda _: sender.stop())
        await sender.run()


if __name__ == "__main__":
    run_main(main())
