"""Lambda entry point (``app.handler``) of the migrator function.

The handler is ``tidings.handlers.migrator``: the code lives in the package (the tidings layer
on AWS), where ``tidings dev`` runs it too.
"""

from tidings.handlers.migrator import handler

__all__ = ["handler"]
