"""napari_sam3.prompts.tokenizer against SAM3's official tokenizer, id for id."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import warnings
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import napari_sam3
from napari_sam3.prompts.tokenizer import EOT_ID, PAD_ID, SOT_ID, VOCAB_SIZE, tokenize

from .._required import require

CTX = 32

# --- the phrase list --------------------------------------------------------------------------

GEO_NOUNS = """
building rooftop roof house shed barn warehouse factory skyscraper tower church mosque temple
stadium school hospital greenhouse silo tank oil-tank water-tower chimney antenna solar-panel
solar-farm wind-turbine power-line pylon substation dam bridge tunnel road highway motorway street
lane roundabout intersection crosswalk sidewalk path trail railway railroad train wagon station
platform airport runway taxiway apron hangar airplane aircraft helicopter helipad jet drone car
truck bus van tractor trailer motorcycle bicycle vehicle parking-lot garage port harbour harbor
pier dock jetty marina ship boat vessel tanker container crane barge ferry yacht canoe kayak river
stream creek canal lake pond reservoir lagoon estuary delta coastline beach dune sandbar island
sea ocean wave reef glacier snow ice iceberg mountain hill valley cliff ridge slope crater volcano
desert oasis forest woodland tree palm conifer shrub hedge grass meadow pasture field farmland
cropland vineyard orchard plantation rice-paddy wheat maize sugarcane irrigation center-pivot
furrow fence wall gate pool swimming-pool fountain park garden playground cemetery golf-course
tennis-court basketball-court soccer-field baseball-diamond track quarry mine pit landfill
dump tailings pipeline well-pad oil-well flare smoke plume fire burn-scar flood floodwater
mudslide landslide debris rubble damage crack pothole shadow cloud haze fog contrail wetland
marsh swamp mangrove peatland tundra savanna steppe prairie bog fen cattle herd sheep livestock
whale dolphin seal bird nest camp tent refugee-camp shelter container-yard stockpile coal-pile
""".split()
ADJECTIVES = """
red blue green white black grey small large tiny huge damaged destroyed flooded burned new old
abandoned illegal informal paved unpaved dry wet circular rectangular long narrow tall
""".split()
TEMPLATES = [
    "a {}",
    "the {}",
    "{}s",
    "a photo of a {}",
    "satellite image of {}",
    "all {} in the image",
    "{} near the river",
    "{} next to the road",
    "aerial view of a {} in the city",
    "count every {}",
]

# fmt: off
PUNCTUATION = [
    "car.", "car,truck", "cars; trucks", "road/rail", "(building)", "[tree]", "{field}", "a-b",
    "north-east", "e.g. silos", "wind-turbine!!!", "??", "...", "#hashtag", "@user", "50% cover",
    "$100", "a&b", "c++", "foo_bar", "x*y", "~approx", "`tick`", "a|b", "<tag>", "1+1=2",
    "back\\slash", "'quoted'", "\"double\"", "it's", "don't", "they're", "we've", "i'm", "you'll",
    "he'd", "'s", "ships'", "O'Neil", "rock 'n' roll", "IT'S", "'T'", "''s", "'ll've", "a'b'c",
    "!@#$%^&*()", "-", "--", "—", "–", "…", "·", "•", "§", "¶", "°", "±", "×", "÷",
]
DIGITS = [
    "2 cars", "10 buildings", "1234567890", "3.14", "1,000 m", "10m resolution", "sentinel-2",
    "landsat 8", "B04", "EPSG:32633", "0.5 km²", "12:30", "2024-05-01", "¹²³", "½ field", "Ⅻ",
    "٣ ٤", "१२३", "一二三", "0", "007", "1e9", "-5", "+3", "42nd street", "route 66", "3d", "x2",
]
SCRIPTS = [
    "bâtiment", "école", "Straße", "Gebäude", "árbol", "edifício", "здание", "Москва", "κτίριο",
    "Ελλάδα", "مبنى", "طريق", "בניין", "इम\u093eरत", "সড\u09bcক", "อาคาร", "建筑物", "道路和桥梁",
    "建物 ビル", "ｶﾀｶﾅ", "건물", "İstanbul", "ılık", "tòa nhà", "შენობა", "շենք", "ሕንፃ",
    "கட\u0bcdட\u0bbfடம\u0bcd", "ಕಟ\u0ccdಟಡ", "e\u0301cole", "z\u0336a\u0337l\u0338g\u0335o", "ǅ",
    "\u212a", "ſ", "it'ſ", "ß", "ẞ", "Ωmega", "𝐛𝐨𝐥𝐝", "𝔣𝔯𝔞𝔨𝔱𝔲𝔯", "ⓒⓘⓡⓒⓛⓔ", "q\u0345!", "a\U00010940b", "x\u0c5c!", "ℌ", "№5", "Å",
    "ﬁ", "ŉ", "ǰ", "ᾳ", "Ꞵ",
]
HTML_ENTITIES = [
    "&amp;", "fish &amp; chips", "&lt;road&gt;", "&quot;bridge&quot;", "&#39;", "&#x27;s",
    "&nbsp;", "a&nbsp;b", "&amp;amp;", "&amp;lt;tag&amp;gt;", "&amp;amp;amp;", "&copy; 2024",
    "&eacute;cole", "&mdash;", "&hellip;", "&notanentity;", "& alone", "&#128512;", "&#0;",
    "&#x1F600;", "&AMP;", "&ampx", "&lt", "&#65;&#66;", "&rsquo;s", "&ldquo;road&rdquo;",
    # with a "<" in the text ftfy leaves entities alone, so both unescape passes show
    "<b>&amp;amp;</b>", "a < b &amp;amp; c", "<x> &amp;lt;", "<p>&amp;quot;pier&amp;quot;</p>",
]
LIGATURES = [
    "ﬁeld", "ﬂood", "ﬀ", "oﬃce", "ﬄ", "ﬅ", "ﬆ", "Ĳssel", "æ", "œuvre", "ǆ", "ﬁ ﬂ ﬀ",
]
CURLY_QUOTES = [
    "“road”", "‘tree’", "ship’s", "«bâtiment»", "„Haus“", "‹x›", "′″", "don’t", "‚a‘", "“”",
    "it’ll", "’s",
]
FULL_WIDTH = [
    "ＢＵＩＬＤＩＮＧ", "ｃａｒ", "１２３", "！？", "（道路）", "a\u3000b", "ＡＢＣ１２３", "ｓｈｉｐ’ｓ", "［ｔｒｅｅ］", "＆ａｍｐ；",
]
EMOJI = [
    "🏠", "🚗 car", "🌳🌳🌳", "👍🏽", "👨\u200d👩\u200d👧", "🇺🇸", "❤\ufe0f", "🛰\ufe0f satellite 🌍",
    "😀 happy", "🏭 factory", "#\ufe0f\u20e3", "©", "™", "🚢⚓", "🔥fire", "🌊flood🌊", "🗺",
    "✈\ufe0f plane",
]
WHITESPACE = [
    "", " ", "\t", "\n", "\r\n", "  \t \n ", "\xa0", "\u2003", "\u3000", "\u200b",
    "\x0b\x0c", "\x85", "\u2028", "car\ttruck", "car\n\ntruck", " leading", "trailing ",
    "\x1c\x1d\x1e\x1f", "a\x1cb", "  many    spaces   between  ", "\xa0\xa0nbsp\xa0",
]
MOJIBAKE = [
    "cafÃ©", "Ã©cole", "â€œquotedâ€\x9d", "donâ€™t", "SchÃ¶n", "Ãƒâ€š", "Ð·Ð´Ð°Ð½Ð¸Ðµ", "Ã¡rbol",
    "EdifÃ\xadcio", "â€¦", "Ã\xa0 la",
]
CONTROL = [
    "\x00car", "a\x07b", "\x1b[31mred\x1b[0m", "\ufeffbom", "soft\xadhyphen", "\u200dzwj",
    "rtl\u202emark", "\x7f", "tab\x08back", "\ufffd", "\U000e0041tag", "road \ud800", "\udc80x",
    "\ud83d\ude00 pair", "&#xD800;", "&#55296;",
]
MARKERS = [
    "<start_of_text>", "<end_of_text>", "<START_OF_TEXT>", "a <end_of_text> b",
    "!<start_of_text>", "a<start_of_text>b", "<start_of_text><end_of_text>", "<|endoftext|>",
    "</w>", "car</w>", "<start_of_text", "'s<end_of_text>", "1<end_of_text>",
]
CASE = [
    "BUILDING", "Building", "bUiLdInG", "SOLAR PANEL", "Wind Turbine",
]
# fmt: on
LONG = (
    [
        "a large rectangular industrial building with a flat grey roof, several trucks parked in the "
        "loading bays, a fenced storage yard with shipping containers, and a narrow access road",
        "tree " * 100,
        "x" * 300,
        "🌳" * 40,
        "建筑物" * 30,
        "&amp;" * 40,
        "ﬁ" * 50,
        ", ".join(GEO_NOUNS[:60]),
    ]
    + ["tree " * n for n in range(25, 36)]
    + ["building, " * n for n in range(12, 20)]
)


def _build_phrases() -> list[str]:
    nouns = [n.replace("-", " ") for n in GEO_NOUNS]
    phrases = list(GEO_NOUNS) + nouns
    phrases += [f"{a} {n}" for a, n in itertools.product(ADJECTIVES, nouns[::6])]
    phrases += [t.format(n) for t, n in zip(itertools.cycle(TEMPLATES), nouns, strict=False)]
    phrases += [f"{a} and {b}" for a, b in zip(nouns, nouns[1:] + nouns[:1], strict=True)][::3]
    for group in (
        PUNCTUATION, DIGITS, SCRIPTS, HTML_ENTITIES, LIGATURES, CURLY_QUOTES, FULL_WIDTH, EMOJI,
        WHITESPACE, MOJIBAKE, CONTROL, MARKERS, CASE, LONG,
    ):  # fmt: skip
        phrases += group
        phrases += [f"red {p} near the road" for p in group[::2]]
    return phrases


PHRASES = _build_phrases()


# --- the official tokenizer -------------------------------------------------------------------


@pytest.fixture(scope="module")
def official():
    tokenizer_ve = require("sam3.model.tokenizer_ve")
    vocab = resources.files("napari_sam3").joinpath("data", "bpe_simple_vocab_16e6.txt.gz")
    with resources.as_file(vocab) as path:
        tok = tokenizer_ve.SimpleTokenizer(bpe_path=str(path))

    def run(texts, context_length: int = CTX) -> np.ndarray:
        return tok(texts, context_length=context_length).numpy()

    return run


def _quiet(texts, context_length: int = CTX) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return tokenize(texts, context_length=context_length)


def _assert_rows_equal(ours: np.ndarray, ref: np.ndarray, texts: list[str]) -> None:
    assert ours.shape == ref.shape
    bad = [
        (t, ours[i].tolist(), ref[i].tolist())
        for i, t in enumerate(texts)
        if (ours[i] != ref[i]).any()
    ]
    assert not bad, f"{len(bad)} of {len(texts)} differ, first: {bad[:3]}"


# --- equality with the official tokenizer -----------------------------------------------------


def test_phrase_list_is_large_and_varied() -> None:
    assert len(PHRASES) >= 500
    assert len(set(PHRASES)) >= 500


@pytest.mark.needs_export
def test_matches_official_on_phrase_list(official) -> None:
    ours = _quiet(PHRASES)
    _assert_rows_equal(ours, official(PHRASES), PHRASES)
    # the list really exercises truncation, markers and empty prompts
    assert (ours[:, -1] == EOT_ID).sum() >= 10
    assert ((ours == SOT_ID).sum(axis=1) > 1).any()
    assert (ours[:, 1] == EOT_ID).sum() >= 5


@pytest.mark.needs_export
def test_matches_official_one_string_at_a_time(official) -> None:
    for text in PHRASES[::25] + WHITESPACE + MARKERS:
        np.testing.assert_array_equal(_quiet(text), official(text), err_msg=repr(text))


@pytest.mark.needs_export
@pytest.mark.parametrize("context_length", [2, 5, 77])
def test_matches_official_at_other_context_lengths(official, context_length: int) -> None:
    texts = PHRASES[::10]
    _assert_rows_equal(_quiet(texts, context_length), official(texts, context_length), texts)


_FRAGMENTS = (
    GEO_NOUNS[:40] + ADJECTIVES + PUNCTUATION + LIGATURES + CURLY_QUOTES + EMOJI + MOJIBAKE
    + ["&amp;", "&lt;", "&#39;", "'s", "'t", "'ll", " ", "  ", "\t", "\n", "ſ", "<end_of_text>"]
)  # fmt: skip
_TEXT = st.one_of(
    st.text(max_size=60),
    st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=4)), max_size=12).map("".join),
)


@pytest.mark.needs_export
@settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(texts=st.lists(_TEXT, min_size=1, max_size=4))
def test_matches_official_on_random_text(official, texts: list[str]) -> None:
    _assert_rows_equal(_quiet(texts), official(texts), texts)


# --- shape, dtype, layout ---------------------------------------------------------------------


def test_string_gives_one_row_of_int64() -> None:
    ids = tokenize("solar panel")
    assert ids.shape == (1, CTX)
    assert ids.dtype == np.int64
    assert ids[0, 0] == SOT_ID
    n = int(np.flatnonzero(ids[0] == EOT_ID)[0])
    assert n >= 2  # at least one word id between the markers
    assert (ids[0, n + 1 :] == PAD_ID).all()
    assert ((ids[0, 1:n] >= 0) & (ids[0, 1:n] < SOT_ID)).all()
    assert VOCAB_SIZE == EOT_ID + 1


@pytest.mark.parametrize("text", ["", " ", "\t\n  ", "\u3000"])
def test_empty_and_whitespace_only_give_markers_only(text: str) -> None:
    expected = np.zeros((1, CTX), dtype=np.int64)
    expected[0, :2] = [SOT_ID, EOT_ID]
    np.testing.assert_array_equal(tokenize(text), expected)


def test_sequence_gives_one_row_per_string() -> None:
    words = ["building", "swimming pool", "wind turbine", "", "🚢"]
    for seq in (words, tuple(words), np.array(words)):
        ids = tokenize(seq)
        assert ids.shape == (len(words), CTX)
        assert ids.dtype == np.int64
        for i, w in enumerate(words):
            np.testing.assert_array_equal(ids[i], tokenize(w)[0])
    assert tokenize([]).shape == (0, CTX)


def test_case_and_whitespace_folding() -> None:
    np.testing.assert_array_equal(tokenize("  Wind\t\nTURBINE "), tokenize("wind turbine"))


def test_context_length_argument() -> None:
    assert tokenize("tree", context_length=77).shape == (1, 77)
    assert tokenize(["a", "b"], context_length=np.int64(8)).shape == (2, 8)


# --- truncation -------------------------------------------------------------------------------


def test_long_prompt_is_truncated_with_a_warning() -> None:
    text = "a red roof next to a green field " * 8
    with pytest.warns(UserWarning, match="truncated to 32 tokens"):
        ids = tokenize(text)
    assert ids.shape == (1, CTX)
    assert ids[0, 0] == SOT_ID and ids[0, -1] == EOT_ID
    assert (ids[0, 1:-1] != PAD_ID).all() and (ids[0, 1:-1] != EOT_ID).all()
    # the kept ids are the prompt's first ones
    full = tokenize(text, context_length=200)
    np.testing.assert_array_equal(ids[0, :-1], full[0, : CTX - 1])


def test_warning_names_the_context_length() -> None:
    with pytest.warns(UserWarning, match="truncated to 6 tokens"):
        tokenize("one two three four five six", context_length=6)


def test_prompt_that_just_fits_does_not_warn() -> None:
    # find the longest "tree tree ..." that still fits: its ids end exactly at the last slot
    n = 1
    while tokenize("tree " * (n + 1), context_length=200)[0].nonzero()[0].size <= CTX:
        n += 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ids = tokenize("tree " * n)
    assert ids[0, -1] == EOT_ID and ids[0, -2] != EOT_ID
    with pytest.warns(UserWarning, match="truncated"):
        tokenize("tree " * (n + 1))


def test_only_the_long_prompt_of_a_batch_warns() -> None:
    with pytest.warns(UserWarning) as record:
        ids = tokenize(["car", "boat " * 50, "tree"])
    assert len(record) == 1 and "boat" in str(record[0].message)
    assert ids[1, -1] == EOT_ID and ids[0, 2] == EOT_ID


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [None, 3, 2.5, b"building", bytearray(b"x"), {"a"}, {"a": 1}, ["ok", 3], ("ok", None),
     [b"bytes"], np.array([["a", "b"]]), iter(["a"])],
)  # fmt: skip
def test_non_str_input_is_a_type_error(bad) -> None:
    with pytest.raises(TypeError, match="str"):
        tokenize(bad)


def test_type_error_names_the_bad_item() -> None:
    with pytest.raises(TypeError, match="item 1 is int"):
        tokenize(["ok", 7])


@pytest.mark.parametrize("bad", ["32", 32.0, True, None])
def test_context_length_must_be_an_int(bad) -> None:
    with pytest.raises(TypeError, match="context_length"):
        tokenize("tree", context_length=bad)


@pytest.mark.parametrize("bad", [1, 0, -32])
def test_context_length_must_hold_both_markers(bad: int) -> None:
    with pytest.raises(ValueError, match="context_length"):
        tokenize("tree", context_length=bad)


# --- no torch ---------------------------------------------------------------------------------


def test_import_and_use_without_torch() -> None:
    src = str(Path(napari_sam3.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    code = (
        "import sys\n"
        "import napari_sam3.prompts.tokenizer as t\n"
        "ids = t.tokenize(['solar panel', 'ship'])\n"
        "assert ids.shape == (2, 32), ids.shape\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'sam3'))\n"
        "assert not bad, bad\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
