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
that order. Server liveness and readiness probes are exempt on both protocols, so probes
need no secret (the list: gateway/grpc/auth.py); `/metrics` and the live page take any key
the door admits. Messages here say what is missing, never a key nor its digest.
"""
from __future__ import annotations

import hmac
from dataclasses import dataclass

from gateway.tenants import Directory
from wire.errors import PermissionDenied, Unauthenticated

API_KEY_HEADERS = ("x-api-key", "api-key")


@dataclass(frozen=True, slots=True)
class FrontDoor:
    """What a request must present: nothing (`open`), the token, or a tenant's key."""
    token: str = ""                     # [server] auth_token_env's, when no tenants are declared
    tenants: Directory | None = None    # the declared tenants by their keys' digests (gateway.tenants)

    @property
    def open(self) -> bool:
        return not self.token and self.tenants is None

    def admit(self, authorization: str | None, api_key: str | None = None) -> str:
        """The tenant a request presenting these comes as ("" when no tenants are declared);
        Unauthenticated if it presents no key the door knows. `api_key`: its x-api-key (or
        api-key) header, read when there is no Authorization."""
        if self.open:
            return ""
        key = presented_key(authorization, api_key)
        if self.tenants is None:
            if not hmac.compare_digest(key.encode(), self.token.encode()):
                raise Unauthenticated("the bearer token is not valid")
            return ""
        tenant = self.tenants.find(key)
        if tenant is None:
            raise Unauthenticated("the key is not valid: it is not one of this gateway's tenants' keys")
        return tenant.name

    def permit(self, tenant: str, model: str) -> None:
        """PermissionDenied unless `tenant` (as `admit` named it) may call `model`."""
        if self.tenants is None or not tenant:
            return
        known = self.tenants.named(tenant)
        if known is None:
            return  # admitted before a reload removed its tenant: in flight, it finishes
        if not known.may_call(model):
            raise PermissionDenied(f"tenant '{tenant}' may not call model '{model}' (the models of its [[tenants]] "
                                   f"table)")


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
