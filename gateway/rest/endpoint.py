"""What an inference route is, whichever path serves it: `Endpoint`, and its `Reply`.

An inference route (KServe v1's `:predict`, OIP's `/infer`, OpenAI's embeddings, Cohere's
rerank, TorchServe's predictions) is written once, as an `Endpoint` in its protocol's
module: which methods it takes, whether its path names the model, how large its JSON may
be, the shape of its errors, and `answer`: an `Intake` (the request judged and its body
read) in, a `Reply` out, through `InferenceService.infer`. Two paths serve an endpoint and
share all of this: the lean delegate (`gateway.rest.lean`, the default) and the
`RequestHandler` twin (`gateway.rest.base.EndpointHandler`, kept to hold the lean path to
it); `gateway.rest.app` maps URLs to endpoints.

It knows the intake and the error documents, never Tornado's handlers or connections.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from gateway.rest import errors
from gateway.rest.intake import Intake
from wire.codecs.json_data import SEND_BINARY
from wire.errors import GatewayError

JSON_HEADERS = {"Content-Type": "application/json"}


@dataclass(frozen=True, slots=True)
class Reply:
    """A successful answer: 200, this body and these headers (`Content-Type` among them)."""
    body: bytes
    headers: dict[str, str]


class Endpoint:
    """One inference route. Subclasses set `front_end` (the `protocol` label of its calls)
    and write `answer`; the rest has defaults."""

    front_end: ClassVar[str]
    methods: ClassVar[tuple[str, ...]] = ("POST",)
    model_in_path: ClassVar[bool] = True   # False: the body names the model, which `answer` finds
    json_remedy: ClassVar[str] = SEND_BINARY  # what a client whose JSON is over max_json_bytes should do instead

    def json_only(self, intake: Intake) -> bool:
        """Whether the request's whole body is one JSON document, bounded by max_json_bytes
        before it is read; a route that also takes other bodies says no."""
        return False

    def error_document(self, message: str, status: int, error: GatewayError | None) -> dict[str, Any]:
        """The body of an error answer of `status`: the gateway's `{"error": message}`, or the
        shape this route's clients read (TorchServe's, OpenAI's, Cohere's)."""
        return errors.document(message)

    async def answer(self, intake: Intake, model: str, version: str | None) -> Reply:
        """The answer to a request whose head passed and whose body is in; a GatewayError for
        anything wrong. `model` and `version`: what the path names (empty when it names none)."""
        raise NotImplementedError
