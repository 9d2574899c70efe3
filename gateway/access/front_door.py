"""The front door, shared by both front ends: which key a request presents, and whether it
may come in, and as whom (`FrontDoor`).

Three ways a gateway is configured, one rule each:
* open: nothing is asked;
* `[server] auth_token_env` alone: every request carries that one token;
* `[[tenants]]` (docs/tenants.md): every request carries a key of a declared tenant, and is
  that tenant's; with auth_token_env too, the token is the key of one more tenant, `default`
  (`gateway.config`). A tenant may call only its `models` (403 otherwise, `permit`).

A key is presented as `Authorization: Bearer <key>` (HTTP header or gRPC metadata), or in
an `x-api-key` or `api-key` header (Azure's and Anthropic's clients send those), read in
that order. A key is the bytes the client sent, UTF-8 for any character past ASCII: each
front end hands it here as that text (`gateway.rest.intake`: Tornado reads a head as
latin-1; `gateway.grpc.auth`: gRPC's binary `-bin` metadata too, as a gRPC client can send
no other byte past ASCII). Server liveness and readiness probes are exempt on both protocols, so probes
need no secret (the list: gateway/grpc/auth.py); `/metrics` and the live page take any key
the door admits. Messages here say what is missing, never a key nor its digest.

A request's rights are checked again when it is served, not only when it arrived: `admit`
names its tenant as an `Admitted`, the tenant's name that also carries the SHA-256 digest of
the key presented (never the key), which the front ends hand on as the call's tenant; the
service asks `permit` of the door of that moment (a reload replaces the door), which looks
the digest up again. A request whose key a reload removed or rotated out is refused
(Unauthenticated), whether its body was still arriving or it is the next message of a
stream opened before; one whose tenant was renamed is served, and counted, as the tenant
its key belongs to now. Nothing is served as a tenant no longer declared.
"""
from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

from gateway.access.keys import Directory, digest, key_bytes
from wire.errors import PermissionDenied, Unauthenticated

API_KEY_HEADERS = ("x-api-key", "api-key")


class Admitted(str):
    """A tenant's name as the door admitted a request ("" when no tenants are declared), with
    the SHA-256 `digest` of the key the request presented: whatever takes it as a name (a
    call, a log line, a label, a span) reads the name alone, and `FrontDoor.permit` finds
    the tenant again by the digest. Neither its repr nor its pickle nor orjson carries the
    digest, and a key never enters it."""

    __slots__ = ("digest",)
    digest: bytes

    def __new__(cls, name: str, key_digest: bytes) -> Admitted:
        admitted = super().__new__(cls, name)
        admitted.digest = key_digest
        return admitted

    def __reduce__(self) -> tuple[Any, ...]:
        return str, (str(self),)  # copied or pickled, it is the name alone


def key_digest(tenant: str) -> bytes | None:
    """The digest of the key a call's tenant was admitted with (None: no key was asked)."""
    return tenant.digest if isinstance(tenant, Admitted) else None


@dataclass(frozen=True, slots=True)
class FrontDoor:
    """What a request must present: nothing (`open`), the token, or a tenant's key."""
    token: str = ""                     # [server] auth_token_env's, when no tenants are declared
    tenants: Directory | None = None    # the declared tenants by their keys' digests (gateway.access.keys)

    @property
    def open(self) -> bool:
        return not self.token and self.tenants is None

    def admit(self, authorization: str | None, api_key: str | None = None) -> str:
        """The tenant a request presenting these comes as, an `Admitted` ("" when no tenants
        are declared; a plain "" when the door is open); Unauthenticated if it presents no
        key the door knows. `api_key`: its x-api-key (or api-key) header, read when there is
        no Authorization."""
        if self.open:
            return ""
        key = presented_key(authorization, api_key)
        if self.tenants is None:
            if not hmac.compare_digest(key_bytes(key), key_bytes(self.token)):
                raise Unauthenticated("the bearer token is not valid")
            return Admitted("", digest(key))
        key_hash = digest(key)
        tenant = self.tenants.with_digest(key_hash)
        if tenant is None:
            raise Unauthenticated("the key is not valid: it is not one of this gateway's tenants' keys")
        return Admitted(tenant.name, key_hash)

    def permit(self, tenant: str, model: str) -> str:
        """The tenant a request admitted as `tenant` (by this door or one a reload has since
        replaced) is now, once it may call `model`: its key's digest looked up again, so a
        renamed tenant is the new name (an `Admitted`). Unauthenticated if its key is no
        longer valid (removed or rotated out, or no key was asked when one is now);
        PermissionDenied unless the tenant may call `model`."""
        if self.open:
            return ""
        presented = key_digest(tenant)
        if presented is None:
            raise Unauthenticated("this gateway now requires a key, and the request came in without one")
        if self.tenants is None:
            if not hmac.compare_digest(presented, digest(self.token)):
                raise Unauthenticated("the bearer token this request presented is no longer valid")
            return tenant
        known = self.tenants.with_digest(presented)
        if known is None:
            raise Unauthenticated("the key this request presented is no longer valid: a reload removed it")
        if not known.may_call(model):
            raise PermissionDenied(f"tenant '{known.name}' may not call model '{model}' (the models of its "
                                   f"[[tenants]] table)")
        return tenant if known.name == tenant else Admitted(known.name, presented)


def presented_key(authorization: str | None, api_key: str | None = None) -> str:
    """The key of `Authorization: Bearer <key>` (the scheme case-insensitive, RFC 7235), or,
    when there is no Authorization, of an API-key header; Unauthenticated if there is none."""
    if authorization is not None:
        scheme, _, credentials = authorization.strip().partition(" ")
        credentials = credentials.strip()
        if scheme.lower() != "bearer" or not credentials:
            raise Unauthenticated("this gateway requires an 'authorization: Bearer <key>' header")
        return credentials
    if api_key is not None and api_key.strip():
        return api_key.strip()
    raise Unauthenticated("this gateway requires a key: an 'authorization: Bearer <key>' header (or x-api-key)")
