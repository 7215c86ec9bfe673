"""Lambda entry point (``app.handler``) of the portal function.

The handler is ``tidings.handlers.portal``: the code lives in the package (the tidings layer
on AWS), where ``tidings dev`` runs it too.
"""

from tidings.handlers.portal import handler

__all__ = ["handler"]
