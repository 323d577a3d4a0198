"""``python -m boxcar.ingest``: serve the API with uvicorn on ``API_HOST:API_PORT``."""

from __future__ import annotations

import uvicorn

from boxcar.ingest.app import create_app
from boxcar.shared import telemetry
from boxcar.shared.service import setup_logging
from boxcar.shared.settings import get_settings


def main() -> None:
    setup_logging("ingest")
    telemetry.setup_tracing("ingest")
    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    try:
        uvicorn.run(
            create_app(settings), host=settings.api_host, port=settings.api_port, log_level="warning", access_log=False
        )
    finally:
        telemetry.shutdown_tracing()  # flush spans still buffered


if __name__ == "__main__":
    main()
