"""The ``boxcar`` command: run the embedded stack, add URLs, list what is archived."""
