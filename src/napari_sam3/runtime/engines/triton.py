"""A Triton Inference Server over gRPC: timeouts that end, a liveness watch, TLS.

Addresses: the channel target is ``dns:///host:port`` with gRPC's ``round_robin`` policy, so gRPC
resolves the name itself, connects to every address it lists (a headless Service: one per pod;
``localhost``: ::1 and 127.0.0.1) and sends each call to an address that is connected. One that
refuses (a server listening on IPv4 only) costs nothing per call.

Time: ``connect_timeout`` bounds the wait for a ready server; every request try is bounded by
``request_timeout`` and all tries of one call together by ``deadline``. A server whose queue is
full answers "busy" (UNAVAILABLE, "Exceeds maximum queue size": the ``max_queue_size`` that
``sam3-export`` writes into the configs of the models clients call); such a request never
reached a model, so it is sent again after a growing, jittered wait, as often as the deadline
allows (``retries`` counts transport failures only), then :class:`ServerBusy` names the server. While a request runs, a
second channel asks the server ``is_server_live`` every ``probe_interval`` seconds; a server that
gives no answer for ``liveness_timeout`` seconds (stopped, hung, its host gone) is given up on
at once, naming it, while a server that is alive may take as long as ``request_timeout``.
"""

from __future__ import annotations

import ipaddress
import logging
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from napari_sam3.core import validate
from napari_sam3.core.errors import ConnectionFailed, InvalidInput, TimedOut
from napari_sam3.core.files import read_pem
from napari_sam3.runtime.engines.model_config import (
    ModelConfig,
    OutputNames,
    Outputs,
    Tensors,
    parse_model_config,
)
from napari_sam3.runtime.engines.settings import Timeouts

log = logging.getLogger(__name__)

# Worth a retry: the request never reached a model (refused, reset, overloaded). A try that ran
# out of time is not retried: the server may still be working on it.
TRANSIENT = {"StatusCode.UNAVAILABLE", "StatusCode.RESOURCE_EXHAUSTED"}
TIMED_OUT = "StatusCode.DEADLINE_EXCEEDED"
# Triton's answer (UNAVAILABLE) when the model's queue holds max_queue_size requests already
BUSY = "Exceeds maximum queue size"
BUSY_WAIT = (0.05, 2.0)  # the first wait before asking a busy server again, and the longest
MAX_MESSAGE = 2**31 - 1  # as tritonclient's own default (images and masks can be large)


class RequestTimeout(ConnectionFailed, TimedOut):
    """A request that did not finish within its time on a server that still answers."""


class ServerBusy(ConnectionFailed, TimedOut):
    """A server that answered "busy" (its queue full) to every try of a call until the deadline."""


def is_busy(status: str, message: str) -> bool:
    """Whether a Triton error is its "busy, retry" answer (a full queue), not a lost server."""
    return status in TRANSIENT and BUSY in message


def parse_address(address: str) -> tuple[str, int]:
    if not isinstance(address, str) or not address.strip():
        raise InvalidInput(f"a Triton address looks like 'host:8001', got {address!r}")
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InvalidInput(f"a Triton address looks like 'host:8001' (gRPC port), got {address!r}")
    if not 0 < int(port) < 65536:
        raise InvalidInput(f"port {port} of {address!r} is not a TCP port (1..65535)")
    return host.strip("[]"), int(port)


def grpc_target(addresses: str | Sequence[str]) -> str:
    """The channel target of one address or several.

    One host name: gRPC's DNS resolver (``dns:///host:port``), which spreads the calls over
    every address the name resolves to. IP addresses (one, or several of one family): a static
    list. Several names cannot share a channel: give one name that resolves to all of them.
    """
    if isinstance(addresses, str):
        addresses = [a for a in addresses.split(",") if a.strip()] or [addresses]
    parsed = [parse_address(a) for a in addresses]
    if not parsed:
        raise InvalidInput("give at least one Triton address, e.g. 'localhost:8001'")
    ips = []
    for host, port in parsed:
        try:
            ips.append((ipaddress.ip_address(host), port))
        except ValueError:
            if len(parsed) == 1:
                return f"dns:///{host}:{port}"
            raise InvalidInput(
                f"several addresses must be IP addresses ({host!r} is a name); for servers "
                "behind one name, give that name once: gRPC spreads calls over its addresses"
            ) from None
    families = {ip.version for ip, _ in ips}
    if len(families) > 1:
        raise InvalidInput("several addresses must all be IPv4 or all IPv6, not both")
    if families == {6}:
        return "ipv6:" + ",".join(f"[{ip}]:{port}" for ip, port in ips)
    return "ipv4:" + ",".join(f"{ip}:{port}" for ip, port in ips)


@dataclass(frozen=True)
class TlsOptions:
    """gRPC over TLS: the CA to trust (None: the system's) and, for mutual TLS, our key pair."""

    root_certificates: str | Path | None = None
    private_key: str | Path | None = None
    certificate_chain: str | Path | None = None

    def credentials(self):
        import grpc

        if (self.private_key is None) != (self.certificate_chain is None):
            raise InvalidInput(
                "give private_key and certificate_chain together (a client certificate for "
                "mutual TLS), or neither"
            )
        pems = {
            what: _read_pem(path, what)
            for what, path in (
                ("root_certificates", self.root_certificates),
                ("private_key", self.private_key),
                ("certificate_chain", self.certificate_chain),
            )
        }
        return grpc.ssl_channel_credentials(**pems)


def _read_pem(path, what: str) -> bytes | None:
    return None if path is None else read_pem(path, what)


class TritonEngine:
    """gRPC calls to a Triton server (one address, a name with several, or a list of IPs) over
    one channel; retries transient transport errors within a deadline."""

    local = False  # the models run in the server

    def __init__(
        self,
        address: str | Sequence[str],
        timeouts: Timeouts | None = None,
        *,
        backoff: float = 0.5,
        probe_interval: float = 5.0,
        tls: TlsOptions | bool | None = None,
    ) -> None:
        self.target = grpc_target(address)
        self.timeouts = timeouts = timeouts or Timeouts()
        self.probe_interval = validate.seconds("probe_interval", probe_interval)
        self.address = address if isinstance(address, str) else ",".join(address)
        self.request_timeout = timeouts.request
        self.deadline = timeouts.total
        self.liveness_timeout = timeouts.liveness
        self.retries = timeouts.retries
        self.backoff = backoff
        if tls is True:
            tls = TlsOptions()
        self.tls = tls or None
        creds = self.tls.credentials() if self.tls else None
        self._client = self._make_client(creds, shared=True)
        # The liveness probe's own channel (and its own connection: a local subchannel pool),
        # so that it is not queued behind the request it watches.
        self._probe = self._make_client(creds, shared=False)
        self._clients = (self._client, self._probe)
        self._lock = threading.Lock()
        self._configs: dict[str, ModelConfig] = {}
        self._closed = False
        self.busy_answers = 0  # "busy" answers received (each was tried again or ended a call)
        try:
            self.wait_until_ready(timeouts.connect)
        except BaseException:
            self.close()
            raise

    def _make_client(self, creds, shared: bool) -> grpcclient.InferenceServerClient:
        args = [
            ("grpc.max_send_message_length", MAX_MESSAGE),
            ("grpc.max_receive_message_length", MAX_MESSAGE),
            ("grpc.lb_policy_name", "round_robin"),
            # Reconnect within a second or two (a restarted server, a cold start) rather than
            # gRPC's default backoff of up to two minutes.
            ("grpc.initial_reconnect_backoff_ms", 250),
            ("grpc.min_reconnect_backoff_ms", 250),
            ("grpc.max_reconnect_backoff_ms", 2000),
            ("grpc.enable_retries", 0),
        ]
        if not shared:
            args.append(("grpc.use_local_subchannel_pool", 1))
        return grpcclient.InferenceServerClient(self.target, creds=creds, channel_args=args)

    def _checked_client(self) -> grpcclient.InferenceServerClient:
        with self._lock:
            if self._closed:
                raise ConnectionFailed(
                    f"the connection to Triton at {self.address} is closed; make a new Sam3Client"
                )
            return self._client

    # -- health -------------------------------------------------------------------------------
    def is_live(self, timeout: float = 2.0) -> bool:
        """Whether the server answers a liveness question within `timeout` seconds."""
        try:
            return bool(self._probe.is_server_live(client_timeout=timeout))
        except InferenceServerException:
            return False

    def wait_until_ready(self, timeout: float, models: Sequence[str] = ()) -> None:
        """Block through a cold start until the server is live, ready and has `models` loaded."""
        deadline = time.monotonic() + max(timeout, 0.0)
        last = "no answer"
        client = self._checked_client()
        while True:
            left = max(deadline - time.monotonic(), 0.1)
            step = min(2.0, left)
            try:
                if client.is_server_live(client_timeout=step) and client.is_server_ready(
                    client_timeout=step
                ):
                    if all(client.is_model_ready(m, client_timeout=step) for m in models):
                        return
                    last = "models not ready yet"
                else:
                    last = "server not ready yet"
            except InferenceServerException as error:
                last = _describe(error)
            if time.monotonic() >= deadline:
                tls_hint = ""
                if "refused" not in last:  # something answers the port, but not as we speak
                    tls_hint = (
                        " (this client uses TLS: does the server? is its certificate trusted?)"
                        if self.tls
                        else " (is the server serving TLS? then connect with tls=True)"
                    )
                raise ConnectionFailed(
                    f"no ready Triton server at {self.address} within {timeout:g} s ({last}); "
                    "start one with `sam3-serve MODEL_REPOSITORY` or check the address and port "
                    f"(gRPC, usually 8001){tls_hint}, or raise connect_timeout for a cold start"
                )
            time.sleep(min(0.25, max(deadline - time.monotonic(), 0.0)))

    # -- calls --------------------------------------------------------------------------------
    def config(self, model_name: str) -> ModelConfig:
        if model_name not in self._configs:
            from google.protobuf import text_format

            def fetch(client, timeout):
                return client.get_model_config(model_name, client_timeout=timeout).config

            proto = self._with_retries(fetch, f"the config of {model_name}", per_try=30.0)
            self._configs[model_name] = parse_model_config(text_format.MessageToString(proto))
        return self._configs[model_name]

    def concurrency(self) -> int:
        return 1

    def runtime_summary(self, reasons: bool = False) -> str | None:
        return None  # the server's repository decides

    def loaded_graphs(self) -> list[str] | None:
        return None  # the server loads what its repository holds

    def runtime_choices(self) -> dict[str, Any] | None:
        return None  # the server' repository decides

    def cache_bounds(
        self, features: int | None = None, heads: int | None = None
    ) -> tuple[int, int] | None:
        return None  # the server' caches are its own

    def refresh(self) -> None:
        """Forget the model configs read so far: the next `config` asks the server again.

        A server restarted on another model repository serves other configs (another model_id,
        perhaps other sizes); `Sam3Client` calls this when an answer names another model."""
        with self._lock:
            self._configs.clear()

    def infer(self, model_name: str, inputs: Tensors, output_names: OutputNames = None) -> Outputs:
        if output_names is None:
            output_names = [o.name for o in self.config(model_name).outputs]
        triton_inputs = []
        for name, value in inputs.items():
            value = np.ascontiguousarray(value)
            tensor = grpcclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
            tensor.set_data_from_numpy(value)
            triton_inputs.append(tensor)
        requested = [grpcclient.InferRequestedOutput(n) for n in output_names]

        def call(client, timeout):
            return self._watched_infer(client, model_name, triton_inputs, requested, timeout)

        result = self._with_retries(call, model_name, per_try=self.request_timeout)
        # an output the model did not answer is absent (sam3_cached answers a miss so)
        outputs = {name: result.as_numpy(name) for name in output_names}
        return {name: value for name, value in outputs.items() if value is not None}

    def _watched_infer(self, client, model_name, inputs, outputs, timeout: float):
        """One request try, given up on when the server stops answering liveness probes."""
        done = threading.Event()
        answer: dict = {}

        def callback(result, error):
            answer["result"], answer["error"] = result, error
            done.set()

        context = client.async_infer(
            model_name, inputs, callback, outputs=outputs, client_timeout=timeout
        )
        last_alive = time.monotonic()
        while not done.wait(self.probe_interval):
            if self._closed:
                context.cancel()
                raise ConnectionFailed(f"the connection to Triton at {self.address} was closed")
            probe_timeout = min(self.probe_interval, self.liveness_timeout)
            if self.is_live(probe_timeout):
                last_alive = time.monotonic()
            elif time.monotonic() - last_alive >= self.liveness_timeout and not done.is_set():
                context.cancel()
                raise ConnectionFailed(
                    f"Triton at {self.address} stopped answering while running {model_name}: no "
                    f"liveness answer for {time.monotonic() - last_alive:.0f} s; the server is "
                    "hung, stopped or unreachable (is it still running?)"
                )
        if answer["error"] is not None:
            raise answer["error"]
        return answer["result"]

    def statistics(self, model_name: str) -> dict:
        return self._with_retries(
            lambda c, t: c.get_inference_statistics(model_name, as_json=True, client_timeout=t),
            f"the statistics of {model_name}",
            per_try=30.0,
        )

    def _with_retries(self, fn, what: str, per_try: float):
        start = time.monotonic()
        end = start + self.deadline
        failures, delay = 0, self.backoff
        busy, busy_wait = 0, BUSY_WAIT[0]
        while True:
            client = self._checked_client()
            left = end - time.monotonic()
            try:
                return fn(client, max(min(per_try, left), 0.1))
            except InferenceServerException as error:
                status = str(error.status() or "")
                message = _describe(error)
                if status == TIMED_OUT:
                    raise RequestTimeout(
                        f"Triton at {self.address} did not finish {what} within "
                        f"{round(min(per_try, left), 2):g} s (the server answers, so it is busy "
                        "or the request is very large); raise request_timeout (--request-timeout)"
                    ) from None
                if is_busy(status, message):
                    busy += 1
                    with self._lock:
                        self.busy_answers += 1
                    # jittered, so that the clients turned away together do not return together
                    wait = busy_wait * random.uniform(0.5, 1.0)
                    if time.monotonic() + wait < end:
                        log.debug("Triton at %s is busy (%s); asking again", self.address, what)
                        time.sleep(wait)
                        busy_wait = min(2 * busy_wait, BUSY_WAIT[1])
                        continue
                    raise ServerBusy(
                        f"Triton at {self.address} was too busy to take {what}: its queue was "
                        f"full ({message.split('] ')[-1]}) at each of {busy} tries over "
                        f"{time.monotonic() - start:.1f} s, the deadline; try again later, raise "
                        "the deadline (--deadline), or share the load with more servers (a pool)"
                    ) from None
                if status in TRANSIENT:
                    if failures < self.retries and time.monotonic() + delay < end:
                        failures += 1
                        time.sleep(delay)
                        delay *= 2
                        continue
                    raise ConnectionFailed(
                        f"Triton at {self.address} unreachable for {what} after "
                        f"{failures + 1} tries ({message}); is the server still running?"
                    ) from None
                raise InvalidInput(f"Triton rejected {what}: {message}") from None

    def __enter__(self) -> TritonEngine:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Close both gRPC channels; later calls raise ConnectionError."""
        with self._lock:
            self._closed = True
        for client in self._clients:
            client.close()


def _describe(error: InferenceServerException) -> str:
    return error.message() or str(error)
