"""What can go wrong in a use case, with a machine-readable code and the field at fault."""

from __future__ import annotations


class UseCaseError(Exception):
    """A request that cannot be carried out; ``code`` is stable, ``message`` is for people."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field


class InvalidInput(UseCaseError):
    """An argument is well-formed but not acceptable (bad URL, unknown endpoint, bad range)."""


class PayloadMismatch(InvalidInput):
    """A payload (or an example) does not match its event type's schema: ``pointer`` is the
    JSON pointer, inside the value at ``field``, of the first place that does not, ``keyword``
    the schema keyword that failed there."""

    def __init__(self, code: str, message: str, field: str, pointer: str, keyword: str) -> None:
        super().__init__(code, message, field)
        self.pointer = pointer
        self.keyword = keyword


class NotFound(UseCaseError):
    """The thing named does not exist (or was deleted, or the caller may not know of it: a
    token of one application is told that another application's things do not exist)."""

    def __init__(self, what: str, ident: int | str) -> None:
        super().__init__(f"{what}_not_found", f"{what.replace('_', ' ')} {ident} does not exist")


class Unauthorized(UseCaseError):
    """No credential, or one that is not (or no longer) valid."""


class Forbidden(UseCaseError):
    """The credential is valid but its scope does not allow what was asked."""


class PayloadTooLarge(UseCaseError):
    """An event payload is over the configured size limit."""


class Conflict(UseCaseError):
    """The database refused a write that contradicts its current state."""


class Unavailable(UseCaseError):
    """Something the use case needs cannot be reached now (the key that encrypts signing
    secrets); the same request may succeed later."""
