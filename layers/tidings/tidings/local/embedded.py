"""The embedded PostgreSQL (the ``pgserver`` package), which the ``local`` extra installs.

``pip install tidings`` is the operator CLI, for a PostgreSQL of one's own (``DATABASE_URL``);
``tidings dev``, ``tidings demo`` and ``tidings schema`` without one start an embedded server,
which ``pip install 'tidings[local]'`` adds. Without it they stop with ``LocalExtraMissing``,
whose message names that command, before they start anything, instead of an import traceback.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

LOCAL_EXTRA_INSTALL = "pip install 'tidings[local]'"


class LocalExtraMissing(RuntimeError):
    """The embedded PostgreSQL is not installed; the message says how to install it."""


def embedded_postgres_package() -> ModuleType:
    """The ``pgserver`` package, or ``LocalExtraMissing`` naming the extra that brings it."""
    try:
        import pgserver
    except ImportError as exc:
        # Also a pgserver whose own dependencies are missing: installing the extra mends both.
        raise LocalExtraMissing(
            f"the embedded PostgreSQL is not installed ({exc}); install the local runtime "
            f"with: {LOCAL_EXTRA_INSTALL}"
        ) from exc
    return pgserver


class EmbeddedPostgres:
    """A pgserver instance whose data lives in ``data_dir``; started on construction."""

    def __init__(self, data_dir: Path, *, delete_on_stop: bool = False) -> None:
        pgserver = embedded_postgres_package()
        data_dir.mkdir(parents=True, exist_ok=True)
        self._server = pgserver.get_server(
            data_dir.resolve(), cleanup_mode="delete" if delete_on_stop else "stop"
        )
        self.dsn: str = self._server.get_uri()

    def stop(self) -> None:
        self._server.cleanup()
