"""Lambda entry point (``app.handler``) of the claimer function.

The handler is ``tidings.handlers.claimer``: the code lives in the package (the tidings layer
on AWS), where ``tidings dev`` runs it too.
"""

from tidings.handlers.claimer import handler

__all__ = ["handler"]
