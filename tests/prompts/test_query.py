"""The Query value: validated once with one set of messages, frozen, picklable, and keyed by
what decides its results (a concept by its tensors, not only its name)."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from napari_sam3.core.errors import InvalidInput, Sam3Error
from napari_sam3.prompts.concept import Concept
from napari_sam3.prompts.query import PostProcess, Query

# keywords an analyst types: letters, digits, punctuation and spaces of any script
words = st.text(st.characters(categories=("L", "N", "P", "Zs")), min_size=1, max_size=12).filter(
    lambda w: any(c.isalnum() for c in w)
)
unit = st.floats(0.01, 0.99, allow_nan=False)


def _concept(seed: int, name: str = "roofs", model_id: str = "model-a") -> Concept:
    rng = np.random.default_rng(seed)
    return Concept(
        tensors_={
            "concept_tokens": rng.normal(size=(1, 4, 8)).astype(np.float32),
            "concept_padding_mask": np.zeros((1, 4), bool),
        },
        model_id=model_id,
        name=name,
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(words, min_size=1, max_size=6))
def test_keywords_are_stripped_deduplicated_and_keep_their_order(keywords):
    query = Query(keywords=keywords)
    want = list(dict.fromkeys(" ".join(w.split()) for w in keywords))
    assert list(query.keywords) == want and query.count == len(want)
    # the same words given again in another container are the same query
    assert Query(keywords=tuple(want)) == query and hash(Query(keywords=want)) == hash(query)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(words, min_size=1, max_size=3),
    st.one_of(st.none(), unit),
    st.one_of(st.none(), st.integers(1, 500)),
    st.one_of(st.none(), unit),
    st.one_of(st.none(), st.floats(0, 1e6, allow_nan=False)),
)
def test_a_query_survives_pickling_with_its_key(keywords, score_thr, max_det, dedup, area):
    post = None if area is None else PostProcess(min_area_m2=area, fill_holes=True)
    query = Query(
        keywords=keywords, score_thr=score_thr, max_det=max_det, dedup=dedup, postprocess=post
    )
    again = pickle.loads(pickle.dumps(query))
    assert again == query and again.key() == query.key() and repr(again) == repr(query)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["score_thr", "mask_thr", "dedup"]),
    unit,
    unit,
)
def test_any_threshold_that_differs_makes_another_key(field, a, b):
    one = Query(keywords=["building"], **{field: a})
    two = Query(keywords=["building"], **{field: b})
    assert (one == two) == (a == b)
    assert (one.key() == two.key()) == (a == b)


def test_every_field_that_decides_results_is_in_the_key():
    base = Query(keywords=["building"])
    changed = [
        base.replace(keywords=("road",)),
        base.replace(keywords=("building", "road")),
        base.replace(score_thr=0.3),
        base.replace(mask_thr=0.4),
        base.replace(max_det=3),
        base.replace(dedup=None),
        base.replace(postprocess=PostProcess(fill_holes=True)),
        base.replace(exemplar_boxes=[[0, 0, 10, 10]]),
        base.replace(concepts=[_concept(0)]),
    ]
    keys = {q.key() for q in changed}
    assert base.key() not in keys and len(keys) == len(changed)


def test_a_concept_counts_by_its_tensors_and_its_name():
    a = Query(concepts=[_concept(0)])
    assert a == Query(concepts=[_concept(0)])  # a new object with the same tensors
    assert a != Query(concepts=[_concept(1)])  # the same name, other tensors
    assert a != Query(concepts=[_concept(0, name="sheds")])  # the name is the keyword
    renamed = Query(concepts={"sheds": _concept(0)})
    assert renamed.named_concepts()[0][0] == "sheds"
    assert Query(concepts=[_concept(0, name="")]).named_concepts()[0][0] == "concept_0"


def test_a_concept_file_is_read_once_and_named_by_its_stem(tmp_path):
    path = _concept(2, name="").save(tmp_path / "sheds.npz")
    query = Query(concepts=[path])
    assert [n for n, _ in query.named_concepts()] == ["sheds"]
    assert query.files() == {"exemplar file": [], "concept": [str(path)]}
    assert query == Query(concepts=[_concept(2, name="sheds")])
    with pytest.raises(ValueError, match="re-encode the exemplars with this model"):
        query.check_model("model-b")


def test_of_builds_what_the_keyword_arguments_meant():
    concept = _concept(3)
    assert Query.of("building") == Query(keywords=["building"])
    assert Query.of("building", ["road"], concept, score_thr=0.2) == Query(
        keywords=["building", "road"], concepts=[concept], score_thr=0.2
    )
    assert Query.parse("building, road; pool") == Query(keywords=["building", "road", "pool"])


@pytest.mark.parametrize(
    ("fields", "kind", "message"),
    [
        ({}, InvalidInput, "nothing to look for"),
        ({"keywords": []}, InvalidInput, "nothing to look for"),
        ({"keywords": "building"}, TypeError, "a list of strings"),
        ({"keywords": ["building", ""]}, InvalidInput, "non-empty string such as 'building'"),
        ({"keywords": ["building", 3]}, InvalidInput, "non-empty string"),
        ({"keywords": ["a"], "score_thr": 1.5}, ValueError, "score_thr"),
        ({"keywords": ["a"], "score_thr": float("nan")}, ValueError, "score_thr"),
        ({"keywords": ["a"], "mask_thr": 0.0}, ValueError, "mask_thr"),
        ({"keywords": ["a"], "max_det": 0}, ValueError, "max_det"),
        ({"keywords": ["a"], "dedup": 0.0}, ValueError, "or None to keep every mask"),
        ({"keywords": ["a"], "postprocess": {"fill_holes": True}}, InvalidInput, "PostProcess"),
        ({"keywords": ["a"], "concepts": [42]}, TypeError, "a concept is a Concept"),
        ({"keywords": ["a", "b"], "exemplar_boxes": [[0, 0, 5, 5]]}, InvalidInput, "one keyword"),
        ({"exemplar_boxes": [[5, 5, 0, 0]]}, ValueError, "give the top-left corner first"),
        ({"keywords": ["a"], "exemplar_labels": [1]}, InvalidInput, "without exemplar_boxes"),
        (
            {"exemplar_boxes": [[0, 0, 5, 5]], "exemplar_labels": [0]},
            InvalidInput,
            "at least one positive exemplar box",
        ),
    ],
)
def test_bad_fields_are_refused_with_what_to_do(fields, kind, message):
    with pytest.raises(kind, match=message) as info:
        Query(**fields)
    assert isinstance(info.value, Sam3Error)


def test_exemplar_boxes_with_a_concept_are_refused():
    with pytest.raises(InvalidInput, match="either a concept or exemplar boxes"):
        Query(concepts=[_concept(0)], exemplar_boxes=[[0, 0, 4, 4]])


def test_a_query_is_frozen():
    query = Query(keywords=["building"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        query.score_thr = 0.5  # type: ignore[misc]
    with pytest.raises(ValueError, match="score_thr"):
        query.replace(score_thr=2.0)  # a copy is checked again


def _same_table(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.drop(columns="mask"), b.drop(columns="mask"), check_exact=True)
    assert all(
        np.array_equal(x.to_dense(), y.to_dense())
        for x, y in zip(a["mask"], b["mask"], strict=True)
    )


def test_the_client_gives_the_same_table_for_a_query_and_for_keywords(local_client):
    image = np.random.default_rng(7).integers(0, 256, (120, 96, 3), np.uint8)
    several = local_client.multi(image, ["building", "road"], score_thr=0.0)
    assert len(several) > 0
    _same_table(
        local_client.segment(image, Query(keywords=["building", "road"], score_thr=0.0)), several
    )
    one = local_client.segment(image, "building", score_thr=0.0, max_det=3)
    _same_table(local_client.segment(image, Query.of("building", score_thr=0.0, max_det=3)), one)
    with pytest.raises(InvalidInput, match="score_thr given beside a Query"):
        local_client.segment(image, Query(keywords=["building"]), score_thr=0.5)
