"""Keywords as classes, not examples: whatever Unicode an analyst (or a file) gives, a keyword is
either refused before any model work with a message that says why, or it is text the model reads
and every output format writes back unchanged."""

from __future__ import annotations

import unicodedata

import geopandas as gpd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shapely.geometry import box

from napari_sam3.cli import main
from napari_sam3.core.errors import InvalidInput
from napari_sam3.core.formats import OUTPUT_FORMATS
from napari_sam3.gis.vector import write_vector
from napari_sam3.prompts.keywords import MAX_KEYWORD_BYTES, check_keyword, visible_text
from napari_sam3.prompts.query import Query

INVISIBLE = ("Cc", "Cf", "Zs", "Zl", "Zp")
EMPTY = "every keyword must be a non-empty string such as 'building'"
REASONS = (EMPTY, "cannot be written as UTF-8", "holds the control character", "bytes as UTF-8")

# any code point at all, lone surrogates and unassigned ones included
anything = st.text(st.characters(codec=None, categories=None), max_size=20)
# (C1 controls are not among them: SAM3's clean-up, ftfy, reads them as Windows-1252 quotes and
# dashes, which the model sees; inside a keyword they are refused as control characters)
C1 = [chr(c) for c in range(0x80, 0xA0)]
invisible = st.text(
    st.characters(categories=INVISIBLE, exclude_characters=C1), min_size=1, max_size=8
)


@settings(max_examples=300, deadline=None)
@given(anything)
def test_any_text_is_a_keyword_or_refused_with_a_reason(text):
    try:
        word = check_keyword(text)
    except InvalidInput as error:
        assert any(reason in str(error) for reason in REASONS), str(error)
        return
    assert len(word.encode("utf-8")) <= MAX_KEYWORD_BYTES  # writable as UTF-8, not too long
    assert visible_text(word)  # something the model reads
    assert not any(unicodedata.category(c) == "Cc" for c in word)
    assert word == " ".join(word.split()) and check_keyword(word) == word  # settled


@settings(max_examples=150, deadline=None)
@given(invisible)
def test_nothing_visible_is_refused_as_an_empty_prompt(text):
    with pytest.raises(InvalidInput, match=EMPTY):
        Query(keywords=[text])
    with pytest.raises(InvalidInput, match=EMPTY):
        Query.of(text)


@settings(max_examples=50, deadline=None)
@given(
    st.text(st.characters(categories=("L",)), min_size=1, max_size=5), st.integers(0xD800, 0xDFFF)
)
def test_a_lone_surrogate_is_refused_by_name(word, surrogate):
    text = word + chr(surrogate)
    with pytest.raises(InvalidInput, match=rf"character {len(word) + 1} is the lone surrogate"):
        Query(keywords=[text])


@pytest.mark.parametrize(
    "text",
    ["\x01", "\x85", "\u200b", "\u200d\u200d", "\u3000", "\u2028", "\ufeff", "\x00 \t", "&nbsp;"],
)
def test_the_named_cases_are_refused_as_empty(text):
    with pytest.raises(InvalidInput, match=EMPTY):
        check_keyword(text)


def test_controls_inside_and_overlong_keywords_are_refused():
    with pytest.raises(InvalidInput, match=r"control character U\+0000"):
        check_keyword("roof\x00top")
    assert check_keyword("  big\u3000\tbuilding ") == "big building"  # whitespace of any script
    with pytest.raises(InvalidInput, match="at most 254"):
        check_keyword("é" * 128)  # 256 bytes
    assert check_keyword("é" * 127) == "é" * 127


accepted = st.text(
    st.characters(codec="utf-8", categories=("L", "M", "N", "P", "S", "Zs", "Cf")), max_size=12
).filter(lambda t: _accepted(t) is not None)


def _accepted(text):
    try:
        return check_keyword(text)
    except InvalidInput:
        return None


@settings(max_examples=15, deadline=None)
@given(accepted)
def test_every_accepted_keyword_is_written_back_by_every_vector_format(tmp_path_factory, text):
    word = check_keyword(text)
    folder = tmp_path_factory.mktemp("formats")
    gdf = gpd.GeoDataFrame({"keyword": [word]}, geometry=[box(0, 0, 10, 10)], crs="EPSG:32633")
    for fmt in (f for f in OUTPUT_FORMATS.values() if f.vector):
        path = write_vector(gdf, folder / f"out{fmt.suffix}")
        back = gpd.read_parquet(path) if fmt.name == "parquet" else gpd.read_file(path)
        assert back["keyword"].tolist() == [word], fmt.name


def test_the_cli_refuses_an_invisible_keyword_before_loading_a_model(tmp_path, capsys):
    raster = tmp_path / "x.tif"
    raster.write_bytes(b"")  # never read: the keyword is refused first
    code = main(["segment", str(raster), "--models", str(tmp_path / "nowhere"), "--prompt",
                 "\u200b", "--out", str(tmp_path / "o.gpkg")])  # fmt: skip
    assert code == 2 and EMPTY in capsys.readouterr().err
    assert not (tmp_path / "o.gpkg").exists()
