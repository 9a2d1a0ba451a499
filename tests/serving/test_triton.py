"""The model repository on a real `tritonserver` (the CPU server inside nvidia-pytriton)."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest

from napari_sam3 import Sam3Client
from napari_sam3.core import contract
from napari_sam3.prompts.tokenizer import tokenize
from napari_sam3.runtime.engines import LocalEngine
from napari_sam3.runtime.engines.model_config import load_model_configs
from napari_sam3.runtime.postprocess import postprocess

pytestmark = pytest.mark.needs_tritonserver


@pytest.fixture(scope="module")
def triton_client(triton_server):
    return Sam3Client(triton_server.grpc_address, connect_timeout=30)


def _images(seed: int, size: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (1, 3, size, size), dtype=np.uint8)


def _segment_inputs(manifest: contract.Manifest, seed: int = 0, boxes=()) -> dict:
    s, k = manifest.image_size, manifest.exemplar_slots
    inputs = {
        contract.IMAGES: _images(seed, s),
        contract.TOKEN_IDS: tokenize("building"),
        contract.EXEMPLAR_BOXES: np.zeros((1, k, 4), np.float32),
        contract.EXEMPLAR_LABELS: np.zeros((1, k), np.int64),
        contract.EXEMPLAR_VALID: np.zeros((1, k), np.bool_),
    }
    for i, box in enumerate(boxes):
        inputs[contract.EXEMPLAR_BOXES][0, i] = box
        inputs[contract.EXEMPLAR_LABELS][0, i] = 1
        inputs[contract.EXEMPLAR_VALID][0, i] = True
    return inputs


def test_production_configs_match_the_graphs(tiny_repository, tmp_path):
    """`--flavor onnx` configs parse with Triton's schema and name every graph tensor exactly."""
    from sam3_export.triton_repo import graph_signature, write_repository

    repo = tmp_path / "production"
    shutil.copytree(tiny_repository, repo, ignore=shutil.ignore_patterns("config.pbtxt", "*.py"))
    write_repository(repo, contract.load_manifest(repo), flavor="onnx")
    configs = load_model_configs(repo)
    graphs = [*contract.GROUNDING_GRAPHS, *contract.PVS_GRAPHS]
    for name in graphs:
        config = configs[name]
        assert config.platform == "onnxruntime_onnx"
        assert [g.kind for g in config.proto.instance_group] == [1]  # KIND_GPU
        model = onnx.load(str(contract.graph_path(repo, name)), load_external_data=False)
        inputs, outputs = graph_signature(contract.graph_path(repo, name))
        assert [i.name for i in config.inputs] == [n for n, _, _ in inputs]
        assert [o.name for o in config.outputs] == [o.name for o in model.graph.output]
        for spec, (_, _, dims) in zip(config.inputs, inputs, strict=True):
            assert list(spec.shape) == dims
        for spec, value in zip(config.outputs, model.graph.output, strict=True):
            onnx_dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
            assert list(spec.shape) == onnx_dims
            assert spec.dtype == onnx.helper.tensor_dtype_to_np_dtype(
                value.type.tensor_type.elem_type
            )
    for ensemble in (contract.SEGMENT, contract.CONCEPT, contract.SEGMENT_CONCEPT):
        config = configs[ensemble]
        assert config.is_ensemble
        manifest = contract.manifest_from_config(config)
        assert manifest.model_id == contract.load_manifest(repo).model_id
        for step in config.proto.ensemble_scheduling.step:
            step_config = configs[step.model_name]
            assert set(step.input_map) <= {i.name for i in step_config.inputs}
            assert set(step.output_map) <= {o.name for o in step_config.outputs}


def test_segment_ensemble_equals_graphs_run_directly(triton_client, tiny_repository):
    manifest = contract.load_manifest(tiny_repository)
    inputs = _segment_inputs(manifest, boxes=[(10, 12, 60, 70)])
    inputs[contract.SCORE_THR] = np.array([0.0], np.float32)
    served = triton_client.engine.infer(contract.SEGMENT, inputs, contract.RESULT_OUTPUTS)

    from napari_sam3.runtime import onnx_runner
    from napari_sam3.runtime.engines.model_config import load_model_configs

    configs = load_model_configs(tiny_repository)

    def run(name, feeds):
        # the graph as the server runs it: same runner, runtime and precision (bf16 on a CPU
        # that has it), so the comparison is of the ensemble's wiring, not of precisions
        logic = onnx_runner.Logic(str(tiny_repository / name / "1"), configs[name].parameters)
        return logic.run({k: feeds[k] for k in logic.inputs})

    feeds = dict(inputs)
    feeds.update(run(contract.ENCODER, feeds))
    feeds.update(run(contract.TEXT, feeds))
    heads = run(contract.DECODER, feeds)
    scores, boxes, payload = postprocess(
        heads[contract.PRED_LOGITS],
        heads[contract.PRED_BOXES],
        heads[contract.PRED_MASKS],
        heads[contract.PRESENCE_LOGIT],
        manifest.image_size,
        score_thr=0.0,
    )
    assert len(scores) > 0
    np.testing.assert_allclose(served[contract.SCORES], scores, atol=1e-5)
    np.testing.assert_allclose(served[contract.BOXES], boxes, atol=1e-3)
    assert served[contract.MASKS_RLE].tobytes() == payload


@pytest.mark.parametrize("model", [contract.SEGMENT, contract.CONCEPT, contract.SEGMENT_CONCEPT])
def test_every_ensemble_equals_the_embedded_engine(model, triton_client, tiny_repository):
    local = LocalEngine(tiny_repository, precision="fp32")
    manifest = contract.load_manifest(tiny_repository)
    inputs = _segment_inputs(manifest, seed=3, boxes=[(20, 20, 80, 90), (5, 5, 30, 30)])
    if model == contract.CONCEPT:
        inputs.pop(contract.TOKEN_IDS)
    if model == contract.SEGMENT_CONCEPT:
        concept = local.infer(
            contract.CONCEPT, {k: v for k, v in inputs.items() if k != contract.TOKEN_IDS}
        )
        for name in (contract.EXEMPLAR_BOXES, contract.EXEMPLAR_LABELS, contract.EXEMPLAR_VALID):
            inputs.pop(name)
        inputs.update(concept)
    if model != contract.CONCEPT:
        inputs[contract.SCORE_THR] = np.array([0.0], np.float32)
    served = triton_client.engine.infer(model, inputs)
    embedded = local.infer(model, inputs)
    assert served.keys() == embedded.keys()
    for name in served:
        if served[name].dtype == np.uint8:  # the RLE payload (in-process: made when asked for)
            assert served[name].tobytes() == np.asarray(embedded[name]).tobytes(), name
        else:
            np.testing.assert_allclose(served[name], embedded[name], atol=1e-5, err_msg=name)


def test_optional_inputs_omitted_take_the_defaults(triton_client, tiny_repository):
    from napari_sam3.runtime import postprocess as post

    manifest = contract.load_manifest(tiny_repository)
    inputs = _segment_inputs(manifest, seed=5)
    omitted = triton_client.engine.infer(contract.SEGMENT, inputs, contract.RESULT_OUTPUTS)
    explicit = triton_client.engine.infer(
        contract.SEGMENT,
        {
            **inputs,
            contract.SCORE_THR: np.array([post.DEFAULT_SCORE_THR], np.float32),
            contract.MASK_THR: np.array([post.DEFAULT_MASK_THR], np.float32),
            contract.MAX_DET: np.array([post.DEFAULT_MAX_DET], np.int32),
        },
        contract.RESULT_OUTPUTS,
    )
    lowered = triton_client.engine.infer(
        contract.SEGMENT, {**inputs, contract.SCORE_THR: np.array([0.0], np.float32)}
    )
    for name in contract.RESULT_OUTPUTS:
        assert omitted[name].tobytes() == explicit[name].tobytes()
    assert len(lowered[contract.SCORES]) == manifest.num_queries
    assert np.all(omitted[contract.SCORES] >= post.DEFAULT_SCORE_THR)


def test_bad_dtype_or_shape_is_an_error_and_the_server_keeps_serving(
    triton_client, tiny_repository
):
    manifest = contract.load_manifest(tiny_repository)
    inputs = _segment_inputs(manifest)
    with pytest.raises(ValueError, match="images_u8|FP32|UINT8|dtype"):
        triton_client.engine.infer(
            contract.SEGMENT,
            {**inputs, contract.IMAGES: inputs[contract.IMAGES].astype(np.float32)},
        )
    with pytest.raises(ValueError, match="shape|dims|token_ids"):
        triton_client.engine.infer(
            contract.SEGMENT, {**inputs, contract.TOKEN_IDS: tokenize(["a", "b"])}
        )
    with pytest.raises(ValueError, match="max_det"):
        triton_client.engine.infer(
            contract.SEGMENT, {**inputs, contract.MAX_DET: np.array([-1], np.int32)}
        )
    out = triton_client.engine.infer(contract.SEGMENT, inputs, contract.RESULT_OUTPUTS)
    assert out[contract.SCORES].dtype == np.float32


def _execution_count(client, model: str) -> int:
    stats = client.engine.statistics(model)["model_stats"]
    return sum(int(s.get("execution_count", 0)) for s in stats)


def test_multi_runs_one_vision_pass_for_all_keywords(triton_client, s2_crop):
    keywords = ["building", "road", "water", "field"]
    triton_client.clear_cache()  # the image may be held from an earlier test
    encoder_before = _execution_count(triton_client, contract.ENCODER)
    decoder_before = _execution_count(triton_client, contract.DECODER)
    df = triton_client.multi(s2_crop, keywords, score_thr=0.0, dedup=None)
    assert _execution_count(triton_client, contract.ENCODER) - encoder_before == 1
    assert _execution_count(triton_client, contract.DECODER) - decoder_before == len(keywords)
    assert set(df["keyword"]) == set(keywords)
    concept = triton_client.encode_exemplars(s2_crop, [[40, 30, 140, 120]], name="roofs")
    triton_client.clear_cache()  # the image may be held from an earlier test
    encoder_before = _execution_count(triton_client, contract.ENCODER)
    ct_before = _execution_count(triton_client, contract.DECODER_CT)
    df = triton_client.multi(s2_crop, keywords[:2], concepts=[concept], score_thr=0.0)
    assert _execution_count(triton_client, contract.ENCODER) - encoder_before == 1
    assert _execution_count(triton_client, contract.DECODER_CT) - ct_before == 1
    assert "roofs" in set(df["keyword"])


@pytest.mark.parametrize("where", ["triton", "embedded"])
def test_the_stateless_multi_model_answers_as_the_cache(
    where, triton_client, tiny_repository, s2_crop
):
    """`sam3_multi` runs the grounding function of `sam3_cached` (without the cache): the same
    detections, query after query, keywords and a concept, on Triton and in-process."""
    from napari_sam3.masks.rle import as_rle_masks

    concept = triton_client.encode_exemplars(s2_crop, [[40, 30, 140, 120]], name="roofs")
    engine = triton_client.engine
    if where == "embedded":
        engine = LocalEngine(tiny_repository, precision="fp32")
    inputs = {
        contract.IMAGES: triton_client.prepare(s2_crop).images_u8,
        contract.TOKEN_IDS: tokenize(["building", "road", "roofs"]),
        **concept.tensors(),
        contract.SCORE_THR: np.array([0.0], np.float32),
    }
    stateless = engine.infer(contract.MULTI, inputs)
    cached = engine.infer(
        contract.CACHED,
        {**inputs, contract.CACHE_OP: np.array([b"ground"], object)},
        [*contract.RESULT_OUTPUTS, contract.KEYWORD_COUNTS],
    )
    assert list(stateless[contract.KEYWORD_COUNTS]) == list(cached[contract.KEYWORD_COUNTS])
    assert len(stateless[contract.KEYWORD_COUNTS]) == 3
    for name in (contract.SCORES, contract.BOXES):
        np.testing.assert_array_equal(stateless[name], cached[name])
    masks = [as_rle_masks(out[contract.MASKS_RLE]) for out in (stateless, cached)]
    assert len(masks[0]) > 0 and masks[0].to_bytes() == masks[1].to_bytes()
    if where == "embedded":
        engine.close()


def test_client_over_grpc_equals_embedded(triton_client, local_client, s2_crop):
    for options in (
        {"prompt": "building", "score_thr": 0.0},
        {"exemplar_boxes": [[30, 40, 120, 150]], "score_thr": 0.0},
    ):
        served, embedded = (
            triton_client.segment(s2_crop, **options),
            local_client.segment(s2_crop, **options),
        )
        assert len(served) == len(embedded) > 0
        np.testing.assert_allclose(served["score"].values, embedded["score"].values, atol=1e-5)
        for a, b in zip(served["mask"], embedded["mask"], strict=True):
            assert np.array_equal(np.asarray(a), np.asarray(b))
    served = triton_client.interactive(s2_crop).add_point((100, 80))
    embedded = local_client.interactive(s2_crop).add_point((100, 80))
    np.testing.assert_allclose(served["iou"].values, embedded["iou"].values, atol=1e-5)
    assert np.array_equal(np.asarray(served["mask"][0]), np.asarray(embedded["mask"][0]))


def test_interactive_features_stay_on_the_server(triton_client, s2_crop):
    session = triton_client.interactive(s2_crop)
    before = _execution_count(triton_client, contract.ENCODER)
    session.add_point((50, 60))
    session.add_point((150, 100), positive=False)
    session.add_box([20, 20, 200, 180])
    assert _execution_count(triton_client, contract.ENCODER) == before
    # the one feature cache answers a session whose image it does not hold with "miss"
    out = triton_client.engine.infer(
        contract.CACHED,
        {
            **session._prompt_tensors(session.prompts),
            contract.CACHE_OP: np.array([b"interactive"], object),
            contract.IMAGE_ID: np.array([b"0" * 64], object),
        },
        [contract.CACHE_STATUS],
    )
    assert out[contract.CACHE_STATUS].reshape(-1)[0] in (b"miss", "miss")


def test_unknown_server_fails_with_the_connect_timeout_and_advice():
    with pytest.raises(ConnectionError) as error:
        Sam3Client("127.0.0.1:1", connect_timeout=0.5)
    message = str(error.value)
    assert message.startswith("no ready Triton server at 127.0.0.1:1 within 0.5 s (")
    assert "refused" in message and "sam3-serve MODEL_REPOSITORY" in message
    with pytest.raises(ValueError, match="host:8001"):
        Sam3Client("no-port-here")


def _live_processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process that is not a zombie (Linux /proc)."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                state, ppid = f.read().rsplit(b")", 1)[1].split()[:2]
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        if state != b"Z":
            found[int(entry.name)] = (int(ppid), " ".join(a.decode(errors="replace") for a in args))
    return found


def _still_running(pids, wait: float) -> list[int]:
    """The processes of `pids` that have not exited (a zombie has) after waiting up to `wait`
    seconds for each one's exit (its pidfd turns readable)."""
    running = []
    end = time.monotonic() + wait
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            readable, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        finally:
            os.close(fd)
        if not readable:
            running.append(pid)
    return running


def _serving(repository) -> dict[int, tuple[int, str]]:
    """The live processes whose command line names `repository` (server, stubs, sam3-serve)."""
    return {pid: p for pid, p in _live_processes().items() if str(repository) in p[1]}


def test_sam3_serve_command_starts_and_stops_cleanly(tiny_repository, tmp_path):
    from napari_sam3.serving.ports import free_port
    from napari_sam3.serving.processes import SHM_PREFIX

    # A copy of its own, so that its processes are told apart from the session server's.
    repository = shutil.copytree(tiny_repository, tmp_path / "served_by_sam3_serve").resolve()
    python_models = {p.parent.parent.name for p in repository.glob("*/1/model.py")}
    assert python_models, "the tiny repository has Python-backend models (their stubs are checked)"

    grpc = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "napari_sam3.serving.command",
            str(repository),
            "--grpc-port",
            str(grpc),
            "--http-port",
            str(free_port()),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = []
        while not lines or not ("ready" in lines[-1] or lines[-1] == ""):
            lines.append(process.stdout.readline())  # "" once it exited
        assert f"ready on grpc 127.0.0.1:{grpc}" in lines[-1], "".join(lines)
        # While it runs: the tritonserver that sam3-serve started on this repository, and one
        # backend stub per Python model of it (so the checks after the stop can see leftovers).
        running = _serving(repository)
        servers = [
            pid
            for pid, (ppid, args) in running.items()
            if ppid == process.pid and f"--model-repository={repository}" in args
        ]
        assert len(servers) == 1, running
        (server,) = servers
        stubs = [
            args.split()
            for pid, (ppid, args) in running.items()
            if ppid == server and "triton_python_backend_stub" in args
        ]
        assert {args[1].split("/")[-3] for args in stubs} == python_models
        # Each stub names its shared-memory region (other servers on the machine have theirs).
        regions = {word for args in stubs for word in args if word.startswith(SHM_PREFIX)}
        assert len(regions) == len(stubs)

        client = Sam3Client(f"127.0.0.1:{grpc}", connect_timeout=10)
        session = client.interactive(np.zeros((64, 64, 3), np.uint8))
        session.add_point((10, 10))
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
        # sam3-serve returns only once its server has exited (its stubs follow in a moment).
        server_alive = server in _live_processes()
        assert not server_alive, f"tritonserver (pid {server}) outlived sam3-serve"
        with pytest.raises(ConnectionError, match="still running|unreachable|no ready"):
            client.segment(np.zeros((64, 64, 3), np.uint8), "building")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        # Stubs stopped last exit a moment after sam3-serve: wait for their exit (at most 5 s)
        # before calling them leftovers.
        leftovers = _still_running(_serving(repository), wait=5)
        # A failed check above must not leave a server behind for the rest of the session.
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert "sam3-serve: stopped" in process.stdout.read()
    assert not leftovers, f"processes serving the repository outlived sam3-serve: {leftovers}"
    left = sorted(r for r in regions if os.path.exists(f"/dev/shm/{r}"))
    assert not left, f"shared-memory regions of the stopped server left in /dev/shm: {left}"
