"""Lambda entry point (``app.handler``) of the percentiles function.

The handler is ``tidings.handlers.percentiles``: the code lives in the package (the tidings layer
on AWS), where ``tidings dev`` runs it too.
"""

from tidings.handlers.percentiles import handler

__all__ = ["handler"]
