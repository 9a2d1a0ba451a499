"""A Triton Inference Server over gRPC, spread over every address its host name resolves to."""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Mapping, Sequence

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from .model_config import ModelConfig, parse_model_config

# gRPC status codes worth a retry: the request never reached a model, or the pod went away.
TRANSIENT = {
    "StatusCode.UNAVAILABLE",
    "StatusCode.DEADLINE_EXCEEDED",
    "StatusCode.RESOURCE_EXHAUSTED",
}


def parse_address(address: str) -> tuple[str, int]:
    if not isinstance(address, str) or not address.strip():
        raise ValueError(f"a Triton address looks like 'host:8001', got {address!r}")
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"a Triton address looks like 'host:8001' (gRPC port), got {address!r}")
    return host.strip("[]"), int(port)


def resolve_all(host: str, port: int) -> list[str]:
    """Every address the host name resolves to (a headless Service lists one per pod)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise ConnectionError(
            f"cannot resolve Triton host {host!r} ({error.strerror}); check the address"
        ) from None
    addresses = []
    for family, _, _, _, sockaddr in infos:
        ip = sockaddr[0]
        text = f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}"
        if text not in addresses:
            addresses.append(text)
    return addresses


class TritonEngine:
    """Round-robin gRPC calls to Triton; retries with backoff only for transient transport errors."""

    def __init__(
        self,
        address: str,
        connect_timeout: float = 30.0,
        request_timeout: float = 300.0,
        retries: int = 3,
        backoff: float = 0.5,
    ) -> None:
        host, port = parse_address(address)
        self.address = address
        self.request_timeout = request_timeout
        self.retries = retries
        self.backoff = backoff
        self._clients = [grpcclient.InferenceServerClient(url=a) for a in resolve_all(host, port)]
        self._turn = itertools.cycle(range(len(self._clients)))
        self._lock = threading.Lock()
        self._configs: dict[str, ModelConfig] = {}
        self._closed = False
        self.wait_until_ready(connect_timeout)

    def _next_client(self) -> grpcclient.InferenceServerClient:
        with self._lock:
            if self._closed:
                raise ConnectionError(
                    f"the connection to Triton at {self.address} is closed; make a new Sam3Client"
                )
            return self._clients[next(self._turn)]

    def wait_until_ready(self, timeout: float, models: Sequence[str] = ()) -> None:
        """Block through a cold start until a server is live, ready and has `models` loaded."""
        deadline = time.monotonic() + max(timeout, 0.0)
        last = "no answer"
        while True:
            for client in self._clients:
                try:
                    if client.is_server_live(client_timeout=2) and client.is_server_ready(
                        client_timeout=2
                    ):
                        if all(client.is_model_ready(m, client_timeout=2) for m in models):
                            return
                        last = "models not ready yet"
                    else:
                        last = "server not ready yet"
                except InferenceServerException as error:
                    last = error.message() or str(error)
            if time.monotonic() >= deadline:
                raise ConnectionError(
                    f"no ready Triton server at {self.address} within {timeout:.0f} s ({last}); "
                    "start one with `sam3-serve MODEL_REPOSITORY` or check the address and port "
                    "(gRPC, usually 8001), or raise connect_timeout for a cold start"
                )
            time.sleep(0.5)

    def config(self, model_name: str) -> ModelConfig:
        if model_name not in self._configs:
            from google.protobuf import text_format

            def fetch(client):
                return client.get_model_config(model_name, client_timeout=10).config

            proto = self._with_retries(fetch, model_name)
            self._configs[model_name] = parse_model_config(text_format.MessageToString(proto))
        return self._configs[model_name]

    def infer(
        self,
        model_name: str,
        inputs: Mapping[str, np.ndarray],
        output_names: Sequence[str] | None = None,
    ) -> dict[str, np.ndarray]:
        if output_names is None:
            output_names = [o.name for o in self.config(model_name).outputs]
        triton_inputs = []
        for name, value in inputs.items():
            value = np.ascontiguousarray(value)
            tensor = grpcclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
            tensor.set_data_from_numpy(value)
            triton_inputs.append(tensor)
        requested = [grpcclient.InferRequestedOutput(n) for n in output_names]

        def call(client):
            return client.infer(
                model_name, triton_inputs, outputs=requested, client_timeout=self.request_timeout
            )

        result = self._with_retries(call, model_name)
        return {name: result.as_numpy(name) for name in output_names}

    def statistics(self, model_name: str) -> dict:
        stats = self._with_retries(
            lambda c: c.get_inference_statistics(model_name, as_json=True), model_name
        )
        return stats

    def _with_retries(self, fn, what: str):
        delay = self.backoff
        for attempt in range(self.retries + 1):
            client = self._next_client()
            try:
                return fn(client)
            except InferenceServerException as error:
                status = str(error.status() or "")
                if status in TRANSIENT and attempt < self.retries:
                    time.sleep(delay)
                    delay *= 2
                    continue
                message = error.message() or str(error)
                if status in TRANSIENT:
                    raise ConnectionError(
                        f"Triton at {self.address} unreachable for {what} after "
                        f"{self.retries + 1} tries ({message}); is the server still running?"
                    ) from None
                raise ValueError(f"Triton rejected {what}: {message}") from None
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close every gRPC channel; later calls raise ConnectionError."""
        with self._lock:
            self._closed = True
        for client in self._clients:
            client.close()
