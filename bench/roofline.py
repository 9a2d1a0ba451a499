"""Runtimes against this machine's limit (issue 14): GEMM rate, graph FLOPs, stage times, RSS.

1. This machine's GEMM rate: a 5184 x 1024 x 4096 MatMul (the ViT MLP's shape at full size) in
   OpenVINO and (where installed) torch, at fp32 and, where the CPU has native bf16, at bf16.
2. Each graph's FLOPs, counted from its ONNX file: MatMul, Gemm, Conv, ConvTranspose and Einsum
   nodes with the shapes from ONNX shape inference (2 FLOPs per multiply-add).
3. Per runtime and precision, each in its own process (so peak RSS is that runtime's): load time
   with a cold and a warm OpenVINO cache, encoder / text / decoder / postprocess times (best of
   `--repeat`, wall and process CPU), one interactive click, the end-to-end text prompt, the
   encoder's achieved FLOP rate as a fraction of the measured GEMM rate at its precision, and
   the end-to-end ratio against ONNX Runtime fp32.

.venv/bin/python bench/roofline.py [--repo DIR] [--threads 2] [--repeat 2]
                                   [--runs onnxruntime/fp32,openvino/fp32,openvino/bf16]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import tiny_repository  # noqa: E402

GEMM_SHAPE = (5184, 1024, 4096)
STAGE_GRAPHS = ("sam3_unified_encoder", "sam3_text", "sam3_decoder", "sam3_pvs_decoder")


# ---- 1. GEMM rate -------------------------------------------------------------------------------
def gemm_rates(threads: int, repeat: int = 5) -> dict[str, tuple[float, float]]:
    """{engine/precision: (FLOP per wall second, FLOP per CPU second)}: on a shared machine the
    second is the steadier one (other processes take wall time, not this process's CPU time)."""
    from napari_sam3.runtime.host import detect, import_openvino

    ov = import_openvino()
    from openvino import opset13 as ops

    m, k, n = GEMM_SHAPE
    flops = 2.0 * m * k * n
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    rates = {}
    native, _ = detect().native_bf16()
    param = ops.parameter([m, k], np.float32, name="a")
    model = ov.Model([ops.matmul(param, ops.constant(b), False, False)], [param], "gemm")
    for precision, hint in (("fp32", "f32"), ("bf16", "bf16")):
        if precision == "bf16" and not native:
            continue
        compiled = ov.Core().compile_model(
            model,
            "CPU",
            {
                "INFERENCE_PRECISION_HINT": hint,
                "INFERENCE_NUM_THREADS": threads,
                "PERFORMANCE_HINT": "LATENCY",
            },
        )
        request = compiled.create_infer_request()
        rates[f"openvino/{precision}"] = _rate(flops, lambda r=request: r.infer({0: a}), repeat)
    try:
        import torch
    except ImportError:
        return rates
    torch.set_num_threads(threads)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    rates["torch/fp32"] = _rate(flops, lambda: ta @ tb, repeat)
    if native:  # without it torch emulates bf16 at ~0.2 GFLOP/s here: minutes per product
        ha, hb = ta.bfloat16(), tb.bfloat16()
        rates["torch/bf16"] = _rate(flops, lambda: ha @ hb, repeat)
    return rates


def _rate(flops: float, fn, repeat: int) -> tuple[float, float]:
    fn()
    wall, cpu, _ = _timed(fn, repeat)
    return flops / wall, flops / cpu


# ---- 2. FLOPs from the ONNX files ---------------------------------------------------------------
def graph_flops(path: Path) -> tuple[float, int]:
    """(FLOPs of the GEMM-class nodes, number of such nodes whose shapes were unknown)."""
    import onnx

    model = onnx.shape_inference.infer_shapes(onnx.load(str(path), load_external_data=False))
    graph = model.graph
    shapes = {}
    for v in (*graph.value_info, *graph.input, *graph.output):
        dims = v.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[v.name] = [d.dim_value for d in dims]
    for init in graph.initializer:
        shapes[init.name] = list(init.dims)
    total, unknown = 0.0, 0
    for node in graph.node:
        if node.op_type not in ("MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum"):
            continue
        ins = [shapes.get(name) for name in node.input if name]
        out = shapes.get(node.output[0])
        if any(s is None for s in ins) or out is None:
            unknown += 1
            continue
        total += _node_flops(node, ins, out)
    return total, unknown


def _node_flops(node, ins: list, out: list) -> float:
    attrs = {a.name: a for a in node.attribute}
    if node.op_type == "MatMul":
        a = ins[0]
        return 2.0 * float(np.prod(out)) * (a[-1] if a else 1)
    if node.op_type == "Gemm":
        a = ins[0]
        k = a[0] if "transA" in attrs and attrs["transA"].i else a[1]
        return 2.0 * float(np.prod(out)) * k
    if node.op_type == "Conv":
        w = ins[1]
        return 2.0 * float(np.prod(out)) * float(np.prod(w[1:]))
    if node.op_type == "ConvTranspose":
        x, w = ins[0], ins[1]
        return 2.0 * float(np.prod(x)) * float(np.prod(w[1:]))
    # Einsum: every index of the equation once, 2 FLOPs per multiply-add
    equation = attrs["equation"].s.decode().replace(" ", "")
    sizes = {}
    for term, shape in zip(equation.split("->")[0].split(","), ins, strict=False):
        for letter, dim in zip(re.sub(r"\.\.\.", "", term), shape[-len(term) :], strict=False):
            sizes[letter] = dim
    return 2.0 * float(np.prod(list(sizes.values())))


# ---- 3. one runtime and precision, in its own process -------------------------------------------
def _graph_inputs(path: Path) -> dict[str, tuple[list[int], np.dtype]]:
    import onnx
    from onnx import helper

    model = onnx.load(str(path), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    out = {}
    for v in model.graph.input:
        if v.name in initializers:
            continue
        t = v.type.tensor_type
        out[v.name] = (
            [d.dim_value for d in t.shape.dim],
            np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)),
        )
    return out


def _timed(fn, repeat: int) -> tuple[float, float, object]:
    """Best wall and best process-CPU seconds of `repeat` calls of `fn`, and its last result."""
    walls, cpus, result = [], [], None
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        result = fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus), result


def child(args) -> None:
    from napari_sam3.core import contract
    from napari_sam3.prompts.tokenizer import tokenize
    from napari_sam3.runtime import onnx_runner, postprocess

    runtime, precision = args.child.split("/")
    repo = Path(args.repo)
    report: dict = {"run": args.child, "load_s": {}, "stages": {}}
    runners = {}
    for graph in STAGE_GRAPHS:
        path = contract.graph_path(repo, graph)
        if not path.exists():
            continue
        start = time.perf_counter()
        runners[graph] = onnx_runner.make_runner(
            path, runtime, precision, args.threads, args.cache_dir or None, graph
        )
        report["load_s"][graph] = time.perf_counter() - start
    report["choice"] = {g: str(r.choice) for g, r in runners.items()}
    if args.load_only:
        report["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print("RESULT " + json.dumps(report), flush=True)
        return
    rng = np.random.default_rng(0)

    def feed_for(graph: str, tensors: dict) -> dict:
        feed = {}
        for name, (shape, dtype) in _graph_inputs(contract.graph_path(repo, graph)).items():
            feed[name] = tensors[name] if name in tensors else np.zeros(shape, dtype)
        return feed

    enc_inputs = _graph_inputs(contract.graph_path(repo, contract.ENCODER))
    tensors = {
        name: rng.integers(0, 256, size=shape).astype(dtype)
        for name, (shape, dtype) in enc_inputs.items()
    }
    tensors[contract.TOKEN_IDS] = tokenize("a red car").astype(np.int64).reshape(1, -1)
    stages = report["stages"]

    def stage(name: str, graph: str, repeat: int) -> None:
        runner = runners[graph]
        feed = feed_for(graph, tensors)
        wall, cpu, out = _timed(lambda: runner.run(feed), repeat)
        stages[name] = {"wall_s": wall, "cpu_s": cpu}
        tensors.update(out)

    stage("encoder", contract.ENCODER, args.repeat)
    stage("text", contract.TEXT, max(args.repeat, 5))
    stage("decoder", contract.DECODER, max(args.repeat, 3))
    image_size = enc_inputs[contract.IMAGES][0][-1]
    dec = [tensors[n] for n in contract.DECODER_OUTPUTS]
    for label, options in (("postprocess", {}), ("postprocess_all", {"score_thr": 0.0})):
        wall, cpu, (scores, _, payload) = _timed(
            lambda o=options: postprocess.postprocess(*dec, image_size, max_det=200, **o), 3
        )
        stages[label] = {"wall_s": wall, "cpu_s": cpu, "detections": len(scores)}
    if contract.PVS_DECODER in runners:
        points = _graph_inputs(contract.graph_path(repo, contract.PVS_DECODER))
        coords = np.zeros(points[contract.PVS_POINT_COORDS][0], np.float32)
        labels = np.full(points[contract.PVS_POINT_LABELS][0], -1.0, np.float32)
        coords[0, 0] = (image_size / 3, image_size / 2)
        labels[0, 0] = 1.0
        tensors[contract.PVS_POINT_COORDS], tensors[contract.PVS_POINT_LABELS] = coords, labels
        stage("click", contract.PVS_DECODER, 10)
    report["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(report), flush=True)


def run_child(repo: Path, run: str, args, cache_dir: str, load_only: bool = False) -> dict:
    command = [sys.executable, __file__, "--repo", str(repo), "--child", run]
    command += ["--threads", str(args.threads), "--repeat", str(args.repeat)]
    command += ["--cache-dir", cache_dir] + (["--load-only"] if load_only else [])
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        return {"run": run, "error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(lines[-1][len("RESULT ") :])


def gemm_child(threads: int) -> dict:
    """The GEMM rates, measured in a process of their own (its memory is not the runtimes')."""
    command = [sys.executable, __file__, "--child", "gemm", "--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return {k: tuple(v) for k, v in json.loads(line[len("RESULT ") :]).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", help="a repository written by sam3-export (default: tiny)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--runs", default="onnxruntime/fp32,openvino/fp32,openvino/bf16")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", help=argparse.SUPPRESS)
    parser.add_argument("--load-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "gemm":
        print("RESULT " + json.dumps(gemm_rates(args.threads)), flush=True)
        return
    if args.child:
        child(args)
        return
    from napari_sam3.core import contract
    from napari_sam3.runtime.host import detect

    repo = tiny_repository(args.repo)
    host = detect()
    native, why = host.native_bf16()
    wanted = sorted(f for f in host.cpu_flags if f.startswith(("avx512", "amx", "avx2")))
    print(f"CPU flags: {' '.join(wanted) or '-'}; native bf16: {native} ({why})")
    rates = gemm_child(args.threads)
    print(f"\nGEMM {'x'.join(map(str, GEMM_SHAPE))}, {args.threads} threads:")
    for name, (wall, cpu) in rates.items():
        print(f"  {name:<16} {wall / 1e9:8.1f} GFLOP/s wall, {cpu / 1e9:8.1f} GFLOP per CPU-s")

    print("\nGEMM-class FLOPs per graph (from the ONNX files):")
    flops = {}
    for graph in (*contract.GROUNDING_GRAPHS, *contract.PVS_GRAPHS):
        path = contract.graph_path(repo, graph)
        if path.exists():
            flops[graph], unknown = graph_flops(path)
            note = f" ({unknown} nodes of unknown shape not counted)" if unknown else ""
            print(f"  {graph:<24} {flops[graph] / 1e9:10.2f} GFLOP{note}")

    results = []
    for run in args.runs.split(","):
        if run.endswith("/bf16") and not native:
            print(f"\n{run}: skipped, {why} (OpenVINO would silently compute fp32)")
            continue
        with tempfile.TemporaryDirectory(prefix="ov-cache-") as cache:
            result = run_child(repo, run, args, cache)
            if "error" not in result and run.startswith("openvino"):
                warm = run_child(repo, run, args, cache, load_only=True)
                result["warm_load_s"] = warm.get("load_s", {})
        results.append(result)
    print_table(results, flops, rates)


def print_table(results: list[dict], flops: dict, rates: dict) -> None:
    base = next((r for r in results if r["run"] == "onnxruntime/fp32" and "stages" in r), None)

    def e2e(r, key: str = "wall_s") -> float:
        return sum(r["stages"][s][key] for s in ("encoder", "text", "decoder", "postprocess"))

    for r in results:
        print(f"\n== {r['run']}")
        if "error" in r:
            print(f"  failed: {r['error']}")
            continue
        print("  chosen: " + ", ".join(f"{g}={c}" for g, c in r["choice"].items()))
        load = sum(r["load_s"].values())
        warm = sum(r.get("warm_load_s", {}).values())
        print(f"  load (all graphs): {load:.1f} s" + (f", warm cache {warm:.1f} s" if warm else ""))
        for name, s in r["stages"].items():
            extra = f"  ({s['detections']} detections)" if "detections" in s else ""
            print(
                f"  {name:<16} wall {s['wall_s'] * 1e3:10.1f} ms   CPU {s['cpu_s']:8.2f} s{extra}"
            )
        total = e2e(r)
        line = f"  end to end (text prompt): {total:.2f} s wall, {e2e(r, 'cpu_s'):.1f} CPU-s"
        if base is not None:
            line += f"   vs onnxruntime/fp32: {e2e(base) / total:.2f}x"
            enc, enc0 = r["stages"]["encoder"], base["stages"]["encoder"]
            line += f"; encoder {enc0['wall_s'] / enc['wall_s']:.2f}x wall"
            line += f", {enc0['cpu_s'] / enc['cpu_s']:.2f}x CPU"
            line += f"; CPU end to end {e2e(base, 'cpu_s') / e2e(r, 'cpu_s'):.2f}x"
        print(line)
        precision = r["run"].split("/")[1]
        rate = rates.get(f"openvino/{precision}")
        if rate and "sam3_unified_encoder" in flops:
            enc = r["stages"]["encoder"]
            wall = flops["sam3_unified_encoder"] / enc["wall_s"]
            cpu = flops["sam3_unified_encoder"] / enc["cpu_s"]
            print(
                f"  encoder: {wall / 1e9:.1f} GFLOP/s wall = {wall / rate[0]:.0%} of the {precision} "
                f"GEMM rate; {cpu / 1e9:.1f} GFLOP per CPU-s = {cpu / rate[1]:.0%} of it"
            )
        print(f"  peak RSS: {r['peak_rss_mib']:.0f} MiB")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    main()
