"""``python -m boxcar.hook_executor --family NAME``: run one executor process of a family's pool."""

from __future__ import annotations

import argparse

from boxcar.hook_executor.worker import HookExecutor
from boxcar.shared.families import load_families
from boxcar.shared.service import run_main, run_service


async def main(family: str, concurrency: int | None) -> None:
    async with run_service(f"hook-executor-{family}", database=False) as (settings, _db, stopping):
        executor = HookExecutor(settings, family, concurrency=concurrency)
        stopping.add_done_callback(lambda _: executor.stop())
        await executor.run()


def cli() -> None:
    families = sorted(load_families().families)
    parser = argparse.ArgumentParser(prog="hook-executor", description=__doc__)
    parser.add_argument("--family", required=True, choices=families, help="family whose tasks to run")
    parser.add_argument("--concurrency", type=int, default=None, help="tasks at once (EXECUTOR_CONCURRENCY)")
    args = parser.parse_args()
    run_main(main(args.family, args.concurrency))


if __name__ == "__main__":
    cli()
