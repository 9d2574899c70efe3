"""Bearer-token authentication, shared by both front ends.

With `[server] auth_token_env` set, every request must carry `authorization: Bearer <token>`
(HTTP header or gRPC metadata). Server liveness and readiness probes are exempt on both
protocols, so probes need no secret (the list: gateway/grpc/auth.py)."""
from __future__ import annotations

import hmac

from wire.errors import Unauthenticated


def check_bearer(token: str, authorization: str | None) -> None:
    """Raise Unauthenticated unless `authorization` carries `token` (no-op if token is "")."""
    if not token:
        return
    scheme, _, credentials = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not credentials:  # the scheme is case-insensitive (RFC 7235)
        raise Unauthenticated("this gateway requires an 'authorization: Bearer <token>' header")
    if not hmac.compare_digest(credentials.strip().encode(), token.encode()):
        raise Unauthenticated("the bearer token is not valid")
