"""Lambda entry point (``app.handler``) of the health_monitor function.

The handler is ``tidings.handlers.health_monitor``: the code lives in the package (the tidings layer
on AWS), where ``tidings dev`` runs it too.
"""

from tidings.handlers.health_monitor import handler

__all__ = ["handler"]
