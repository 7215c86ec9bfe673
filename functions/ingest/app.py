"""Lambda entry point (``app.handler``) of the ingest function.

The handler is ``tidings.handlers.ingest``: the code lives in the package (the tidings layer
on AWS), where ``tidings dev`` runs it too.
"""

from tidings.handlers.ingest import handler

__all__ = ["handler"]
