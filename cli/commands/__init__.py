"""One module per ``boxcar`` command (``boxcar.cli.main`` puts them in one group)."""
