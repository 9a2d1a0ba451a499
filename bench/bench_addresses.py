"""Per-call latency over one server reached by different addresses (issue 18, item 5).

.venv/bin/python bench/bench_addresses.py [--models DIR] [--calls 40]

Prints the median of a cheap call (`is_server_live`) and of a text-encoder request for: the IP
address, the name `localhost` (gRPC's DNS resolver), and a list with a refusing address first
(what a name resolving to ::1 and 127.0.0.1 is when the server listens on IPv4 only).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import tiny_repository  # noqa: E402

from napari_sam3.client.connection import Timeouts  # noqa: E402
from napari_sam3.core import contract  # noqa: E402
from napari_sam3.prompts.tokenizer import tokenize  # noqa: E402
from napari_sam3.runtime.engines.triton import TritonEngine  # noqa: E402
from napari_sam3.serving.server import TritonServer, free_port  # noqa: E402


def median_ms(fn, calls: int) -> float:
    fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="a tiny repository (default: exported once)")
    parser.add_argument("--calls", type=int, default=40)
    args = parser.parse_args()
    tokens = {contract.TOKEN_IDS: tokenize("building")}
    with TritonServer(tiny_repository(args.models)) as server:
        port = server.grpc_address.rsplit(":", 1)[1]
        addresses = {
            "127.0.0.1": server.grpc_address,
            "localhost (dns:///)": f"localhost:{port}",
            "refusing + live": f"127.0.0.1:{free_port()},{server.grpc_address}",
        }
        print(f"{'address':<22} {'target':<40} {'live ms':>8} {'text ms':>8}")
        for label, address in addresses.items():
            with TritonEngine(address.split(","), Timeouts(connect=30)) as engine:
                live = median_ms(lambda e=engine: e.is_live(), args.calls)
                text = median_ms(
                    lambda e=engine: e.infer(contract.TEXT, tokens, [contract.TEXT_FEATURES]),
                    args.calls,
                )
                print(f"{label:<22} {engine.target:<40} {live:8.2f} {text:8.2f}")


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
