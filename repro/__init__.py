"""LRA-repro: rerun, check and extend the Long Range Arena benchmark."""

__version__ = "0.1.0"
