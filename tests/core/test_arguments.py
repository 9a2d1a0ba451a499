"""Option values that start with a minus (coordinates west of Greenwich or south of the equator,
negative numbers) are values in every command, typed with a space as analysts type them."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from napari_sam3.cli import build_parser

# a minimal valid command line per sub-command, so that parsing reaches the option under test
BASE = {
    "segment": [
        "segment",
        "scene.tif",
        "--keywords",
        "tree",
        "--models",
        "repo",
        "--out",
        "o.gpkg",
    ],
    "change": [
        "change",
        "a.tif",
        "b.tif",
        "--keywords",
        "tree",
        "--models",
        "repo",
        "--out",
        "c.gpkg",
    ],
    "basemap": ["basemap", "https://t/{z}/{x}/{y}.png", "--bbox", "0,0,1,1", "--out", "b.vrt"],
    "info": ["info"],
}

numbers = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False).map(lambda x: f"{x:.6g}")
lists = st.lists(numbers, min_size=1, max_size=4).map(",".join)
values = st.tuples(lists, st.sampled_from(["", ",EPSG:4326", ",EPSG:32721"])).map("".join)
minus_values = values.filter(lambda v: v.startswith("-"))


def single_value_options(parser: argparse.ArgumentParser) -> list[str]:
    """The long options of `parser` that take exactly one value of free text or a number."""
    return [
        action.option_strings[-1]
        for action in parser._actions
        if action.option_strings
        and action.nargs is None
        and action.choices is None
        and action.type in (None, str, float, int)
        and action.option_strings[-1].startswith("--")
        and not isinstance(action, argparse._HelpAction)
    ]


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_the_commands_have_the_options_this_test_drives():
    commands = subparsers(build_parser())
    assert set(BASE) <= set(commands)
    for name in ("segment", "change", "basemap"):
        assert "--bbox" in single_value_options(commands[name]), name


def _minus_value(action: argparse.Action) -> st.SearchStrategy[str]:
    if action.type is int:
        return st.integers(max_value=-1).map(str)
    if action.type is float:
        return numbers.filter(lambda v: v.startswith("-"))
    return minus_values


@settings(max_examples=80, deadline=None)
@given(command=st.sampled_from(sorted(BASE)), data=st.data())
def test_a_value_with_a_leading_minus_is_read_as_typed(command, data):
    """Every single-value option of every command: `--opt -1...` reads as `--opt=-1...`."""
    parser = build_parser()
    sub = subparsers(parser)[command]
    exclusive = {
        o
        for g in sub._mutually_exclusive_groups
        for a in g._group_actions
        for o in a.option_strings
    }
    option = data.draw(
        st.sampled_from([o for o in single_value_options(sub) if o not in exclusive])
    )
    value = data.draw(_minus_value(sub._option_string_actions[option]))
    base = BASE[command]
    if option in base:  # the option under test replaces the base's own value
        at = base.index(option)
        base = base[:at] + base[at + 2 :]
    spaced = vars(parser.parse_args([*base, option, value]))
    joined = vars(parser.parse_args([*base, f"{option}={value}"]))
    assert spaced == joined


def test_bbox_west_and_south_reaches_the_command_as_typed():
    args = build_parser().parse_args([*BASE["segment"], "--bbox", "-57.3,-25.1,-57.0,-24.9"])
    assert args.bbox == "-57.3,-25.1,-57.0,-24.9"


def test_an_option_is_still_an_option():
    """Only a minus followed by a digit is a value: a missing value is still named."""
    with pytest.raises(SystemExit):
        build_parser().parse_args([*BASE["segment"], "--bbox", "--overwrite"])


def test_the_export_command_reads_negative_values_too():
    from sam3_export.cli import _parser

    assert _parser().parse_args(["--random-weights", "--seed", "-3", "--out", "r"]).seed == -3
