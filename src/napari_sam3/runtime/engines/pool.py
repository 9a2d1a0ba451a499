"""A pool of Triton servers behind one engine: requests spread over the servers that answer.

Each address is one :class:`~napari_sam3.runtime.engines.triton.TritonEngine` (which itself spreads over
every address its host name resolves to). The pool sends each request to the healthy member with
the fewest requests in flight. A member whose request fails in transport (the server died, the
network went away) leaves the rotation and the request is sent again to another member; a probe
thread re-checks the members that are out every ``probe_interval`` seconds and lets them rejoin
once they are live and ready and serve the same model (when every server is out and they come
back on another model, as after restarting them all on another repository, the pool takes the
model of the first one back; the client notices the change in its next answer). A request that
names an image by its
``image_id`` without its pixels (the feature cache, an interactive session) goes to the member
that was sent them; if that one is out, to another, whose "miss" makes the client resend them.
A server that answers "busy" (its queue full) is not out: its engine asks it again within the
deadline, and a call it stays busy for raises ``ServerBusy`` without dropping it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from napari_sam3.core import contract
from napari_sam3.core.errors import ConnectionFailed, InvalidInput, InvalidType
from napari_sam3.runtime.engines.model_config import ModelConfig, OutputNames, Outputs, Tensors
from napari_sam3.runtime.engines.settings import Timeouts

log = logging.getLogger(__name__)

__all__ = ["PoolEngine", "split_addresses"]

_HOLDERS = 4096  # image keys remembered; a forgotten one costs one resend of its pixels


def split_addresses(address: str | Sequence[str]) -> list[str]:
    """``"a:8001,b:8001"`` or ``["a:8001", "b:8001"]`` -> the distinct addresses, in order."""
    items = address.split(",") if isinstance(address, str) else list(address)
    if not all(isinstance(a, str) for a in items):
        raise InvalidType(f"Triton addresses are strings such as 'host:8001', got {address!r}")
    out = list(dict.fromkeys(a.strip() for a in items if a.strip()))
    if not out:
        raise InvalidInput(f"no Triton address in {address!r}; give 'host:8001' or 'a:8001,b:8001'")
    return out


class _OtherModel(InvalidInput):
    """A server that serves another model than the pool."""

    def __init__(self, message: str, model_id: str = "") -> None:
        super().__init__(message)
        self.model_id = model_id


@dataclasses.dataclass
class _Member:
    address: str
    engine: Any = None  # a TritonEngine while healthy
    busy: int = 0
    failures: int = 0
    reason: str = ""
    warned: bool = False
    instances: int = 1
    served: int = dataclasses.field(default=0)


class PoolEngine:
    """Several Triton servers as one engine (the ``infer`` / ``config`` of ``TritonEngine``)."""

    local = False  # the models run in the servers

    def __init__(
        self,
        addresses: str | Sequence[str],
        timeouts: Timeouts | None = None,
        probe_interval: float = 2.0,
        grace: float = 3.0,
        tls: Any = None,
    ) -> None:
        """`timeouts` and `tls` (a ``TlsOptions``) are every member's; a member tries once (the
        pool tries again on another member, `timeouts.retries` times each)."""
        self.addresses = split_addresses(addresses)
        self.address = ",".join(self.addresses)
        self.timeouts = timeouts or Timeouts()
        self.connect_timeout = self.timeouts.connect
        self.retries = self.timeouts.retries
        self.probe_interval = probe_interval
        self._member_timeouts = dataclasses.replace(self.timeouts, retries=0)
        self._tls = tls
        self._members = [_Member(a) for a in self.addresses]
        self._cond = threading.Condition()
        self._configs: dict[str, ModelConfig] = {}
        self._model_id: str | None = None
        # image_id (feature cache key, interactive session) -> the server that was sent the pixels
        self._holders: OrderedDict[str, _Member] = OrderedDict()
        self._closed = False
        self._busy_before = 0  # "busy" answers of the engines of members that left since
        self._connect(grace)
        self._prober = threading.Thread(
            target=self._probe_loop, name="sam3-pool-probe", daemon=True
        )
        self._prober.start()

    # -- membership -----------------------------------------------------------------------
    def _open(self, member: _Member, timeout: float) -> None:
        """A ready TritonEngine for `member` (raises ConnectionError / ValueError when not)."""
        from napari_sam3.runtime.engines.triton import TritonEngine

        timeouts = dataclasses.replace(self._member_timeouts, connect=timeout)
        engine = TritonEngine(member.address, timeouts, tls=self._tls)
        try:
            manifest = contract.manifest_from_config(engine.config(contract.SEGMENT))
            model_id = manifest.model_id
            with self._cond:
                if self._model_id is None:
                    self._model_id = model_id
            if model_id != self._model_id:
                raise _OtherModel(
                    f"Triton at {member.address} serves model {model_id[:12]}, the pool serves "
                    f"{self._model_id[:12]}; every server of a pool must serve the same repository",
                    model_id,
                )
            instances = _instances(engine.config(contract.ENCODER))
        except Exception:
            engine.close()
            raise
        with self._cond:
            if member.engine is not None or self._closed:  # joined meanwhile by another attempt
                engine.close()
                return
            member.engine, member.instances = engine, instances
            member.reason, member.warned = "", False
            self._cond.notify_all()

    def _connect(self, grace: float) -> None:
        """Wait for the first ready member (up to connect_timeout), then `grace` s for the rest;
        every member still not ready is warned about once and left to the probe."""
        errors: dict[str, str] = {}

        def attempt(member: _Member) -> None:
            try:
                self._open(member, self.connect_timeout)
            except (ConnectionError, ValueError) as error:
                errors[member.address] = str(error)

        pool = ThreadPoolExecutor(len(self._members), thread_name_prefix="sam3-pool-connect")
        jobs = [pool.submit(attempt, m) for m in self._members]
        pool.shutdown(wait=False)
        deadline = time.monotonic() + self.connect_timeout
        with self._cond:
            while not self._healthy() and not all(j.done() for j in jobs):
                if time.monotonic() >= deadline:
                    break
                self._cond.wait(0.2)
        if self._healthy():
            end = time.monotonic() + grace
            for job in jobs:
                if not job.done():
                    try:
                        job.result(timeout=max(0.0, end - time.monotonic()))
                    except TimeoutError:
                        pass
        healthy = self._healthy()
        if not healthy:
            for job in jobs:
                job.result()  # every attempt has ended by now (each waits connect_timeout)
            detail = "; ".join(f"{a}: {e}" for a, e in errors.items())
            raise ConnectionFailed(
                f"none of the {len(self._members)} Triton servers is ready "
                f"({', '.join(self.addresses)}) within {self.connect_timeout:g} s: {detail}"
            )
        for member in self._members:
            if member.engine is None:
                reason = errors.get(member.address, "not ready yet")
                self._warn(member, f"not ready ({reason.split(';')[0]})")

    def _warn(self, member: _Member, reason: str) -> None:
        with self._cond:
            member.reason = reason
            if member.warned:
                return
            member.warned = True
            others = len(self._healthy())
        warnings.warn(
            f"Triton at {member.address} is out of the pool: {reason}; using the other "
            f"{others} server(s) and checking it again every {self.probe_interval:g} s",
            RuntimeWarning,
            stacklevel=3,
        )

    def _healthy(self) -> list[_Member]:
        return [m for m in self._members if m.engine is not None]

    def _drop(self, member: _Member, engine: Any, reason: str) -> None:
        with self._cond:
            if member.engine is not engine:  # another thread dropped it already
                return
            member.engine = None
            member.failures += 1
            self._busy_before += engine.busy_answers
        log.warning("Triton at %s left the pool: %s", member.address, reason)
        self._warn(member, reason)
        try:
            engine.close()
        except Exception:  # a dead channel may fail to close; it is dropped either way
            pass

    def _probe_loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait(self.probe_interval)
                if self._closed:
                    return
                down = [m for m in self._members if m.engine is None]
            for member in down:
                try:
                    try:
                        self._open(member, 1.0)  # one quick look
                    except _OtherModel as error:
                        if not self._adopt(error.model_id):
                            raise
                        self._open(member, 1.0)
                except (ConnectionError, ValueError) as error:
                    with self._cond:
                        member.reason = str(error)
                    continue
                log.warning("Triton at %s rejoined the pool", member.address)

    def _adopt(self, model_id: str) -> bool:
        """Serve `model_id` from now on if no server of the pool is up (every one of them was
        restarted on another repository); False while some server still serves the pool's."""
        with self._cond:
            if self._healthy() or self._closed:
                return False
            old, self._model_id = self._model_id, model_id
            self._configs.clear()
            self._holders.clear()
        log.warning(
            "every Triton server of the pool %s was out; it serves model %s now (was %s)",
            self.address,
            model_id[:12],
            (old or "?")[:12],
        )
        return True

    def runtime_summary(self, reasons: bool = False) -> str | None:
        return None  # each server's repository decides

    def loaded_graphs(self) -> list[str] | None:
        return None  # the server loads what its repository holds

    def runtime_choices(self) -> dict[str, Any] | None:
        return None  # the servers' repository decides

    def cache_bounds(
        self, features: int | None = None, heads: int | None = None
    ) -> tuple[int, int] | None:
        return None  # the servers' caches are their own

    def refresh(self) -> None:
        """Forget the configs read so far and the servers that hold each image, and serve the
        model most of the servers up now serve (the others leave the pool until they serve it).

        `Sam3Client` calls this when an answer names another model than its own."""
        with self._cond:
            self._configs.clear()
            self._holders.clear()
            up = [(m, m.engine) for m in self._healthy()]
        served: dict[str, list] = {}
        for member, engine in up:
            engine.refresh()
            try:
                model_id = contract.manifest_from_config(engine.config(contract.SEGMENT)).model_id
            except (ConnectionError, ValueError) as error:
                self._drop(member, engine, str(error).split(";")[0])
                continue
            served.setdefault(model_id, []).append((member, engine))
        if not served:
            return
        model_id = max(served, key=lambda m: len(served[m]))  # ties: the first address's
        with self._cond:
            self._model_id = model_id
        for other, members in served.items():
            for member, engine in members if other != model_id else ():
                self._drop(
                    member,
                    engine,
                    f"serves model {other[:12]}, the pool serves {model_id[:12]}; every server "
                    "of a pool must serve the same repository",
                )

    # -- requests -------------------------------------------------------------------------
    def _acquire(self, key: str | None, pixels: bool) -> tuple[_Member, Any]:
        """The member for a request: the one that holds image `key` when the request does not
        carry the pixels (and that member is up), else the least busy; remembered for `key`."""
        deadline = time.monotonic() + self.connect_timeout
        with self._cond:
            while True:
                if self._closed:
                    raise ConnectionFailed(
                        f"the connection to the Triton pool {self.address} is closed; "
                        "make a new Sam3Client"
                    )
                healthy = self._healthy()
                if healthy:
                    member = None if key is None or pixels else self._holders.get(key)
                    if member is None or member.engine is None:
                        member = min(healthy, key=lambda m: (m.busy / m.instances, m.served))
                    if key is not None:
                        self._holders[key] = member
                        self._holders.move_to_end(key)
                        while len(self._holders) > _HOLDERS:
                            self._holders.popitem(last=False)
                    member.busy += 1
                    member.served += 1
                    return member, member.engine
                left = deadline - time.monotonic()
                if left <= 0:
                    reasons = "; ".join(f"{m.address}: {m.reason}" for m in self._members)
                    raise ConnectionFailed(
                        f"every Triton server of the pool is down ({reasons}); waited "
                        f"{self.connect_timeout:.0f} s for one to come back. Restart them "
                        "(`sam3-serve MODEL_REPOSITORY`) or check the addresses"
                    )
                self._cond.wait(min(left, self.probe_interval))

    def _release(self, member: _Member) -> None:
        with self._cond:
            member.busy -= 1
            self._cond.notify_all()

    def _call(self, fn, key: str | None = None, pixels: bool = True):
        from napari_sam3.runtime.engines.triton import ServerBusy

        attempts = max(1, self.retries + 1) * len(self._members)
        for attempt in range(attempts):
            member, engine = self._acquire(key, pixels)
            try:
                return fn(engine)
            except ServerBusy:  # it answers: busy is not down
                raise
            except ConnectionError as error:
                self._drop(member, engine, str(error).split(";")[0])
                if attempt + 1 == attempts:
                    raise
            finally:
                self._release(member)
        raise AssertionError("unreachable")

    def config(self, model_name: str) -> ModelConfig:
        if model_name not in self._configs:
            self._configs[model_name] = self._call(lambda e: e.config(model_name))
        return self._configs[model_name]

    def infer(self, model_name: str, inputs: Tensors, output_names: OutputNames = None) -> Outputs:
        key = None
        if contract.IMAGE_ID in inputs:
            key = bytes(np.asarray(inputs[contract.IMAGE_ID]).reshape(-1)[0]).decode()
        pixels = contract.IMAGES in inputs
        return self._call(lambda e: e.infer(model_name, inputs, output_names), key, pixels)

    def statistics(self, model_name: str) -> dict[str, dict]:
        """Each healthy member's inference statistics, by address."""
        with self._cond:
            healthy = [(m.address, m.engine) for m in self._healthy()]
        return {address: engine.statistics(model_name) for address, engine in healthy}

    @property
    def busy_answers(self) -> int:
        """The "busy" answers (a full queue) the servers gave so far, each asked again or not."""
        with self._cond:
            engines = [m.engine for m in self._members if m.engine is not None]
            return self._busy_before + sum(e.busy_answers for e in engines)

    def members(self) -> list[dict[str, Any]]:
        """Where each server stands: address, healthy, requests in flight and served, why out."""
        with self._cond:
            return [
                {
                    "address": m.address,
                    "healthy": m.engine is not None,
                    "in_flight": m.busy,
                    "served": m.served,
                    "failures": m.failures,
                    "reason": m.reason,
                }
                for m in self._members
            ]

    def wait_all_healthy(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for every server to be in the pool (a server that left
        rejoins at the probe's next look); whether they all are."""
        with self._cond:
            everyone = len(self._members)
            self._cond.wait_for(
                lambda: self._closed or len(self._healthy()) == everyone, timeout=timeout
            )
            return not self._closed and len(self._healthy()) == everyone

    def concurrency(self) -> int:
        """Requests worth having in flight: each healthy server's encoder instances plus one
        queued (so a server never idles while the next request is on the wire)."""
        with self._cond:
            return sum(m.instances + 1 for m in self._healthy()) or 1

    def close(self) -> None:
        with self._cond:
            self._closed = True
            engines = [m.engine for m in self._members if m.engine is not None]
            for m in self._members:
                m.engine = None
            self._cond.notify_all()
        for engine in engines:
            engine.close()


def _instances(config: ModelConfig) -> int:
    groups = getattr(config.proto, "instance_group", ())
    return max(1, sum(int(g.count) or 1 for g in groups))
