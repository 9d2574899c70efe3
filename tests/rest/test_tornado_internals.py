"""gateway/rest/tornado_internals.py: every private name of Tornado's the front end uses is
still there in the Tornado installed. An upgrade that renames or drops one fails here,
naming it and the adapter to re-check, not as a quiet change in how the gateway answers."""
from __future__ import annotations

import importlib
import inspect

import pytest
import tornado

from gateway.rest.tornado_internals import PRIVATE_NAMES


def owner(dotted: str) -> object:
    """The class (or function) `dotted` names, e.g. tornado.web.RequestHandler.clear."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):  # the longest importable module first
        try:
            found: object = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[split:]:
            found = getattr(found, attribute)
        return found
    raise AssertionError(f"Tornado {tornado.version}: {dotted} is gone; re-check gateway/rest/tornado_internals.py")


@pytest.mark.parametrize("dotted", sorted(PRIVATE_NAMES))
def test_each_private_name_the_adapter_uses_is_still_tornados(dotted):
    held = owner(dotted)
    # A name is either a class attribute, or an attribute its source sets (self.<name> =).
    source = inspect.getsource(held)  # type: ignore[arg-type]
    for name in PRIVATE_NAMES[dotted]:
        assert hasattr(held, name) or f"self.{name} =" in source or f"self.{name}:" in source, (
            f"Tornado {tornado.version}: {dotted} no longer has {name}; re-check gateway/rest/tornado_internals.py")


def test_the_answer_reset_sets_what_tornados_own_clear_sets():
    """Our clear() replaces Tornado's whole: it must set every attribute Tornado's sets."""
    import tornado.web

    source = inspect.getsource(tornado.web.RequestHandler.clear)
    assigned = {line.split("=")[0].strip().removeprefix("self.").split(":")[0]
                for line in source.splitlines() if line.strip().startswith("self._") and "=" in line}
    assert assigned <= set(PRIVATE_NAMES["tornado.web.RequestHandler.clear"]), (
        f"Tornado {tornado.version}'s RequestHandler.clear sets {sorted(assigned)}; "
        "gateway/rest/tornado_internals.reset_answer must set the same")
