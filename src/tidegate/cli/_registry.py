"""Imports the subcommand modules of ``tidegate.cli`` so each registers on ``main``."""
