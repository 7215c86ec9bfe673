"""Tidings: reliable outbound webhooks with PostgreSQL as the source of truth."""

__version__ = "0.1.0"
