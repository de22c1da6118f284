"""The one exception hierarchy of lucid-hub.

Lower layers' errors (pyoxigraph, joserfc, OS) are translated into these at the
boundary; the CLI and the web layer map each family to one exit code or HTTP status.
"""

from __future__ import annotations


class LucidError(Exception):
    """Base of every error lucid-hub raises on purpose; its message is safe to show."""


class InputError(LucidError):
    """The caller's input is malformed, unsupported or too large."""


class RdfSyntaxError(InputError):
    """An RDF document could not be parsed (the message names the source and line)."""


class UnsupportedRdfError(InputError):
    """Well-formed RDF that lucid-hub does not publish (triple terms, blank-node graph names)."""


class InputTooLargeError(InputError):
    """An input exceeds a configured size limit."""


class PatchFormatError(InputError):
    """A patch document is not a well-formed lucid-hub patch in the claimed format."""


class ConfigError(LucidError):
    """A setting or a key file is missing or invalid."""


class CanonicalizationLimitExceeded(LucidError):
    """Canonicalising a blank-node structure needed more work than the configured limit allows."""


class PatchVerificationError(LucidError):
    """A patch failed verification; it must not be applied."""


class PatchIntegrityError(PatchVerificationError):
    """A patch's bytes do not hash to its id (tampered or corrupted in transit)."""


class PatchSignatureError(PatchVerificationError):
    """A patch is unsigned, or its signature is invalid or made with an unknown key."""


class ChainError(LucidError):
    """A patch does not continue the chain of the graph it is applied to."""


class PatchApplyError(LucidError):
    """A patch cannot be applied to a graph's content (a removed MSG is not there)."""


class NotFoundError(LucidError):
    """A graph, patch or version that does not exist."""


class ConflictError(LucidError):
    """A change lost a race or names a version that is not the current one (HTTP 409)."""

    def __init__(self, message: str, head: str | None = None) -> None:
        super().__init__(message)
        self.head = head


class ReplayError(LucidError):
    """The same message was received before and is not taken twice (HTTP 409, with where the
    first copy is)."""

    def __init__(self, message: str, location: str) -> None:
        super().__init__(message)
        self.location = location


class NotAcceptableError(InputError):
    """None of the media types the request accepts can be served (HTTP 406)."""


class QueryLimitExceeded(LucidError):
    """A SPARQL query or update needed more time, memory or result space than its limit."""


class UnsupportedMediaTypeError(InputError):
    """A request body in a media type the endpoint does not accept (HTTP 415)."""


class StoreError(LucidError):
    """The RDF store failed or is behind the archive (it is repaired from the archive)."""


class PreconditionFailedError(ConflictError):
    """An `If-Match` version that is not the graph's current version (HTTP 412)."""


class LogUnavailableError(LucidError):
    """The patch log (Kafka) did not acknowledge in time; the outbox keeps the patches."""


class AuthenticationError(LucidError):
    """No valid access token: missing, malformed, badly signed, expired or revoked (HTTP 401)."""

    def __init__(self, message: str, error: str = "invalid_token") -> None:
        super().__init__(message)
        self.error = error  # RFC 6750 error code; "" when no token was sent at all


class ForbiddenError(LucidError):
    """Authenticated, but the token's scope or the access conditions do not allow it (HTTP 403)."""

    def __init__(self, message: str, scope: str | None = None, request_id: str | None = None) -> None:
        super().__init__(message)
        self.scope = scope  # the missing scope, for WWW-Authenticate: error="insufficient_scope"
        self.request_id = request_id


class RateLimitedError(LucidError):
    """Too many failed attempts from one client or address (HTTP 429)."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RemoteError(LucidError):
    """Another hub (a publisher we mirror, or the hub a command talks to) failed us (HTTP 502
    if it reaches a request of ours)."""


class RemoteUnreachableError(RemoteError):
    """Another hub could not be reached: connection refused or reset, timeout, an address the
    outbound policy forbids."""


class RemoteRefusedError(RemoteError):
    """Another hub answered a request with an error status (`status`)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class RemoteCredentialsRefused(RemoteRefusedError):
    """Another hub's token endpoint refused our client credentials."""


class RemoteAnswerError(RemoteError):
    """Another hub's answer is not what the protocol says (a malformed page, a missing field,
    a link that leaves its origin)."""


class PolicyError(InputError):
    """An access condition that is not valid (unknown property, malformed IRI, empty)."""
