"""The one keyword parser shared by the widgets and the command line."""

import pytest

from napari_sam3.prompts.keywords import parse_keywords


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("building", ["building"]),
        ("building, road", ["building", "road"]),
        ("building;road\ntree\r\nwater", ["building", "road", "tree", "water"]),
        ("  sports field ,, ;\n\n", ["sports field"]),
        ("Building, road, building, ROAD", ["Building", "road"]),  # first spelling kept
        ("solar  panel, solar panel", ["solar  panel"]),  # the tokenizer folds whitespace too
        ("", []),
        (" ,;\n ", []),
        (None, []),
    ],
)
def test_parse_keywords(text, expected):
    assert parse_keywords(text) == expected


def test_parse_keywords_refuses_a_list():
    with pytest.raises(TypeError, match="keywords must be text"):
        parse_keywords(["building"])


def test_widgets_use_the_shared_parser():
    from napari_sam3.plugin.widgets import scene, text

    assert text.parse_keywords is parse_keywords
    assert scene.parse_keywords is parse_keywords
