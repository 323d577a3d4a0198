"""``python -m boxcar.shared.migrations``: upgrade the schema of the database whose URL is in
``BOXCAR_MIGRATE_URL`` (``Database.upgrade_in_child`` starts it; by hand: ``boxcar migrate``)."""

from __future__ import annotations

import os
import sys

from boxcar.shared.db import MIGRATE_URL_ENV, Database


def main() -> None:
    url = os.environ.get(MIGRATE_URL_ENV)
    if not url:  # by hand, use `boxcar migrate`: this is Database.upgrade_in_child's child
        sys.exit(f"{MIGRATE_URL_ENV} is not set (to upgrade by hand, run `boxcar migrate`)")
    db = Database(url)
    try:
        db.upgrade()
    except Exception as exc:  # one line for the parent's error; the service logs it and stops
        sys.exit(f"{type(exc).__name__}: {exc}")
    finally:
        db.dispose()


if __name__ == "__main__":
    main()
