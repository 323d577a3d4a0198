"""``python -m boxcar.shared.migrations``: upgrade the schema of the database whose URL is in
``BOXCAR_MIGRATE_URL`` (``Database.upgrade_in_child`` starts it), or else the settings' database."""

from __future__ import annotations

import os
import sys

from boxcar.shared.db import MIGRATE_URL_ENV, Database


def main() -> None:
    url = os.environ.get(MIGRATE_URL_ENV)
    if not url:
        from boxcar.shared.settings import get_settings

        url = get_settings().sqlalchemy_url
    db = Database(url)
    try:
        db.upgrade()
    except Exception as exc:  # one line for the parent's error; the service logs it and stops
        sys.exit(f"{type(exc).__name__}: {exc}")
    finally:
        db.dispose()


if __name__ == "__main__":
    main()
