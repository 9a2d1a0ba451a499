"""The dock's prompt state (plain Python, no QGIS): undo takes back exactly the last prompt in
any sequence, a box replaces the earlier one until undone, the candidates cycle."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "qgis_plugin"))
from napari_sam3_qgis.prompts import Prompts  # noqa: E402

coordinate = st.floats(-1e6, 1e6, allow_nan=False)
point = st.tuples(st.just("point"), coordinate, coordinate, st.booleans())
box = st.tuples(st.just("box"), coordinate, coordinate, coordinate, coordinate)


def _give(prompts: Prompts, prompt) -> None:
    if prompt[0] == "point":
        prompts.add_point(*prompt[1:])
    else:
        prompts.set_box(*prompt[1:])


@given(st.lists(st.one_of(point, box), min_size=1, max_size=12))
def test_undo_takes_back_the_last_prompt_whatever_came_before(given_prompts):
    prompts, states = Prompts(), []
    for prompt in given_prompts:
        states.append((prompts.points, prompts.box))
        _give(prompts, prompt)
    last = given_prompts[-1]
    if last[0] == "box":  # ordered corners, the newest box wins
        assert prompts.box == [min(last[1], last[3]), min(last[2], last[4]),
                               max(last[1], last[3]), max(last[2], last[4])]  # fmt: skip
    else:
        assert prompts.points[-1] == [last[1], last[2], 1 if last[3] else 0]
    prompts.token = "t"
    for state in reversed(states):
        assert prompts.undo()
        assert (prompts.points, prompts.box) == state and prompts.token is None
    assert not prompts and not prompts.undo()
    request = prompts.request("img")
    assert request == {"image": "img", "points": [], "box": None, "previous": None}


def test_candidates_cycle_best_first_and_reset_forgets_them():
    prompts = Prompts()
    prompts.add_point(1, 2, True)
    assert prompts.current() is None and prompts.cycle() is None
    prompts.answered([{"score": 0.9}, {"score": 0.5}, {"score": 0.1}], "tok", [0, 0, 1, 1])
    assert prompts.current() == {"score": 0.9}
    assert [prompts.cycle()["score"] for _ in range(4)] == [0.5, 0.1, 0.9, 0.5]
    assert prompts.request("img")["previous"] == "tok"
    prompts.reset()
    assert not prompts and prompts.current() is None and prompts.token is None


def test_a_candidate_polygon_asked_later_fills_its_own_place():
    prompts = Prompts()
    prompts.add_point(1, 2, True)
    listed = [{"index": 0, "score": 0.9, "wkt": "A"}, {"index": 2, "score": 0.5}]
    prompts.answered(listed, "tok", None)
    assert "wkt" not in prompts.cycle()  # the engine is asked for index 2
    prompts.fill({"index": 2, "score": 0.5, "wkt": "C", "area_m2": 4.0})
    assert prompts.current() == {"index": 2, "score": 0.5, "wkt": "C", "area_m2": 4.0}
    assert prompts.cycle()["wkt"] == "A" and prompts.cycle()["wkt"] == "C"  # kept
    prompts.back()  # a refused ask: the one shown before
    assert prompts.current()["wkt"] == "A"
    prompts.fill({"index": 1, "wkt": "B"})  # not listed (empty): nothing changes
    assert [c.get("wkt") for c in prompts.candidates] == ["A", "C"]
