"""Lambda entry point (``app.handler``) of the sender function.

The handler is ``tidings.handlers.sender``: the code lives in the package (the tidings layer
on AWS), where ``tidings dev`` runs it too.
"""

from tidings.handlers.sender import handler

__all__ = ["handler"]
