"""wire/codecs/torchserve.py: which bodies are the JSON forms and which are uploads, as
TorchServe's own front end takes them (a raw body is the part `body`, each form field or
file a part of its name, query parameters too, gRPC entries as bytes), the bounds on
forms, and TorchServe's answers (a string as text, anything else JSON)."""
from __future__ import annotations

import functools

import pytest

from gateway.rest.forms import parse_form
from wire.codecs import torchserve as ts
from wire.codecs.limits import Limits
from wire.errors import InvalidInput
from wire.upload import Part

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))

# Forms are parsed by the HTTP front end's parser (gateway/rest/forms.py), which the
# codec is handed: these tests read bodies as the HTTP front end does.
decode_http = functools.partial(ts.decode_http, parse_form=parse_form)


def multipart(*parts: tuple[str, bytes, str | None, str | None], boundary: str = "xYzZY") -> tuple[bytes, str]:
    """(name, data, filename, content type) parts as `curl -F` sends them."""
    body = b""
    for name, data, filename, content_type in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        head = f"--{boundary}\r\nContent-Disposition: {disposition}\r\n"
        if content_type:
            head += f"Content-Type: {content_type}\r\n"
        body += head.encode() + b"\r\n" + data + b"\r\n"
    return body + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


# -- the JSON forms, as before ---------------------------------------------------------

@pytest.mark.parametrize("content_type", [None, "application/json", "application/json; charset=utf-8",
                                          "application/x-www-form-urlencoded"])
def test_json_bodies_are_the_json_forms_when_declared_json_or_undeclared(content_type):
    request = decode_http(b'{"instances": [[1], [2]]}', content_type)
    assert (request.instances, request.single, request.upload) == ([[1], [2]], False, None)
    assert decode_http(b"[1, 2]", content_type).instances == [[1, 2]]
    assert decode_http(b'{"data": [3]}', content_type).instances == [[3]]


@pytest.mark.parametrize("body, message", [
    (b"7", "must be JSON"), (b'{"inputs": [1]}', '{"instances": [...]}'),
    (b'{"instances": []}', "empty"), (b'{"instances": "x"}', "must be a list"),
])
def test_a_body_declared_json_that_is_no_form_is_refused(body, message):
    with pytest.raises(InvalidInput, match=message.replace("[", r"\[").replace("{", r"\{")):
        decode_http(body, "application/json")


@pytest.mark.parametrize("body", [b"42", b'"text"', b'{"inputs": [1]}', b"true"])
def test_an_undeclared_body_that_is_json_but_no_form_is_an_upload_as_torchserve_takes_it(body):
    """`curl -T` of a file that happens to hold `42`: TorchServe hands the bytes to its handler."""
    assert decode_http(body, None).upload == {"body": Part(body, "")}
    assert ts.decode_grpc({"data": body}).upload == {"data": Part(body)}


def test_a_form_takes_its_documented_64_parts():
    body = b"".join(b'--b\r\nContent-Disposition: form-data; name="f%d"\r\n\r\nv\r\n' % i for i in range(64)) + b"--b--\r\n"
    assert len(decode_http(body, "multipart/form-data; boundary=b").upload) == 64
    with pytest.raises(InvalidInput, match="too many parts"):
        decode_http(body[:-7] + b'--b\r\nContent-Disposition: form-data; name="f64"\r\n\r\nv\r\n--b--\r\n',
                       "multipart/form-data; boundary=b")


def test_a_body_declared_json_that_is_not_json_is_refused():
    with pytest.raises(InvalidInput, match="not valid JSON"):
        decode_http(b"\x89PNG", "application/json")


def test_the_instance_limit_holds_for_the_instances_form():
    with pytest.raises(InvalidInput, match="exceed the limit of 2"):
        decode_http(b'{"instances": [1, 2, 3]}', None, limits=Limits(max_instances=2))


# -- uploads -------------------------------------------------------------------------

def test_curl_t_an_undeclared_raw_body_is_the_part_body():
    request = decode_http(PNG, None)
    assert request.instances is None and request.single
    assert request.upload == {"body": Part(PNG, "")}


@pytest.mark.parametrize("content_type, media_type", [
    ("image/png", "image/png"), ("Image/JPEG", "image/jpeg"), ("application/octet-stream", "application/octet-stream"),
    ("text/plain; charset=utf-8", "text/plain"), ("audio/wav", "audio/wav"),
])
def test_a_raw_body_of_any_other_type_is_the_part_body_with_its_media_type(content_type, media_type):
    assert decode_http(PNG, content_type).upload == {"body": Part(PNG, media_type)}


def test_a_text_body_that_looks_like_json_is_text_when_declared_text():
    # TorchServe hands a text/* body to the handler as text, whatever it looks like.
    assert decode_http(b"[1, 2]", "text/plain").upload == {"body": Part(b"[1, 2]", "text/plain")}


def test_curl_f_each_multipart_part_is_a_part_of_its_name():
    body, content_type = multipart(("data", PNG, "kitten.png", "image/png"), ("note", b"hello", None, None),
                                   ("meta", b'{"k": 1}', "meta.json", "application/json"))
    upload = decode_http(body, content_type).upload
    assert upload == {"data": Part(PNG, "image/png"), "note": Part(b"hello", ""),
                      "meta": Part(b'{"k": 1}', "application/json")}


def test_a_field_sent_twice_keeps_its_last_value_as_torchserve_does():
    body, content_type = multipart(("data", b"first", None, None), ("data", b"second", None, None))
    assert decode_http(body, content_type).upload == {"data": Part(b"second", "")}


def test_an_url_encoded_form_that_is_not_json_gives_its_fields():
    assert decode_http(b"data=hello+world&x=1", "application/x-www-form-urlencoded").upload == {
        "data": Part(b"hello world"), "x": Part(b"1")}


def test_query_parameters_are_parts_of_an_upload_and_a_body_part_wins():
    upload = decode_http(PNG, "image/png", {"topk": [b"3"], "body": [b"shadowed"]}).upload
    assert upload == {"topk": Part(b"3"), "body": Part(PNG, "image/png")}


@pytest.mark.parametrize("body, content_type, message", [
    (b"", "image/png", "no body"),
    (b"", None, "no body"),
    (b"--xYzZY\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nv\r\n", "multipart/form-data; boundary=xYzZY",
     "no final boundary"),
    (b"whatever", "multipart/form-data", "boundary not found"),
    (b"--b\r\nContent-Disposition: form-data\r\n\r\nv\r\n--b--\r\n", "multipart/form-data; boundary=b", "missing name"),
    (b"--b\r\nno headers here\r\n--b--\r\n", "multipart/form-data; boundary=b", "missing headers"),
    (b"--b\r\nContent-Disposition: attachment; name=\"a\"\r\n\r\nv\r\n--b--\r\n", "multipart/form-data; boundary=b",
     "Invalid multipart"),
    (b"--b--\r\n", "multipart/form-data; boundary=b", "has no fields"),
])
def test_malformed_forms_and_empty_bodies_are_400(body, content_type, message):
    with pytest.raises(InvalidInput, match=message):
        decode_http(body, content_type)


def test_a_form_of_too_many_parts_is_refused_before_it_is_a_row():
    body, content_type = multipart(*[(f"f{i}", b"x", None, None) for i in range(ts.MAX_PARTS + 1)])
    with pytest.raises(InvalidInput, match="too many parts"):
        decode_http(body, content_type)
    with pytest.raises(InvalidInput, match="parameters; at most"):
        decode_http(PNG, "image/png", {f"q{i}": [b"1"] for i in range(ts.MAX_PARTS)})


def test_a_huge_part_header_is_refused():
    body = b"--b\r\nContent-Disposition: form-data; name=\"a\"\r\nX-Pad: " + b"p" * 20_000 + b"\r\n\r\nv\r\n--b--\r\n"
    with pytest.raises(InvalidInput, match="header too large"):
        decode_http(body, "multipart/form-data; boundary=b")


# -- gRPC -------------------------------------------------------------------------------

def test_grpc_json_in_data_or_body_alone_is_the_json_forms():
    assert ts.decode_grpc({"data": b'{"instances": [[1]]}'}).instances == [[1]]
    assert ts.decode_grpc({"body": b"[1, 2]"}).instances == [[1, 2]]
    with pytest.raises(InvalidInput, match="must be a list"):
        ts.decode_grpc({"data": b'{"instances": "x"}'})


def test_grpc_raw_bytes_or_several_entries_are_an_upload_of_bytes():
    assert ts.decode_grpc({"data": PNG}).upload == {"data": Part(PNG)}
    assert ts.decode_grpc({"data": b"[1]", "topk": b"3"}).upload == {"data": Part(b"[1]"), "topk": Part(b"3")}
    assert ts.decode_grpc({"image": b"[1]"}).upload == {"image": Part(b"[1]")}


def test_grpc_empty_or_oversized_input_maps_are_400():
    with pytest.raises(InvalidInput, match="input map is empty"):
        ts.decode_grpc({})
    with pytest.raises(InvalidInput, match="at most"):
        ts.decode_grpc({f"k{i}": b"" for i in range(ts.MAX_PARTS + 1)})


# -- answers ----------------------------------------------------------------------------

def test_answers_are_torchserves_text_for_a_string_and_json_otherwise():
    assert ts.encode_answer(["a cat"], single=True) == (b"a cat", "text/plain; charset=utf-8")
    assert ts.encode_answer([{"tabby": 0.9}], single=True) == (b'{"tabby":0.9}', "application/json")
    assert ts.encode_answer(["a", "b"], single=False) == (b'{"predictions":["a","b"]}', "application/json")


def test_a_part_hands_the_handler_what_torchserves_worker_would():
    assert Part(b'{"k": [1]}', "application/json").value("meta") == {"k": [1]}
    assert Part("héllo".encode(), "text/plain").value("t") == "héllo"
    assert Part(b"\xff\xfe", "text/plain").value("t") == b"\xff\xfe"  # not UTF-8: the bytes, as TorchServe
    assert Part(PNG, "image/png").value("data") == PNG and Part(b"hello").value("x") == b"hello"
    with pytest.raises(InvalidInput, match="declared application/json but is not valid JSON"):
        Part(b"{nope", "application/json").value("meta")
