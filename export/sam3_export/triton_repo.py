"""The Triton model repository around the exported graphs: configs, Python models, ensembles.

`write_repository(out_dir, manifest, flavor, device)` runs after the graphs are exported:

- one `config.pbtxt` per ONNX graph, with the graph's own input/output names, dtypes and static
  dims. `flavor="onnx"` serves them with Triton's ONNX Runtime backend (`onnxruntime_onnx`,
  KIND_GPU unless `device="cpu"`); `flavor="python"` serves each through a Python-backend model
  that runs it with `napari_sam3.runtime.onnx_runner` (for Triton builds without the ONNX
  Runtime backend), at the `runtime` and `precision` written into its parameters (OpenVINO or
  ONNX Runtime, fp32 or bf16, or "auto": decided on the server's CPU when it loads);
  `flavor="openvino"` serves them with Triton's own OpenVINO backend (`backend: "openvino"`,
  `model.onnx`, CPU), bf16 hinted on the graphs `onnx_runner.BF16_GRAPHS` lists (OpenVINO
  uses the hint only on CPUs with native bf16);
- the Python models `sam3_postprocess`, `sam3_multi` and `sam3_cached` (the one feature cache,
  in front of every head that needs image features: grounding, concepts, clicks, the point grid): a generic adapter as
  `model.py`, beside verbatim copies of their logic modules from `napari_sam3.runtime`
  (and `rle.py`, `rle_kernels.py`, `contract.py`), so that server and embedded engine run the same code;
- the ensembles `sam3_segment`, `sam3_concept`, `sam3_segment_concept`, carrying the manifest.

The models clients call directly (`QUEUED_MODELS`: `sam3_cached`, which `Sam3Client` sends
everything to, and `sam3_multi`) hold at most `max_queue` requests waiting
(`dynamic_batching { default_queue_policy { max_queue_size } }`, honoured by the CPU server of
nvidia-pytriton too, with `max_batch_size: 0`): beyond it Triton answers at once UNAVAILABLE
"Exceeds maximum queue size", which the client takes as "busy, retry" (runtime/engines/triton.py),
so a flood of clients costs the server a bounded memory. The ensembles have no queue of their
own (Triton's ensemble scheduler takes no queue policy); their steps keep Triton's default.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

import napari_sam3
from napari_sam3.core import contract, errors, validate
from napari_sam3.masks import rle as rle_module
from napari_sam3.masks import rle_kernels
from napari_sam3.runtime import cached as cached_logic
from napari_sam3.runtime import onnx_runner

LOGIC_DIR = Path(napari_sam3.__file__).parent / "runtime"
RESULT_OPTIONS = (
    (contract.SCORE_THR, "TYPE_FP32"),
    (contract.MASK_THR, "TYPE_FP32"),
    (contract.MAX_DET, "TYPE_INT32"),
)
ONNX_TO_TRITON = {
    onnx.TensorProto.BOOL: "TYPE_BOOL",
    onnx.TensorProto.UINT8: "TYPE_UINT8",
    onnx.TensorProto.INT32: "TYPE_INT32",
    onnx.TensorProto.INT64: "TYPE_INT64",
    onnx.TensorProto.FLOAT: "TYPE_FP32",
}
FLAVORS = ("onnx", "python", "openvino")
DEVICES = ("gpu", "cpu")
# Requests a client-facing model holds waiting. Each holds its inputs (a full-size image is 3 MB)
# while it waits; 16 clients with 2 requests in flight each fit without a "busy" answer.
DEFAULT_MAX_QUEUE = 32
MAX_QUEUE_LIMIT = 1 << 20
QUEUED_MODELS = (contract.CACHED, contract.MULTI)


def graph_signature(path: Path) -> tuple[list[tuple], list[tuple]]:
    """[(name, triton dtype, dims)] of a graph's inputs and outputs, read from the file."""
    model = onnx.load(str(path), load_external_data=False)

    def entries(values):
        out = []
        for value in values:
            tensor = value.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
            if any(d < 0 for d in dims):
                raise ValueError(
                    f"{path}: {value.name} has a dynamic dimension; graphs must be static"
                )
            out.append((value.name, ONNX_TO_TRITON[tensor.elem_type], dims))
        return out

    initializers = {i.name for i in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in initializers]
    return entries(inputs), entries(model.graph.output)


def _tensor(entry, name: str, dtype: str, dims, optional: bool = False):
    entry.name = name
    entry.data_type = pb.DataType.Value(dtype)
    entry.dims.extend(int(d) for d in dims)
    if optional:
        entry.optional = True


def _config(name: str, inputs, outputs, optional=()) -> pb.ModelConfig:
    config = pb.ModelConfig(name=name, max_batch_size=0)
    for n, dtype, dims in inputs:
        _tensor(config.input.add(), n, dtype, dims, n in optional)
    for n, dtype, dims in outputs:
        _tensor(config.output.add(), n, dtype, dims)
    return config


def _set_parameters(config: pb.ModelConfig, parameters: dict) -> None:
    for key, value in parameters.items():
        config.parameters[key].string_value = str(value)


def _instances(config: pb.ModelConfig, kind: str, count: int = 1) -> None:
    group = config.instance_group.add()
    group.kind = pb.ModelInstanceGroup.Kind.Value(kind)
    group.count = count


def _queue_limit(config: pb.ModelConfig, max_queue: int) -> None:
    """At most `max_queue` requests wait for `config`'s model (0: no limit, Triton's default)."""
    if max_queue:
        config.dynamic_batching.default_queue_policy.max_queue_size = max_queue


def written_max_queue(config) -> int | None:
    """The queue limit a parsed config (a ModelConfig proto) holds: 0 for none, None when it
    was written before the limit existed."""
    if not config.HasField("dynamic_batching"):
        return None
    return int(config.dynamic_batching.default_queue_policy.max_queue_size)


def _write(model_dir: Path, config: pb.ModelConfig) -> None:
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(config))


def _python_model(
    model_dir: Path, config: pb.ModelConfig, logic_module: str, siblings: tuple[str, ...] = ()
) -> None:
    config.backend = "python"
    config.parameters["logic_module"].string_value = logic_module
    version = model_dir / "1"
    version.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(LOGIC_DIR / "triton_adapter.py", version / "model.py")
    for source in (
        LOGIC_DIR / f"{logic_module}.py",
        *(LOGIC_DIR / f"{name}.py" for name in siblings),
        LOGIC_DIR / "postprocess.py",
        Path(rle_module.__file__),
        Path(rle_kernels.__file__),  # postprocess.py's compiled path (numpy where numba is absent)
        Path(contract.__file__),
        Path(validate.__file__),  # the checks every Python model runs on its inputs
        Path(errors.__file__),
    ):
        shutil.copyfile(source, version / source.name)
    _write(model_dir, config)


def _graph_model(
    out_dir: Path, name: str, flavor: str, device: str, runtime: str, precision: str
) -> tuple[list, list]:
    inputs, outputs = graph_signature(contract.graph_path(out_dir, name))
    config = _config(name, inputs, outputs)
    if flavor == "onnx":
        config.platform = "onnxruntime_onnx"
        _instances(config, "KIND_GPU" if device == "gpu" else "KIND_CPU")
        _write(out_dir / name, config)
    elif flavor == "openvino":
        config.backend = "openvino"
        config.default_model_filename = "model.onnx"
        _instances(config, "KIND_CPU")  # the OpenVINO backend runs on the CPU only
        bf16 = precision == onnx_runner.BF16 or (
            precision == onnx_runner.AUTO and name in onnx_runner.BF16_GRAPHS
        )
        _set_parameters(config, {"NUM_STREAMS": "1", **({"HINT_BF16": "YES"} if bf16 else {})})
        _write(out_dir / name, config)
    else:
        _instances(config, "KIND_CPU" if device == "cpu" else "KIND_GPU")
        if precision == onnx_runner.INT8 and not onnx_runner.has_int8(out_dir / name / "1"):
            precision = onnx_runner.AUTO  # int8 where the graph has its INT8 IR
        _set_parameters(config, {"runtime": runtime, "precision": precision})
        _python_model(out_dir / name, config, "onnx_runner", ("host",))
    return inputs, outputs


def _step(ensemble: pb.ModelConfig, model: str, inputs, outputs) -> None:
    step = ensemble.ensemble_scheduling.step.add()
    step.model_name = model
    step.model_version = -1
    for key in inputs:
        step.input_map[key] = key
    for key in outputs:
        step.output_map[key] = key


def _manifest_json(manifest: contract.Manifest) -> str:
    return json.dumps(manifest.as_dict(), sort_keys=True)


def _ensemble(name, inputs, outputs, steps, manifest, optional=()) -> pb.ModelConfig:
    config = _config(name, inputs, outputs, optional)
    config.platform = "ensemble"
    _set_parameters(config, {contract.MANIFEST_PARAMETER: _manifest_json(manifest)})
    for model, step_inputs, step_outputs in steps:
        _step(config, model, step_inputs, step_outputs)
    return config


def _result_outputs() -> list[tuple]:
    return [
        (contract.SCORES, "TYPE_FP32", [-1]),
        (contract.BOXES, "TYPE_FP32", [-1, 4]),
        (contract.MASKS_RLE, "TYPE_UINT8", [-1]),
    ]


def check_options(
    flavor: str,
    device: str,
    runtime: str = "auto",
    precision: str = "auto",
    max_queue: int | None = None,
) -> None:
    """Raise ValueError for a combination the repository writer cannot write."""
    if max_queue is not None and (
        isinstance(max_queue, bool)
        or not isinstance(max_queue, int)
        or not 0 <= max_queue <= MAX_QUEUE_LIMIT
    ):
        raise ValueError(
            f"max_queue is the number of requests a model holds waiting, 0 (no limit) to "
            f"{MAX_QUEUE_LIMIT}, got {max_queue!r}"
        )
    if flavor not in FLAVORS:
        raise ValueError(f"flavor must be one of {FLAVORS}, got {flavor!r}")
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    onnx_runner.check_choice(runtime, precision)
    if flavor == "openvino" and device == "gpu":
        raise ValueError("Triton's OpenVINO backend runs on the CPU: use --device cpu")
    if flavor != "python" and runtime != onnx_runner.AUTO:
        raise ValueError(
            f"runtime applies to the python flavor; the {flavor} flavor runs in Triton's own "
            "backend (leave runtime at 'auto')"
        )
    if flavor == "onnx" and precision == onnx_runner.BF16:
        raise ValueError("Triton's ONNX Runtime backend runs these graphs at fp32 only")
    if flavor != "python" and precision == onnx_runner.INT8:
        raise ValueError(
            "int8 runs the INT8 IRs through our runner in Triton's Python backend: use "
            "--flavor python"
        )


def write_repository(
    out_dir: str | Path,
    manifest: contract.Manifest,
    flavor: str = "onnx",
    device: str = "gpu",
    runtime: str = "auto",
    precision: str = "auto",
    max_queue: int | None = None,
) -> list[str]:
    """Write every config, Python model and ensemble around the graphs in `out_dir`.

    `runtime` and `precision` (see `onnx_runner.choose`) apply to the python flavor's graphs;
    `precision` also to the openvino flavor's. `max_queue`: the requests each of
    `QUEUED_MODELS` holds waiting (None: `DEFAULT_MAX_QUEUE`; 0: no limit)."""
    check_options(flavor, device, runtime, precision, max_queue)
    max_queue = DEFAULT_MAX_QUEUE if max_queue is None else max_queue
    out_dir = Path(out_dir)
    manifest = manifest.with_entries(
        flavor=flavor, device=device, max_keywords=contract.MAX_KEYWORDS
    )
    sig = {}
    graphs = [*contract.GROUNDING_GRAPHS, *contract.PVS_GRAPHS]
    for name in graphs:
        if contract.graph_path(out_dir, name).exists():
            sig[name] = _graph_model(out_dir, name, flavor, device, runtime, precision)
    missing = [g for g in contract.GROUNDING_GRAPHS if g not in sig]
    if missing:
        raise FileNotFoundError(f"{out_dir} lacks the graphs {missing}; export them first")
    written = list(sig)
    params = {
        "image_size": manifest.image_size,
        "max_keywords": contract.MAX_KEYWORDS,
        "exemplar_slots": manifest.exemplar_slots,
    }
    options = [(n, t, [1]) for n, t in RESULT_OPTIONS]
    option_names = [n for n, _, _ in options]
    (enc_in, enc_out), (text_in, text_out) = sig[contract.ENCODER], sig[contract.TEXT]
    dec_in, dec_out = sig[contract.DECODER]
    ct_in, _ = sig[contract.DECODER_CT]
    ce_in, ce_out = sig[contract.CONCEPT_ENCODER]
    exemplar_in = [
        e
        for e in dec_in
        if e[0] in (contract.EXEMPLAR_BOXES, contract.EXEMPLAR_LABELS, contract.EXEMPLAR_VALID)
    ]
    concept_in = [e for e in ct_in if e[0] in contract.CONCEPT_OUTPUTS]

    post = _config(contract.POSTPROCESS, dec_out + options, _result_outputs(), option_names)
    _set_parameters(post, params)
    _instances(post, "KIND_CPU")
    _python_model(out_dir / contract.POSTPROCESS, post, "postprocess")
    written.append(contract.POSTPROCESS)

    def names(entries):
        return [e[0] for e in entries]

    grounding = [e for e in enc_out if e[0] in contract.GROUNDING_VISION]
    segment = _ensemble(
        contract.SEGMENT,
        enc_in + text_in + exemplar_in + options,
        _result_outputs(),
        [
            (contract.ENCODER, names(enc_in), names(grounding)),
            (contract.TEXT, names(text_in), names(text_out)),
            (contract.DECODER, names(dec_in), names(dec_out)),
            (contract.POSTPROCESS, names(dec_out) + option_names, names(_result_outputs())),
        ],
        manifest,
        option_names,
    )
    concept = _ensemble(
        contract.CONCEPT,
        enc_in + exemplar_in,
        ce_out,
        [
            (contract.ENCODER, names(enc_in), [n for n in names(ce_in) if n in names(enc_out)]),
            (contract.CONCEPT_ENCODER, names(ce_in), names(ce_out)),
        ],
        manifest,
    )
    segment_concept = _ensemble(
        contract.SEGMENT_CONCEPT,
        enc_in + text_in + concept_in + options,
        _result_outputs(),
        [
            (contract.ENCODER, names(enc_in), names(grounding)),
            (contract.TEXT, names(text_in), names(text_out)),
            (contract.DECODER_CT, names(ct_in), names(dec_out)),
            (contract.POSTPROCESS, names(dec_out) + option_names, names(_result_outputs())),
        ],
        manifest,
        option_names,
    )
    for config in (segment, concept, segment_concept):
        _write(out_dir / config.name, config)
        (out_dir / config.name / "1").mkdir(exist_ok=True)  # Triton wants a version folder
        written.append(config.name)

    tokens = contract.TEXT_TOKENS
    batched_concepts = [(n, t, [-1, *d[1:]]) for n, t, d in concept_in]
    multi = _config(
        contract.MULTI,
        enc_in + [(contract.TOKEN_IDS, "TYPE_INT64", [-1, tokens])] + batched_concepts + options,
        _result_outputs() + [(contract.KEYWORD_COUNTS, "TYPE_INT32", [-1])],
        option_names + [n for n, _, _ in batched_concepts],
    )
    _set_parameters(multi, {**params, contract.MANIFEST_PARAMETER: _manifest_json(manifest)})
    _instances(multi, "KIND_CPU")
    _queue_limit(multi, max_queue)
    _python_model(out_dir / contract.MULTI, multi, "multi", ("cached",))
    written.append(contract.MULTI)

    written.append(_cached(out_dir, sig, manifest, options, max_queue))
    return written


def _cached(
    out_dir: Path, sig: dict, manifest: contract.Manifest, options: list, max_queue: int
) -> str:
    """`sam3_cached`: the feature cache in front of every head (one instance: one cache)."""
    enc_in, _ = sig[contract.ENCODER]
    text_in, _ = sig[contract.TEXT]
    dec_in, _ = sig[contract.DECODER]
    ct_in, _ = sig[contract.DECODER_CT]
    _, ce_out = sig[contract.CONCEPT_ENCODER]
    exemplar_names = (contract.EXEMPLAR_BOXES, contract.EXEMPLAR_LABELS, contract.EXEMPLAR_VALID)
    batched = [
        (n, t, [-1, *d[1:]])
        for n, t, d in text_in + dec_in + ct_in
        if n in (contract.TOKEN_IDS, *exemplar_names, *contract.CONCEPT_OUTPUTS)
    ]
    inputs = [
        (contract.CACHE_OP, "TYPE_STRING", [1]),
        (contract.IMAGE_ID, "TYPE_STRING", [1]),
        *enc_in,
        *batched,
        *options,
    ]
    params = {}
    if contract.PVS_DECODER in sig:
        pvs_in, _ = sig[contract.PVS_DECODER]
        grid_in, _ = sig.get(contract.PVS_GRID_DECODER, sig[contract.PVS_DECODER])
        grid_dims = dict((n, d) for n, _, d in grid_in)[contract.PVS_POINT_COORDS]
        params["grid_batch"] = grid_dims[0]
        inputs += [e for e in pvs_in if e[0] in contract.PVS_PROMPTS] + [
            (contract.PVS_GRID_COORDS, "TYPE_FP32", [-1, grid_dims[1], 2]),
            (contract.PVS_GRID_LABELS, "TYPE_FP32", [-1, grid_dims[1]]),
        ]
    outputs = [
        (contract.CACHE_STATUS, "TYPE_STRING", [1]),
        (contract.CACHE_INFO, "TYPE_STRING", [1]),
        (contract.CACHE_MODEL_ID, "TYPE_STRING", [1]),
        *_result_outputs(),
        (contract.KEYWORD_COUNTS, "TYPE_INT32", [-1]),
        *[
            (new, t, d)
            for (n, t, d) in ce_out
            for old, new in zip(contract.CONCEPT_OUTPUTS, contract.ENCODED_CONCEPT, strict=True)
            if n == old
        ],
        (contract.PVS_IOU, "TYPE_FP32", [-1, 3]),
        (contract.PVS_LOW_RES, "TYPE_FP32", [-1, 3, -1, -1]),
        (contract.PVS_GRID_LOW_RES, "TYPE_FP32", [-1, 3, -1, -1]),
        (contract.PVS_GRID_IOU, "TYPE_FP32", [-1, 3]),
    ]
    optional = [n for n, _, _ in inputs if n != contract.CACHE_OP]
    config = _config(contract.CACHED, inputs, outputs, optional)
    _set_parameters(
        config,
        {
            **params,
            # bounds and lifetime of the caches; edit them here (or per client: embedded)
            "cache_bytes": cached_logic.DEFAULT_CACHE_BYTES,
            "heads_cache_bytes": cached_logic.DEFAULT_HEADS_CACHE_BYTES,
            "cache_ttl_s": int(cached_logic.DEFAULT_TTL_S),
            contract.MANIFEST_PARAMETER: _manifest_json(manifest),
        },
    )
    _instances(config, "KIND_CPU")  # ONE instance: a second would hold a second cache
    _queue_limit(config, max_queue)
    _python_model(out_dir / contract.CACHED, config, "cached")
    return contract.CACHED
