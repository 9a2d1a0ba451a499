"""`sam3-serve DIR`: run a Triton Inference Server on a model repository written by `sam3-export`.

The command line around `server.TritonServer`: options, TLS files, exit codes (2 refused before starting, 1 failed or unhealthy)."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

from napari_sam3.core.arguments import ArgumentParser
from napari_sam3.core.errors import EXIT_FAILED, EXIT_REFUSED, Sam3Error
from napari_sam3.serving.ports import _port
from napari_sam3.serving.server import ServeError, TritonServer
from napari_sam3.serving.tls import TlsFiles, plaintext_warnings


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="sam3-serve", description=__doc__.splitlines()[0])
    parser.add_argument("repository", help="model repository written by sam3-export")
    parser.add_argument("--grpc-port", type=_port, default=8001)
    parser.add_argument("--http-port", type=_port, default=8000)
    parser.add_argument(
        "--host", default="127.0.0.1", help="gRPC address to bind (default: loopback)"
    )
    parser.add_argument(
        "--http-host",
        default="127.0.0.1",
        help="HTTP address to bind (plaintext; default: loopback)",
    )
    parser.add_argument("--tls-cert", type=Path, help="PEM certificate: serve gRPC over TLS")
    parser.add_argument("--tls-key", type=Path, help="PEM private key of --tls-cert")
    parser.add_argument(
        "--tls-root-cert", type=Path,
        help="PEM CA certificate: require client certificates signed by it (mutual TLS)",
    )  # fmt: skip
    parser.add_argument("--log-file", default=None)
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds to wait for readiness"
    )
    parser.add_argument(
        "--probe-interval", type=float, default=2.0,
        help="seconds between health probes of the models' stub processes (default 2)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.error("give --tls-cert and --tls-key together")
    if args.tls_root_cert is not None and args.tls_cert is None:
        parser.error("--tls-root-cert needs --tls-cert and --tls-key")
    if not args.probe_interval > 0 or not args.timeout > 0:
        parser.error("--timeout and --probe-interval must be positive")
    tls = TlsFiles(args.tls_cert, args.tls_key, args.tls_root_cert) if args.tls_cert else None

    def _interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # Until ready, SIGTERM interrupts the start like Ctrl-C does (start() stops the server).
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        server = TritonServer(
            args.repository, args.grpc_port, args.http_port, args.host, log_file=args.log_file,
            http_host=args.http_host, tls=tls,
        )  # fmt: skip
        for warning in plaintext_warnings(args.host, args.http_host, tls is not None):
            print(f"sam3-serve: warning: {warning}", file=sys.stderr, flush=True)
        server.start(args.timeout)
    except Sam3Error as error:  # the repository or a port refused (2), the start failed (1)
        print(f"sam3-serve: {error}", file=sys.stderr)
        return error.exit_code
    except (ValueError, FileNotFoundError) as error:
        print(f"sam3-serve: {error}", file=sys.stderr)
        return EXIT_REFUSED
    except TimeoutError as error:
        print(f"sam3-serve: {error}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("sam3-serve: interrupted while starting; stopped", file=sys.stderr)
        return EXIT_FAILED

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stopping.set())
    scheme = "grpc+tls" if tls else "grpc"
    print(
        f"sam3-serve: ready on {scheme} {server.grpc_address} (http {server.http_address}), "
        f"{len(server.models)} models",
        flush=True,
    )
    code = 0
    try:
        while not stopping.wait(args.probe_interval):
            for line in server.heal():
                print(f"sam3-serve: {line}", file=sys.stderr, flush=True)
    except ServeError as error:
        print(f"sam3-serve: unhealthy, stopping: {error}", file=sys.stderr, flush=True)
        code = EXIT_FAILED
    finally:
        server.stop()
    if code == 0:
        print("sam3-serve: stopped", flush=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
