"""Lambda entry point (``app.handler``) of the pruner function.

The handler is ``tidings.handlers.pruner``: the code lives in the package (the tidings layer
on AWS), where ``tidings dev`` runs it too.
"""

from tidings.handlers.pruner import handler

__all__ = ["handler"]
