"""Imports the subcommand modules of ``tidegate.cli`` so each registers on ``main``."""
from tidegate.cli import (
    console,  # noqa: F401
    consumer_groups,  # noqa: F401
)
