"""``python -m boxcar.binary_resolver``: run one binary-resolver replica."""

from __future__ import annotations

from boxcar.binary_resolver.resolver import BinaryResolver
from boxcar.shared.service import run_main, run_service


async def main() -> None:
    async with run_service("binary-resolver", database=False) as (settings, _db, stopping):
        resolver = BinaryResolver(settings)
        stopping.add_done_callback(lambda _: resolver.stop())
        await resolver.run()


if __name__ == "__main__":
    run_main(main())
