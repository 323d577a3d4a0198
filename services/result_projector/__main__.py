"""``python -m boxcar.result_projector``: run one result-projector replica."""

from __future__ import annotations

from boxcar.result_projector.projector import ResultProjector
from boxcar.shared.service import run_main, run_service


async def main() -> None:
    async with run_service("result-projector") as (settings, db, stopping):
        projector = ResultProjector(settings, db)
        stopping.add_done_callback(lambda _: projector.stop())
        await projector.run()


if __name__ == "__main__":
    run_main(main())
