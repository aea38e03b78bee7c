"""How a move reads --pause-resources: among the resources moved first, then what the source serves."""

from __future__ import annotations

import pytest

from statusvault.errors import ConfigError
from statusvault.kube.discovery import Discovery
from statusvault.move import _moved_resources
from tests.builders import resource_type

GADGET = resource_type("a.example.com", "Gadget")
OTHER_GADGET = resource_type("b.example.com", "Gadget")
WIDGET = resource_type("a.example.com", "Widget")
SOURCE = Discovery([GADGET, OTHER_GADGET, WIDGET], [GADGET, OTHER_GADGET, WIDGET])
MOVED = Discovery([GADGET], [GADGET])


def test_a_name_is_read_among_the_resources_moved_first():
    assert _moved_resources(("Gadget",), MOVED, SOURCE) == ("gadgets.a.example.com",), "ambiguous only in the source"


def test_a_resource_the_move_leaves_out_pauses_nothing():
    assert _moved_resources(("Widget", "*.example.com"), MOVED, SOURCE) == ("gadgets.a.example.com",)


def test_a_name_the_source_does_not_serve_is_an_error():
    with pytest.raises(ConfigError, match="--pause-resources Widgte: no resource of that name in the source"):
        _moved_resources(("Widgte",), MOVED, SOURCE)
