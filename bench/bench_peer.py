"""The embedded engine against the official PyTorch SAM3 processor, on the same checkpoint, images
and threads: first text prompt on a new image, a second prompt on it, four keywords, a click, a
2x2-tile scene, peak memory.

Run (full size, 2 threads: about 20 min with --repeat 1 --scene-pairs best, ~11 GiB of RAM for
the two processes of a pair; the defaults take about twice as long):
    python bench/bench_peer.py --checkpoint sam3.pt --repo models/sam3 [--threads 2] [--repeat 2]
        [--pairs best,fp32] [--scene-pairs best,fp32] [--json out.json]

`--repo` is `sam3-export --checkpoint <the same sam3.pt> --size full` of that checkpoint; the
official side needs the `sam3` package (Meta's code; `pip install sam3`) and loads the checkpoint
with `load_from_HF=False` (nothing is downloaded).

Each side runs in its own process (so each peak RSS is that side's own). Sides are compared in
pairs: `best` = the official processor under bf16 autocast (on a CPU with native bf16; fp32
elsewhere) against the embedded engine with precision "auto"; `fp32` = both in fp32. The two
processes of a pair stay alive together and take turns step by step, so a neighbour's load on a
shared machine falls on both; wall and CPU time (all threads of the process) are recorded, the
best of --repeat runs, and the load average around each step.

What each step is, on both sides:
- first: a new image (1008x1008), text prompt "building": includes the image encoding.
- second: the same image, prompt "road" (features kept: official `state`, our feature cache).
- keywords: the same image, four keywords (official: `set_text_prompt` four times on one state,
  as its API offers; ours: one `client.multi` call).
- click: one positive point on the same image, features warm (official:
  `model.predict_inst(state, point_coords=..., multimask_output=True)`; ours:
  `client.interactive(image).add_point(...)`, the PVS decoder).
- scene: a 2016x2016 GeoTIFF, 2x2 tiles of 1008 px, no overlap, prompt "building". Ours:
  `segment_scene(client, path, "building", tile_size=1008, overlap=0)`. Official, as a user does by
  hand: read the raster with rasterio, crop the four 1008 px tiles as PIL images, `set_image` +
  `set_text_prompt` on each, shift the boxes by the tile's origin (no seam merging).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

TILE = 1008
PROMPT, SECOND = "building", "road"
KEYWORDS = ["building", "road", "tree", "car"]
STEPS = ("first", "second", "keywords", "click")


# -- shared by both sides ------------------------------------------------------------------------
def test_image(size: int, seed: int) -> np.ndarray:
    """A blocky random RGB image with noise, uint8 [S, S, 3] (the same on both sides)."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (size // 56 + 1, size // 56 + 1, 3))
    image = np.repeat(np.repeat(coarse, 56, axis=0), 56, axis=1)[:size, :size]
    return np.clip(image + rng.integers(-25, 26, image.shape), 0, 255).astype(np.uint8)


def host_has_native_bf16() -> bool:
    """The CPU computes bf16 in hardware (the runtime's rule; no OpenVINO needed here)."""
    from napari_sam3.runtime.host import BF16_FLAGS

    return bool(cpu_flags() & set(BF16_FLAGS))


def cpu_flags() -> frozenset[str]:
    from napari_sam3.runtime.host import read_cpu_flags

    return read_cpu_flags()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


# -- the worker processes ------------------------------------------------------------------------
class OfficialSide:
    """Meta's `sam3` package as its README shows it: build_sam3_image_model + Sam3Processor."""

    def __init__(self, checkpoint: str, threads: int, bf16: bool) -> None:
        import contextlib
        from importlib import resources

        import torch

        torch.set_num_threads(threads)
        # Value-neutral CPU shims (the package assumes a GPU): `_encode_boxes` pins a 4-number
        # tensor to page-locked memory (raises "Found no NVIDIA driver" without one, even for a
        # text prompt); pinning moves no values, so identity is the same computation.
        torch.Tensor.pin_memory = lambda self, *args, **kwargs: self
        from sam3.model.sam3_image_processor import Sam3Processor
        from sam3.model_builder import build_sam3_image_model

        self.torch = torch
        self.bf16 = bf16
        self.autocast = (
            (lambda: torch.autocast("cpu", dtype=torch.bfloat16))
            if bf16
            else contextlib.nullcontext
        )
        # The wheel does not ship the BPE vocabulary; napari-sam3 ships the same file.
        bpe = str(resources.files("napari_sam3") / "data" / "bpe_simple_vocab_16e6.txt.gz")
        with _cuda_allocations_on_cpu(torch):
            self.model = build_sam3_image_model(
                bpe_path=bpe,
                device="cpu",
                checkpoint_path=checkpoint,
                load_from_HF=False,  # never a hub download
                enable_inst_interactivity=True,
            )
        self.processor = Sam3Processor(self.model, device="cpu")
        self.missing = _not_in_checkpoint(torch, self.model, checkpoint)
        self.state: dict | None = None

    def warmup(self, image: np.ndarray) -> int:
        """First use after loading (one-time costs: oneDNN primitives, caches)."""
        return self.first(image) + self.click((TILE / 2, TILE / 2))

    def _pil(self, array: np.ndarray):
        from PIL import Image

        return Image.fromarray(array)

    def first(self, image: np.ndarray) -> int:
        with self.autocast():
            self.state = self.processor.set_image(self._pil(image))
            return self._prompt(PROMPT)

    def _prompt(self, text: str) -> int:
        self.state = self.processor.set_text_prompt(text, self.state)
        return int(len(self.state["scores"]))

    def second(self) -> int:
        with self.autocast():
            return self._prompt(SECOND)

    def keywords(self) -> int:
        with self.autocast():
            return sum(self._prompt(word) for word in KEYWORDS)

    def click(self, xy: tuple[float, float]) -> int:
        with self.autocast():
            masks, scores, _ = self.model.predict_inst(
                self.state,
                point_coords=np.array([xy], np.float32),
                point_labels=np.array([1], np.int32),
                multimask_output=True,
            )
        return int(len(scores))

    def scene(self, path: str) -> int:
        import rasterio

        with rasterio.open(path) as src:
            plane = np.moveaxis(src.read([1, 2, 3]), 0, -1)
        found = 0
        with self.autocast():
            for y in range(0, plane.shape[0], TILE):
                for x in range(0, plane.shape[1], TILE):
                    state = self.processor.set_image(self._pil(plane[y : y + TILE, x : x + TILE]))
                    state = self.processor.set_text_prompt(PROMPT, state)
                    boxes = state["boxes"].float() + self.torch.tensor([x, y, x, y])
                    found += len(boxes)
        return found

    def describe(self) -> str:
        return (
            "official Sam3Processor, " + ("bf16 autocast" if self.bf16 else "fp32")
            + f"; model weights not in the checkpoint: {self.missing}"
        )  # fmt: skip


def _not_in_checkpoint(torch, model, checkpoint: str) -> str:
    """Which of the official model's weights the checkpoint lacks (the loader only prints
    them), summarised by module: the same weights on both sides, or where they differ."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True, mmap=True)
    state = state.get("model", state)
    names = {k.replace("detector.", "", 1) for k in state if k.startswith("detector.")}
    names |= {
        k.replace("tracker.", "inst_interactive_predictor.model.", 1)
        for k in state
        if k.startswith("tracker.")
    }
    missing = [k for k in model.state_dict() if k not in names]
    groups: dict[str, int] = {}
    for key in missing:
        prefix = ".".join(key.split(".")[:3])
        groups[prefix] = groups.get(prefix, 0) + 1
    return f"{len(missing)} ({', '.join(f'{k}: {n}' for k, n in sorted(groups.items()))})"


def _cuda_allocations_on_cpu(torch):
    """While the model is built: the constructors' `device="cuda"` allocations (position-encoding
    and box-RPB coordinate caches) made on the CPU instead; same values, other device."""
    import contextlib

    @contextlib.contextmanager
    def swapped():
        originals = {name: getattr(torch, name) for name in ("zeros", "arange")}

        def on_cpu(fn):
            def call(*args, **kwargs):
                if str(kwargs.get("device", "")).startswith("cuda"):
                    kwargs["device"] = "cpu"
                return fn(*args, **kwargs)

            return call

        for name, fn in originals.items():
            setattr(torch, name, on_cpu(fn))
        try:
            yield
        finally:
            for name, fn in originals.items():
                setattr(torch, name, fn)

    return swapped()


class EmbeddedSide:
    """napari-sam3's embedded engine (`Sam3Client.local`) on the exported repository."""

    def __init__(self, repo: str, threads: int, precision: str) -> None:
        from napari_sam3 import Sam3Client

        self.client = Sam3Client.local(repo, threads=threads, precision=precision)
        self.prepared = None

    def warmup(self, image: np.ndarray) -> int:
        """First use after loading: each graph compiles (OpenVINO) on its first request."""
        return self.first(image) + self.keywords() + self.click((TILE / 2, TILE / 2))

    def first(self, image: np.ndarray) -> int:
        self.prepared = self.client.prepare(image)
        return len(self.client.segment(self.prepared, PROMPT))

    def second(self) -> int:
        return len(self.client.segment(self.prepared, SECOND))

    def keywords(self) -> int:
        return len(self.client.multi(self.prepared, KEYWORDS))

    def click(self, xy: tuple[float, float]) -> int:
        session = self.client.interactive(self.prepared)  # features cached: no encoder run
        return len(session.add_point(xy))

    def scene(self, path: str) -> int:
        from napari_sam3 import segment_scene

        frame = segment_scene(self.client, path, PROMPT, tile_size=TILE, overlap=0, progress=False)
        self.extra = {k: round(v, 2) for k, v in frame.attrs.get("timings", {}).items()}
        return len(frame)

    def describe(self) -> str:
        return repr(self.client)


def worker(args: argparse.Namespace) -> None:
    """One side, driven by JSON lines on stdin; one JSON line per step on stdout."""
    warnings.filterwarnings("ignore")
    out = sys.stdout
    sys.stdout = sys.stderr  # libraries' prints must not corrupt the protocol
    wall, cpu = time.perf_counter(), time.process_time()
    if args.worker == "official":
        side = OfficialSide(args.checkpoint, args.threads, args.precision == "bf16")
    else:
        side = EmbeddedSide(args.repo, args.threads, args.precision)
    load = {
        "step": "load",
        "wall": time.perf_counter() - wall,
        "cpu": time.process_time() - cpu,
        "peak_rss": peak_rss_bytes(),
        "rss": rss_bytes(),
        "describe": side.describe(),
    }
    print(json.dumps(load), file=out, flush=True)
    import torch  # both sides' processes have it; ours runs no torch graph

    torch.set_num_threads(args.threads)
    for line in sys.stdin:
        command = json.loads(line)
        step = command["step"]
        if step == "quit":
            break
        call = getattr(side, step)
        params = []
        if step in ("first", "warmup"):
            params = [np.load(command["image"])]
        elif step == "click":
            params = [tuple(command["xy"])]
        elif step == "scene":
            params = [command["path"]]
        load_before = os.getloadavg()[0]
        wall, cpu = time.perf_counter(), time.process_time()
        found = call(*params)
        result = {
            "step": step,
            "wall": time.perf_counter() - wall,
            "cpu": time.process_time() - cpu,
            "found": found,
            "load": [load_before, os.getloadavg()[0]],
            "peak_rss": peak_rss_bytes(),
            "rss": rss_bytes(),
            **({"parts": side.extra} if getattr(side, "extra", None) else {}),
        }
        side.extra = None
        print(json.dumps(result), file=out, flush=True)


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rss_bytes() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


# -- the driver -----------------------------------------------------------------------------------
class Side:
    def __init__(self, label: str, argv: list[str], env: dict) -> None:
        self.label = label
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self.results: dict[str, list[dict]] = {}
        self.info = self._answer()

    def _answer(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise SystemExit(f"{self.label}: the worker process ended (exit {code}); see above")
        answer = json.loads(line)
        self.results.setdefault(answer["step"], []).append(answer)
        return answer

    def run(self, **command) -> dict:
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write('{"step": "quit"}\n')
                self.proc.stdin.flush()
            except BrokenPipeError:
                pass
            self.proc.wait(timeout=120)

    def best(self, step: str, key: str) -> float:
        return min(r[key] for r in self.results[step])

    def peak(self) -> int:
        return max(r["peak_rss"] for rs in self.results.values() for r in rs)


def check_inputs(args: argparse.Namespace) -> None:
    import importlib.util

    problems = []
    if not args.checkpoint.is_file():
        problems.append(f"--checkpoint {args.checkpoint}: no such file (the official sam3.pt)")
    manifest = args.repo / "sam3_manifest.json"
    if not manifest.is_file():
        problems.append(
            f"--repo {args.repo}: no sam3_manifest.json (export it: sam3-export --checkpoint "
            f"{args.checkpoint} --size full --out {args.repo})"
        )
    elif json.loads(manifest.read_text()).get("size") != "full":
        problems.append(f"--repo {args.repo} is not a full-size export")
    if importlib.util.find_spec("sam3") is None:
        problems.append("the official `sam3` package is not installed (pip install sam3)")
    if problems:
        raise SystemExit("bench_peer: cannot run:\n  " + "\n  ".join(problems))


def write_scene(path: Path) -> None:
    import rasterio

    plane = test_image(2 * TILE, seed=1000)
    profile = {"driver": "GTiff", "width": 2 * TILE, "height": 2 * TILE, "count": 3}
    with rasterio.open(path, "w", dtype="uint8", **profile) as dst:
        dst.write(np.moveaxis(plane, -1, 0))


def run_pair(args, name: str, sides: list[tuple[str, list[str]]], work: Path) -> list[Side]:
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), PYTHONWARNINGS="ignore")
    me = [sys.executable, str(Path(__file__).resolve()), "--threads", str(args.threads)]
    common = ["--checkpoint", str(args.checkpoint), "--repo", str(args.repo)]
    started: list[Side] = []
    try:
        for label, extra in sides:  # loaded one after the other: each load is its own
            print(f"[{name}] loading {label} ...", flush=True)
            started.append(Side(label, me + common + extra, env))
            info = started[-1].info
            print(
                f"[{name}]   {label}: {info['wall']:.1f} s, peak RSS "
                f"{info['peak_rss'] / 2**30:.2f} GiB\n      {info['describe']}",
                flush=True,
            )
        warm = work / "image_warmup.npy"
        np.save(warm, test_image(TILE, seed=12345))
        for side in started:
            answer = side.run(step="warmup", image=str(warm))
            print(
                f"[{name}] warm-up {side.label:18s} {answer['wall']:8.2f} s wall "
                f"{answer['cpu']:8.2f} s CPU",
                flush=True,
            )
        for r in range(args.repeat):
            image = work / f"image_{r}.npy"
            np.save(image, test_image(TILE, seed=r))
            for step in STEPS:
                command = {"step": step}
                if step == "first":
                    command["image"] = str(image)
                if step == "click":
                    command["xy"] = [TILE * 0.4, TILE * 0.55]
                order = started if r % 2 == 0 else started[::-1]
                for side in order:
                    answer = side.run(**command)
                    print(
                        f"[{name}] run {r + 1} {step:9s} {side.label:18s} {answer['wall']:8.2f} s "
                        f"wall {answer['cpu']:8.2f} s CPU  found {answer['found']:3d}  load "
                        f"{answer['load'][0]:.1f}->{answer['load'][1]:.1f}",
                        flush=True,
                    )
        if name in args.scene_pairs:
            scene = work / "scene_2x2.tif"
            if not scene.exists():
                write_scene(scene)
            for side in started:
                answer = side.run(step="scene", path=str(scene))
                print(
                    f"[{name}] scene {side.label:18s} {answer['wall']:8.2f} s wall "
                    f"{answer['cpu']:8.2f} s CPU found {answer['found']} "
                    f"{answer.get('parts', '')}",
                    flush=True,
                )
    finally:
        for side in started:
            side.close()
    return started


def report(name: str, pair: list[Side], args) -> list[str]:
    scene = name in args.scene_pairs
    official, ours = pair
    lines = [
        f"\n### Pair `{name}`: {official.label} vs {ours.label} ({args.threads} threads, best of "
        f"{args.repeat})\n",
        f"- official: {official.info['describe']}",
        f"- ours: {ours.info['describe']}",
        f"- load: official {official.info['wall']:.1f} s, ours {ours.info['wall']:.1f} s; then a "
        f"warm-up (first use: a prompt and a click on another image; ours also compiles its "
        f"graphs there): official {official.best('warmup', 'wall'):.1f} s, ours "
        f"{ours.best('warmup', 'wall'):.1f} s\n",
        "| step | official wall | ours wall | ratio (wall) | official CPU | ours CPU | ratio (CPU) "
        "| found (official / ours) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    steps = list(STEPS) + (["scene"] if scene else [])
    for step in steps:
        w = official.best(step, "wall"), ours.best(step, "wall")
        c = official.best(step, "cpu"), ours.best(step, "cpu")
        found = official.results[step][-1]["found"], ours.results[step][-1]["found"]
        unit, scale = ("ms", 1000) if step == "click" else ("s", 1)
        lines.append(
            f"| {step} | {w[0] * scale:.2f} {unit} | {w[1] * scale:.2f} {unit} | "
            f"{w[0] / w[1]:.2f}x | {c[0] * scale:.2f} {unit} | {c[1] * scale:.2f} {unit} | "
            f"{c[0] / c[1]:.2f}x | {found[0]} / {found[1]} |"
        )
    po, pe = official.peak() / 2**30, ours.peak() / 2**30
    lo = official.info["peak_rss"] / 2**30
    lines.append(
        f"| peak RSS | {po:.2f} GiB (load: {lo:.2f}) | {pe:.2f} GiB | {pe / po:.2f}x of the "
        f"official | | | | |"
    )
    steady = official.results["click"][-1]["rss"] / 2**30, ours.results["click"][-1]["rss"] / 2**30
    lines.append(
        f"| RSS after the click | {steady[0]:.2f} GiB | {steady[1]:.2f} GiB | "
        f"{steady[1] / steady[0]:.2f}x | | | | |"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, help="the official sam3.pt (same weights)")
    parser.add_argument("--repo", type=Path, help="sam3-export of that checkpoint, --size full")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2, help="timed runs of each step")
    parser.add_argument(
        "--pairs",
        default="best,fp32",
        help="best: official bf16 autocast (where native) vs ours auto; fp32: both fp32",
    )
    parser.add_argument(
        "--scene-pairs",
        default="best,fp32",
        help="the pairs that also run the 2x2-tile scene ('' for none; it costs 4 first prompts)",
    )
    parser.add_argument("--json", type=Path, help="write every measurement here")
    parser.add_argument("--worker", choices=["official", "embedded"], help=argparse.SUPPRESS)
    parser.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if args.checkpoint is None or args.repo is None:
        parser.error("--checkpoint and --repo are required")
    check_inputs(args)
    bf16 = host_has_native_bf16()
    flags = sorted(f for f in cpu_flags() if f.startswith(("avx", "amx", "fma", "f16c")))
    print(f"host: {cpu_model()}, {os.cpu_count()} CPUs; flags: {' '.join(flags)}")
    pairs = {
        "best": [
            ("official bf16" if bf16 else "official fp32", ["--worker", "official", "--precision", "bf16" if bf16 else "fp32"]),
            ("ours auto", ["--worker", "embedded", "--precision", "auto"]),
        ],
        "fp32": [
            ("official fp32", ["--worker", "official", "--precision", "fp32"]),
            ("ours fp32", ["--worker", "embedded", "--precision", "fp32"]),
        ],
    }  # fmt: skip
    wanted = [p.strip() for p in args.pairs.split(",") if p.strip()]
    args.scene_pairs = {p.strip() for p in args.scene_pairs.split(",") if p.strip()}
    unknown = [p for p in wanted if p not in pairs]
    if unknown or not wanted:
        raise SystemExit(f"--pairs: choose from {sorted(pairs)}, got {args.pairs!r}")
    lines = [f"host: {cpu_model()}; native bf16: {bf16}; flags: {' '.join(flags)}"]
    dump = {}
    with tempfile.TemporaryDirectory(prefix="bench-peer-") as work:
        for name in wanted:
            pair = run_pair(args, name, pairs[name], Path(work))
            lines += report(name, pair, args)
            dump[name] = {side.label: {"info": side.info, **side.results} for side in pair}
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(dump, indent=1))


if __name__ == "__main__":
    main()
