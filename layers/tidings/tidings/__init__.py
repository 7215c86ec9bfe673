"""Tidings: reliable outbound webhooks with PostgreSQL as the source of truth."""

# The one place the version is written: pyproject.toml reads it from here (dynamic version).
__version__ = "0.2.0"
