"""Use cases shared by the HTTP API and the operator command line.

Each function takes a ``Database`` and plain arguments, checks them, and returns pydantic models;
problems are raised as the errors of ``tidings.logic.errors``, which know nothing of HTTP.
"""
