"""Lambda entry point (``app.handler``) of the dead_letter_report function.

The handler is ``tidings.handlers.dead_letter_report``: the code lives in the package (the
tidings layer on AWS), where ``tidings dev`` runs it too.
"""

from tidings.handlers.dead_letter_report import handler

__all__ = ["handler"]
