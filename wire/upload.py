"""A TorchServe upload: one client request as TorchServe's own front end hands it to a
handler, a *row* of named parts; and `TorchServeRequest`, an upload or JSON instances.

TorchServe turns every request to ``/predictions/<m>`` that is not one of the gateway's
JSON forms into parameters: the raw body of any content type is one part named ``body``,
each multipart field or file is a part named after the field, each query parameter and
each entry of the gRPC ``input`` map is a part of its own. A part is bytes with the media
type its sender declared (a file part's or the body's Content-Type; none for form fields,
query parameters and gRPC entries). TorchServe's worker then gives the handler the value
as its declared type says (`Part.value`): JSON parsed, text decoded, anything else bytes.

One upload is one row of a batch. Turning rows into a model's batch form is the
gateway's business (`gateway.models.uploads`); this module knows no wire format and no model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from wire.errors import InvalidInput

BODY = "body"    # TorchServe's name for a raw body
JSON_MEDIA_TYPE = "application/json"


@dataclass(frozen=True, slots=True)
class Part:
    data: bytes
    media_type: str = ""  # lower-case, without parameters; "" when the sender declared none

    def value(self, name: str) -> Any:
        """What TorchServe's worker hands a handler for this part: the JSON value of an
        ``application/json`` part, the text of a ``text/*`` part, else the bytes (TorchServe
        forwards the bytes when text is not UTF-8; a JSON part that is not JSON is refused
        here, so the client learns of it before a batch is sent)."""
        if self.media_type == JSON_MEDIA_TYPE:
            try:
                return orjson.loads(self.data)
            except orjson.JSONDecodeError as exc:
                raise InvalidInput(f"part '{name}' is declared {JSON_MEDIA_TYPE} but is not valid JSON: {exc}") from None
        if self.media_type.startswith("text/"):
            try:
                return self.data.decode("utf-8")
            except UnicodeDecodeError:
                return self.data
        return self.data


Upload = dict[str, Part]  # one row: part name -> part, in the order the client sent them


@dataclass(slots=True)
class TorchServeRequest:
    """A TorchServe request as its front ends decode it (`wire.codecs.torchserve`): JSON
    `instances` (`single`: the body was one instance), or one `upload` row."""
    instances: list[Any] | None = None
    single: bool = True
    upload: Upload | None = None
