"""`auto` follows a repository's verification report, on either kind of CPU; a report that cannot
be trusted (damaged, another format version, made for other graph files or another model) is
ignored with a warning naming it and why, and auto falls back to the rule, never fails."""

from __future__ import annotations

import json
import shutil
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from napari_sam3 import Sam3Client
from napari_sam3.core import contract
from napari_sam3.runtime import onnx_runner as R

ENCODER, DECODER, TEXT = contract.ENCODER, contract.DECODER, contract.TEXT
GRAPHS = (ENCODER, DECODER, TEXT)


def make_repository(root, model_id="m" * 64):
    """A folder with a manifest and three small graph files: what the reader checks."""
    root.mkdir(parents=True, exist_ok=True)
    (root / contract.MANIFEST_FILE).write_text(json.dumps({"model_id": model_id}))
    for i, graph in enumerate(GRAPHS):
        path = contract.graph_path(root, graph)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes([i]) * 100)
    return root


def report_for(root, verdicts: dict[str, dict[str, str]], model_id=None) -> dict:
    manifest = json.loads((root / contract.MANIFEST_FILE).read_text())
    return {
        "format": R.VERIFICATION_FORMAT,
        "version": R.VERIFICATION_VERSION,
        "model_id": model_id or manifest["model_id"],
        "graphs": {
            graph: {
                "digest": R.graph_digest(contract.graph_path(root, graph)),
                "precisions": {p: {"verdict": v} for p, v in precisions.items()},
            }
            for graph, precisions in verdicts.items()
        },
    }


def write(root, report) -> None:
    text = report if isinstance(report, str | bytes) else json.dumps(report)
    path = root / R.VERIFICATION_FILE
    path.write_bytes(text.encode() if isinstance(text, str) else text)


MIXED = {
    ENCODER: {"fp32": "holds", "bf16": "holds"},
    DECODER: {"fp32": "holds", "bf16": "fails"},
    TEXT: {"fp32": "holds", "bf16": "not run"},
}


@pytest.fixture
def verified(tmp_path):
    root = make_repository(tmp_path / "repo")
    write(root, report_for(root, MIXED))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = R.load_verification(root)
    assert found is not None
    return found


def test_auto_takes_the_fastest_precision_that_holds_on_a_native_bf16_host(verified, hosts):
    host = hosts["native_bf16"]
    choices = {g: R.choose(g, "openvino", "auto", host, verified) for g in GRAPHS}
    assert {g: c.precision for g, c in choices.items()} == {
        ENCODER: "bf16",
        DECODER: "fp32",
        TEXT: "fp32",
    }
    assert "bf16 holds in VERIFICATION.md" in choices[ENCODER].reason
    assert "bf16 fails" in choices[DECODER].reason and "bf16 not run" in choices[TEXT].reason
    assert all(c.basis == R.VERIFICATION_SUMMARY for c in choices.values())
    assert R.summary(choices).endswith("(verified: VERIFICATION.md)")


def test_a_holding_bf16_verdict_needs_native_bf16(verified, hosts):
    """An emulated verdict counts on a native-bf16 host; an AVX2 host still runs fp32."""
    choice = R.choose(ENCODER, "openvino", "auto", hosts["avx2"], verified)
    assert choice.precision == "fp32" and "bf16 holds but" in choice.reason
    assert "no native bf16" in choice.reason and choice.basis == R.VERIFICATION_SUMMARY


def test_the_report_replaces_the_static_list(verified, hosts, monkeypatch):
    host = hosts["native_bf16"]
    monkeypatch.setattr(R, "BF16_GRAPHS", frozenset())
    assert R.choose(ENCODER, "openvino", "auto", host, verified).precision == "bf16"
    assert R.choose(ENCODER, "openvino", "auto", host).precision == "fp32"
    monkeypatch.setattr(R, "BF16_GRAPHS", frozenset({DECODER}))
    assert R.choose(DECODER, "openvino", "auto", host, verified).precision == "fp32"
    assert R.choose(DECODER, "openvino", "auto", host).precision == "bf16"


def test_explicit_precisions_are_unaffected(verified, hosts):
    host = hosts["native_bf16"]
    fp32 = R.choose(ENCODER, "openvino", "fp32", host, verified)
    bf16 = R.choose(DECODER, "openvino", "bf16", host, verified)
    assert (fp32.precision, fp32.basis) == ("fp32", "") and (bf16.precision, bf16.basis) == (
        "bf16",
        "",
    )
    with pytest.raises(R.PrecisionUnavailable):
        R.choose(ENCODER, "openvino", "bf16", hosts["avx2"], verified)
    onnxruntime = R.choose(ENCODER, "onnxruntime", "auto", host, verified)
    assert onnxruntime.precision == "fp32" and R.summary({ENCODER: onnxruntime}).endswith(
        "(rule: docs/serving.md#precision)"
    )


def _damage(root, how: str) -> str:
    """Make the report untrustworthy in one way; the reason the warning must give."""
    good = report_for(root, MIXED)
    if how == "not json":
        write(root, "{not json")
        return "not JSON"
    if how == "too large":
        write(root, " " * (R.VERIFICATION_MAX_BYTES + 1))
        return "over the"
    if how == "version":
        write(root, {**good, "version": 2})
        return "format version 2"
    if how == "other graph files":
        write(root, good)
        contract.graph_path(root, DECODER).write_bytes(b"re-exported" * 10)
        return "sam3_decoder: made for other graph files (checksums differ)"
    if how == "other model":
        write(root, {**good, "model_id": "x" * 64})
        return "made for another model"
    if how == "unknown graph":
        good["graphs"]["sam9_thing"] = good["graphs"][ENCODER]
        write(root, good)
        return "unknown graph 'sam9_thing'"
    if how == "unknown verdict":
        good["graphs"][ENCODER]["precisions"]["bf16"]["verdict"] = "probably"
        write(root, good)
        return "verdict 'probably'"
    raise AssertionError(how)


@pytest.mark.parametrize(
    "how",
    [
        "not json",
        "too large",
        "version",
        "other graph files",
        "other model",
        "unknown graph",
        "unknown verdict",
    ],
)
def test_an_untrustworthy_report_is_ignored_with_a_warning(tmp_path, how, hosts):
    root = make_repository(tmp_path / "repo")
    reason = _damage(root, how)
    with pytest.warns(R.VerificationIgnored) as caught:
        assert R.load_verification(root) is None
    message = str(caught[0].message)
    assert str(root / R.VERIFICATION_FILE) in message and reason in message, message
    assert "follows the rule" in message


def test_no_report_no_warning(tmp_path):
    root = make_repository(tmp_path / "repo")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert R.load_verification(root) is None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
KEYS = st.sampled_from(
    ["format", "version", "model_id", "graphs", "precisions", "verdict", "digest"]
)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    replace_at=st.lists(st.tuples(st.integers(0, 5), KEYS, JSON), max_size=3),
    whole=st.none() | JSON,
)
def test_crafted_reports_never_raise(tmp_path_factory, replace_at, whole, hosts):
    """Whatever JSON a report holds, reading it returns a Verification or None (with the
    warning), and the choices made from it are valid."""
    root = make_repository(tmp_path_factory.mktemp("crafted"))
    report = report_for(root, MIXED)
    if whole is not None:
        report = whole
    else:
        for depth, key, value in replace_at:  # replace a value somewhere along the report
            node = report
            for _ in range(depth):
                children = (
                    [v for v in node.values() if isinstance(v, dict)]
                    if isinstance(node, dict)
                    else []
                )
                if not children:
                    break
                node = children[0]
            if isinstance(node, dict):
                node[key] = value
    write(root, report)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", R.VerificationIgnored)
        found = R.load_verification(root)
    for graph in GRAPHS:
        choice = R.choose(graph, "openvino", "auto", hosts["native_bf16"], found)
        assert choice.precision in R.PRECISIONS


def test_the_embedded_engine_follows_the_report_and_says_so(tiny_repository, tmp_path, any_host):
    """On either kind of CPU: the choices and the one runtime line name VERIFICATION.md."""
    root = tmp_path / "repo"
    shutil.copytree(tiny_repository, root, symlinks=True)
    graphs = [
        g
        for g in (*contract.GROUNDING_GRAPHS, *contract.PVS_GRAPHS)
        if contract.graph_path(root, g).is_file()
    ]
    verdicts = {g: {"fp32": "holds", "bf16": "holds" if g == ENCODER else "fails"} for g in graphs}
    write(root, report_for(root, verdicts))
    client = Sam3Client.local(root)
    try:
        choices = client.engine.runtime_choices()
        native = any_host.native_bf16()[0]
        assert choices[ENCODER].precision == ("bf16" if native else "fp32")
        assert all(choices[g].precision == "fp32" for g in graphs if g != ENCODER)
        assert "(verified: VERIFICATION.md)" in repr(client)
    finally:
        client.close()
    (root / R.VERIFICATION_FILE).unlink()
    client = Sam3Client.local(root)
    try:
        assert "(rule: docs/serving.md#precision)" in repr(client)
    finally:
        client.close()
