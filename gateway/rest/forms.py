"""HTML forms in an HTTP body (`multipart/form-data`, `application/x-www-form-urlencoded`),
parsed by Tornado's own bounded parser: the one form parser of the gateway, handed to the
TorchServe codec (`wire.codecs.torchserve`), which says what the fields mean.

Bounded by the codec's `MAX_PARTS` (Tornado counts a multipart body's preamble as a part of
its own, so one more) and Tornado's part-header limit, on a body already bounded by
`max_body_bytes`. A malformed form or a missing boundary is InvalidInput (400).

It knows Tornado's parser and the codec's bound; no handler, no model.
"""
from __future__ import annotations

from tornado.httputil import (
    HTTPInputError,
    ParseBodyConfig,
    ParseMultipartConfig,
    ParseUrlEncodedConfig,
    parse_body_arguments,
)

from wire.codecs.torchserve import MAX_PARTS, FormFields, media_type
from wire.errors import InvalidInput

_FORM_LIMITS = ParseBodyConfig(multipart=ParseMultipartConfig(max_parts=MAX_PARTS + 1),
                               urlencoded=ParseUrlEncodedConfig(max_arguments=MAX_PARTS))


def parse_form(content_type: str, body: bytes) -> FormFields:
    """A form's fields (each value as sent) and its files (each with its declared media type)."""
    arguments: dict[str, list[bytes]] = {}
    files: dict[str, list] = {}
    try:
        parse_body_arguments(content_type, body, arguments, files, config=_FORM_LIMITS)
    except HTTPInputError as exc:
        raise InvalidInput(f"the {media_type(content_type)} body is malformed: {exc}") from None
    return FormFields(arguments, {name: [(upload.body, upload.content_type) for upload in uploads]
                                  for name, uploads in files.items()})
