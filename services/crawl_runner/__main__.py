"""``python -m boxcar.crawl_runner``: run one crawl-runner replica."""

from __future__ import annotations

from boxcar.crawl_runner.runner import CrawlRunner
from boxcar.shared.service import run_main, run_service


async def main() -> None:
    async with run_service("crawl-runner") as (settings, db, stopping):
        runner = CrawlRunner(settings, db)
        stopping.add_done_callback(lambda _: runner.stop())
        await runner.run()


if __name__ == "__main__":
    run_main(main())
