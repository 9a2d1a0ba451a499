"""sam3-serve under load (issue 42, item 3): 16 clients at once on one CPU tritonserver.

    .venv/bin/python bench/bench_serve_load.py [--models DIR] [--clients 16] [--requests 12]
        [--queues 32,2]

Each client has its own connection and sends its requests one after another, each on a new
image (so every request encodes), in turn one keyword, three keywords on one pass, and a click.
For each queue limit (the repository's configs rewritten with `sam3-export --refresh
--max-queue`) it prints requests/s, p50/p99 latency of a call (its "busy" retries included),
the busy answers, and the server's RSS (tritonserver and its Python-backend stubs) before,
at its peak during the flood and after. Then a raw flood: `--raw` requests sent at once by one
connection without waiting (each a new image, as a burst of clients would), to show what the
queue limit bounds: the requests the server holds, each with its image.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).parent))
from _common import tiny_repository  # noqa: E402

from napari_sam3 import Sam3Client  # noqa: E402
from napari_sam3.imagery.raster import read_raster  # noqa: E402
from napari_sam3.plugin.sample_data import sentinel2_sample_bands  # noqa: E402
from napari_sam3.serving.server import TritonServer  # noqa: E402

KEYWORDS = ("building", "road", "field", "river")


def server_rss(server: TritonServer) -> int:
    """Bytes resident in the server and its children (the Python-backend stubs)."""
    try:
        root = psutil.Process(server.process.pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def with_queue(models: Path, queue: int, tmp: Path) -> Path:
    from sam3_export.cli import main as export

    repo = tmp / f"queue{queue}"
    shutil.copytree(models, repo, ignore=shutil.ignore_patterns("__pycache__"))
    if export(["--refresh", "--out", str(repo), "--max-queue", str(queue), "-q"]) != 0:
        raise SystemExit(f"could not rewrite {repo}'s configs")
    return repo


def one_call(client: Sam3Client, image: np.ndarray, i: int) -> None:
    kind = i % 3
    if kind == 0:
        client.segment(image, KEYWORDS[i % 4], score_thr=0.0)
    elif kind == 1:
        client.multi(image, list(KEYWORDS[:3]), score_thr=0.0)
    else:
        client.interactive(image).add_point((40, 60))


def flood(server: TritonServer, images: list, clients: int, requests: int) -> dict:
    conns = [Sam3Client(server.grpc_address) for _ in range(clients)]
    latencies: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)
    errors: list = []

    def run(c: int) -> None:
        start.wait()
        for r in range(requests):
            image = images[(c * requests + r) % len(images)]
            t0 = time.perf_counter()
            try:
                one_call(conns[c], image, c + r)
            except Exception as error:  # noqa: BLE001 - counted and printed
                errors.append(repr(error)[:200])
                continue
            with lock:
                latencies.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=run, args=(c,)) for c in range(clients)]
    for thread in threads:
        thread.start()
    before = server_rss(server)
    peak = before
    start.wait()
    t0 = time.perf_counter()
    while any(t.is_alive() for t in threads):
        peak = max(peak, server_rss(server))
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    after = server_rss(server)
    busy = sum(c.engine.busy_answers for c in conns)
    for conn in conns:
        conn.close()
    ms = np.array(latencies) * 1000
    return {
        "done": len(latencies),
        "errors": errors,
        "wall": wall,
        "rps": len(latencies) / wall,
        "p50": float(np.percentile(ms, 50)) if len(ms) else float("nan"),
        "p99": float(np.percentile(ms, 99)) if len(ms) else float("nan"),
        "busy": busy,
        "rss": (before, peak, after),
    }


def raw_flood(server: TritonServer, model_id: str, count: int) -> dict:
    """`count` encode requests to sam3_cached at once, without waiting: (held answers, busy
    answers, peak server RSS, seconds until every one was answered)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    from napari_sam3.core import contract
    from napari_sam3.runtime.cached import image_key

    raw = grpcclient.InferenceServerClient(server.grpc_address)
    answers: list = []
    lock = threading.Lock()
    rng = np.random.default_rng(1)
    size = int(contract.load_manifest(server.repository).image_size)
    before = server_rss(server)
    peak = before
    t0 = time.perf_counter()
    for _ in range(count):
        images = rng.integers(0, 256, (1, 3, size, size), dtype=np.uint8)
        feed = {
            contract.CACHE_OP: np.array([b"encode"], dtype=np.object_),
            contract.IMAGE_ID: np.array([image_key(images, model_id).encode()], dtype=np.object_),
            contract.IMAGES: images,
        }
        tensors = []
        for name, value in feed.items():
            tensor = grpcclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
            tensor.set_data_from_numpy(value)
            tensors.append(tensor)

        def done(result, error):
            with lock:
                answers.append(error)

        raw.async_infer(contract.CACHED, tensors, done)
        peak = max(peak, server_rss(server)) if len(answers) % 50 == 0 else peak
    while len(answers) < count:
        peak = max(peak, server_rss(server))
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    raw.close()
    busy = sum(1 for a in answers if a is not None and "queue" in a.message())
    return {"held": answers.count(None), "busy": busy, "rss": (before, peak), "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help="a tiny python-flavor repository")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=12, help="per client")
    parser.add_argument("--queues", default="32,2,0", help="queue limits to compare (0: none)")
    parser.add_argument("--raw", type=int, default=2000, help="requests of the raw flood")
    args = parser.parse_args()
    models = tiny_repository(args.models)
    bands = sentinel2_sample_bands()
    scene = read_raster([bands["B04"], bands["B03"], bands["B02"]]).data
    rng = np.random.default_rng(0)
    images = []
    for _ in range(args.clients * args.requests):
        r, c = rng.integers(0, scene.shape[1] - 160), rng.integers(0, scene.shape[2] - 200)
        images.append(np.ascontiguousarray(np.moveaxis(scene[:, r : r + 160, c : c + 200], 0, -1)))
    print(
        f"{datetime.date.today()}  {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores; {args.clients} clients x {args.requests} requests, model "
        f"{models}"
    )
    with tempfile.TemporaryDirectory(prefix="sam3-load-") as tmp:
        for queue in (int(q) for q in args.queues.split(",")):
            repo = with_queue(models, queue, Path(tmp))
            with TritonServer(repo, log_file=Path(tmp) / f"triton{queue}.log") as server:
                with Sam3Client(server.grpc_address) as warm:  # models loaded and run once
                    one_call(warm, images[0], 0), one_call(warm, images[0], 1)
                    one_call(warm, images[0], 2)
                    warm.clear_cache()
                f = flood(server, images, args.clients, args.requests)
                b, p, a = (x / 2**20 for x in f["rss"])
                print(
                    f"queue {queue:3d}: {f['done']} calls in {f['wall']:.1f} s = {f['rps']:.1f}/s, "
                    f"p50 {f['p50']:.0f} ms, p99 {f['p99']:.0f} ms, busy answers {f['busy']}, "
                    f"errors {len(f['errors'])}; server RSS {b:.0f} MiB before, peak {p:.0f}, "
                    f"after {a:.0f}",
                    flush=True,
                )
                for error in f["errors"][:3]:
                    print(f"    {error}")
                warm_id = Sam3Client(server.grpc_address)
                g = raw_flood(server, warm_id.model_id, args.raw)
                warm_id.close()
                b, p = (x / 2**20 for x in g["rss"])
                print(
                    f"           raw flood of {args.raw}: {g['held']} held and answered, "
                    f"{g['busy']} busy, in {g['wall']:.1f} s; server RSS {b:.0f} MiB before, "
                    f"peak {p:.0f} (+{p - b:.0f})",
                    flush=True,
                )


if __name__ == "__main__":
    main()
