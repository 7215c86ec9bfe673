"""Lambda entry point (``app.handler``) of the authorizer function.

The handler is ``tidings.handlers.authorizer``: the code lives in the package (the tidings layer
on AWS), where ``tidings dev`` runs it too.
"""

from tidings.handlers.authorizer import handler

__all__ = ["handler"]
