"""Property-based tests over the public entry points (issue 24): every input gives a clean
result or napari-sam3's own error, never another library's exception or a traceback.

Bounded: a few examples each, no deadline, so the module runs in the normal suite.
"""

from __future__ import annotations

import traceback

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from napari_sam3.cli import main
from napari_sam3.core import contract, validate
from napari_sam3.core.errors import InvalidInput, Sam3Error

FEW = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

odd_floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.sampled_from([0.0, -1.0, 1e30, -1e30, 0.5, 1008.0, 2000.0]),
)
odd_ints = st.one_of(st.integers(-(2**40), 2**40), st.sampled_from([0, -1, 49406, 49407, 49408]))


def _ours(error: BaseException) -> bool:
    """napari-sam3's own error: a Sam3Error, or raised by a napari_sam3 frame."""
    if isinstance(error, Sam3Error):
        return True
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and "napari_sam3" in frames[-1].filename


@st.composite
def wire_requests(draw):
    """Requests as a raw client could send them: every tensor name, odd shapes and values."""
    s, k, t, d = 112, 8, 9, 32  # the tiny model's sizes: shapes mostly fit, values are odd
    rows = draw(st.integers(0, 10))
    pick = draw(st.sets(st.sampled_from(sorted(TENSORS)), min_size=1, max_size=6))
    inputs = {name: TENSORS[name](draw, rows, s, k, t, d) for name in pick}
    if draw(st.booleans()):
        inputs[contract.CACHE_OP] = np.array([draw(st.sampled_from([b"ground", b"x", b"\xff"]))])
    return inputs


def _floats(draw, shape):
    return np.array(draw(st.lists(odd_floats, min_size=1, max_size=1)) * int(np.prod(shape)),
                    np.float32).reshape(shape)  # fmt: skip


TENSORS = {
    contract.TOKEN_IDS: lambda draw, n, s, k, t, d: np.full(
        (n, draw(st.sampled_from([32, 31]))), draw(odd_ints), np.int64
    ),
    contract.EXEMPLAR_BOXES: lambda draw, n, s, k, t, d: _floats(draw, (max(n, 1), k, 4)),
    contract.EXEMPLAR_LABELS: lambda draw, n, s, k, t, d: np.full((max(n, 1), k), draw(odd_ints)),
    contract.EXEMPLAR_VALID: lambda draw, n, s, k, t, d: np.full(
        (max(n, 1), k), draw(st.booleans())
    ),
    contract.CONCEPT_TOKENS_NAME: lambda draw, n, s, k, t, d: _floats(draw, (n, t, d)),
    contract.CONCEPT_PADDING_MASK: lambda draw, n, s, k, t, d: np.full((n, t), draw(st.booleans())),
    contract.PVS_POINT_COORDS: lambda draw, n, s, k, t, d: _floats(draw, (1, 16, 2)),
    contract.PVS_POINT_LABELS: lambda draw, n, s, k, t, d: _floats(draw, (1, 16)),
    contract.PVS_GRID_COORDS: lambda draw, n, s, k, t, d: _floats(draw, (n * 700, 1, 2)),
    contract.PVS_GRID_LABELS: lambda draw, n, s, k, t, d: _floats(draw, (n * 700, 1)),
    contract.SCORE_THR: lambda draw, n, s, k, t, d: _floats(draw, (1,)),
    contract.MAX_DET: lambda draw, n, s, k, t, d: np.array([draw(odd_ints) % 2**31], np.int64),
    contract.IMAGE_ID: lambda draw, n, s, k, t, d: np.array([draw(st.binary(max_size=300))]),
}


@FEW
@given(wire_requests())
def test_the_request_check_refuses_only_with_its_own_error(inputs):
    try:
        validate.model_inputs(inputs)
    except InvalidInput:
        pass


@FEW
@given(wire_requests())
def test_the_cache_model_answers_or_refuses_as_the_client_check_says(local_client, inputs):
    """The embedded engine runs the server's own model logic: its verdict is the check's."""
    inputs = {**inputs, contract.IMAGES: np.zeros((1, 3, 112, 112), np.uint8)}
    inputs.setdefault(contract.CACHE_OP, np.array([b"ground"], dtype=object))
    try:
        validate.model_inputs(inputs, local_client.manifest)
        verdict = None
    except InvalidInput as refused:
        verdict = str(refused)
    try:  # what Triton itself checks before a model sees a request: dtypes and dims
        for spec in local_client.engine.config(contract.CACHED).inputs:
            if spec.name in inputs:
                spec.check(inputs[spec.name])
        declared = True
    except ValueError:
        declared = False
    try:
        local_client.engine.infer(contract.CACHED, inputs)
    except Exception as error:  # noqa: BLE001 - the property is about which errors
        assert _ours(error), f"{type(error).__name__}: {error}"
        if declared and verdict is not None:  # refused for the reason the client gives
            assert verdict in str(error), str(error)
    else:
        assert verdict is None, f"answered what the check refuses: {verdict}"


@FEW
@given(
    boxes=st.lists(st.lists(odd_floats, min_size=4, max_size=4), min_size=1, max_size=5),
    labels=st.one_of(st.none(), st.lists(odd_ints, min_size=1, max_size=5)),
    score_thr=st.one_of(st.none(), odd_floats),
    max_det=st.one_of(st.none(), odd_ints),
)
def test_the_library_answers_or_refuses_in_its_own_words(
    local_client, s2_crop, boxes, labels, score_thr, max_det
):
    try:
        frame = local_client.segment(
            s2_crop, exemplar_boxes=boxes, exemplar_labels=labels, score_thr=score_thr,
            max_det=max_det,
        )  # fmt: skip
    except Exception as error:  # noqa: BLE001
        assert _ours(error), f"{type(error).__name__}: {error}"
    else:
        assert {"box", "score", "mask"} <= set(frame.columns)


option_values = st.one_of(
    st.sampled_from(
        [
            "0",
            "-1",
            "1e309",
            "nan",
            "inf",
            "",
            " ",
            "3,2,1",
            "B04,B03,B02",
            "é∂",
            "1" * 40,
            "0.5",
            "-0.0",
            "9999999999",
        ]
    ),  # fmt: skip
    st.text(max_size=12),
)
OPTIONS = ["--tile-size", "--tile-overlap", "--score-thr", "--max-det", "--dedup", "--bands",
           "--nodata", "--prompt", "--keywords", "--simplify", "--min-area-px"]  # fmt: skip


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(st.lists(st.tuples(st.sampled_from(OPTIONS), option_values), min_size=1, max_size=3))
def test_the_cli_exits_with_a_documented_code_and_no_traceback(
    tiny_repository, tmp_path_factory, s2_rgb_paths, capfd, options
):
    out = tmp_path_factory.mktemp("fuzz") / "out.gpkg"
    argv = ["segment", str(s2_rgb_paths[0]), "--models", str(tiny_repository), "--precision", "fp32", "--out", str(out),
            "--quiet", "--prompt", "field"]  # fmt: skip
    for option, value in options:
        argv += [f"{option}={value}"]
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own refusal of a malformed value
        code = exit_.code
    captured = capfd.readouterr()
    assert code in (0, 1, 2), captured.err
    assert "Traceback" not in captured.err + captured.out
