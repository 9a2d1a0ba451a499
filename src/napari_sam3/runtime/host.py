"""What this machine can compute, read in one place: CPU features, runtimes, accelerators.

Every host-dependent decision (which runtime, which precision, whether a compiled graph runs at
the precision asked for) reads a `Host`, never /proc/cpuinfo or a runtime directly. `detect()`
reads this machine once; tests build a `Host` by hand with the libraries' real values (flag
names as the kernel prints them, OpenVINO's capability names, ONNX Runtime's provider names), so
both sides of every branch run on any machine.

OpenVINO and ONNX Runtime are imported through `import_openvino()` / `import_onnxruntime()`
only: imported otherwise, both send usage telemetry (README, "No network").

This file is copied beside each Triton Python model (with onnx_runner.py), so it imports nothing
from napari_sam3.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # the CPU computes bf16 in hardware
AMX_FLAGS = ("amx_tile", "amx_bf16", "amx_int8")
VNNI_FLAGS = ("avx512_vnni", "avx_vnni")
# OpenVINO's CPU plugin runs INT8 graphs from AVX2 on; VNNI and AMX compute them faster
INT8_FLAGS = ("avx2",)
CUDA_PROVIDER = "CUDAExecutionProvider"
CPU_PROVIDER = "CPUExecutionProvider"

# ONNX Runtime (1.29 and later) uploads usage events from Linux and macOS too, unless this is
# set before it initialises: its documented opt-out (ONNX Runtime's docs/Privacy.md), latched
# for the process and inherited by child processes (tritonserver and its Python stubs).
ORT_TELEMETRY_SWITCH = "ORT_DISABLE_TELEMETRY"

_import_lock = threading.Lock()


def decline_telemetry() -> None:
    """Switch ONNX Runtime's telemetry off for this process and its children (an explicit
    setting of the user's is kept)."""
    os.environ.setdefault(ORT_TELEMETRY_SWITCH, "1")


def import_onnxruntime():
    """`onnxruntime`, with its telemetry switched off first."""
    decline_telemetry()
    import onnxruntime

    return onnxruntime


def import_openvino():
    """`openvino`, imported with its usage telemetry declined.

    `import openvino` initialises openvino-telemetry, which (with no consent file in the user's
    home) looks up www.google-analytics.com, sends a usage event and writes `~/intel/`. The
    telemetry package declines, and writes nothing, when it is initialised with `disable_in_ci`
    (as OpenVINO's import does) and sees a CI marker in the environment (`CI=true`): its own
    switch. We set that marker for the duration of the first import only, so the user's
    environment, and what other libraries see in it, stays as it was.
    """
    with _import_lock:
        if "openvino" in sys.modules:
            import openvino

            return openvino
        previous = os.environ.get("CI")
        os.environ["CI"] = "true"
        try:
            import openvino
        finally:
            if previous is None:
                os.environ.pop("CI", None)
            else:
                os.environ["CI"] = previous
        return openvino


def read_cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> frozenset[str]:
    """The `flags` line of /proc/cpuinfo (empty where there is none, e.g. macOS)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


@dataclass(frozen=True)
class Host:
    """What one machine offers. `openvino_version` is None where OpenVINO does not import;
    `openvino_capabilities` is OpenVINO's `OPTIMIZATION_CAPABILITIES` for its CPU device;
    `ort_providers` ONNX Runtime's `get_available_providers()` (empty where it does not import)."""

    cpu_flags: frozenset[str] = frozenset()
    openvino_version: str | None = None
    openvino_capabilities: tuple[str, ...] = ()
    ort_providers: tuple[str, ...] = ()

    @property
    def openvino(self) -> bool:
        return self.openvino_version is not None

    @property
    def onnxruntime(self) -> bool:
        return bool(self.ort_providers)

    @property
    def cuda(self) -> bool:
        """ONNX Runtime's CUDA provider is installed (a GPU build of onnxruntime)."""
        return CUDA_PROVIDER in self.ort_providers

    @property
    def amx(self) -> bool:
        return any(f in self.cpu_flags for f in AMX_FLAGS)

    @property
    def vnni(self) -> bool:
        return any(f in self.cpu_flags for f in VNNI_FLAGS)

    def native_bf16(self) -> tuple[bool, str]:
        """(whether OpenVINO computes bf16 in hardware here, why). The CPU must have the
        instructions and OpenVINO must list BF16: without it, OpenVINO silently computes fp32
        whatever precision it is asked for."""
        present = [f for f in BF16_FLAGS if f in self.cpu_flags]
        if not present:
            return False, "this CPU has no native bf16 (no avx512_bf16 or amx_bf16 flag)"
        if not self.openvino:
            return False, f"CPU flags {', '.join(present)}, but OpenVINO is not installed"
        if "BF16" not in self.openvino_capabilities:
            return False, f"OpenVINO does not list BF16 for this CPU (flags {', '.join(present)})"
        return True, f"native bf16 ({', '.join(present)}; OpenVINO lists BF16)"

    def int8(self) -> tuple[bool, str]:
        """(whether OpenVINO runs INT8 graphs here, why): the CPU must have AVX2 at least and
        OpenVINO must list INT8 for it. VNNI (avx512_vnni, avx_vnni) or AMX make them fast;
        on AVX2 alone they run, with less gain over fp32."""
        if not any(f in self.cpu_flags for f in INT8_FLAGS):
            return False, "this CPU has no AVX2, which OpenVINO's INT8 kernels need"
        if not self.openvino:
            return False, "OpenVINO is not installed (INT8 graphs run in OpenVINO only)"
        if "INT8" not in self.openvino_capabilities:
            return False, "OpenVINO does not list INT8 for this CPU"
        if self.amx:
            return True, "INT8 on AMX"
        if self.vnni:
            return True, "INT8 on VNNI"
        return True, "INT8 on AVX2 (no VNNI or AMX: less gain over fp32)"

    def describe(self) -> str:
        """One line for `napari-sam3 info` and bug reports."""
        native, why = self.native_bf16()
        parts = [
            f"bf16: {'yes' if native else 'no'} ({why})",
            f"int8: {'yes' if self.int8()[0] else 'no'} ({self.int8()[1]})",
            f"AMX: {'yes' if self.amx else 'no'}",
            f"VNNI: {'yes' if self.vnni else 'no'}",
            f"OpenVINO: {self.openvino_version or 'not installed'}",
            "ONNX Runtime: "
            + (", ".join(p.removesuffix("ExecutionProvider") for p in self.ort_providers) or "no"),
        ]
        return "; ".join(parts)


@functools.lru_cache(maxsize=1)
def detect() -> Host:
    """This machine, read once per process."""
    version, capabilities = None, ()
    try:
        ov = import_openvino()
        version = ov.get_version()
    except ImportError:
        ov = None
    if ov is not None:
        try:
            capabilities = tuple(ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
        except RuntimeError:  # no CPU plugin: OpenVINO cannot run here at all
            version = None
    try:
        ort = import_onnxruntime()
        providers = tuple(ort.get_available_providers())
    except ImportError:
        providers = ()
    return Host(read_cpu_flags(), version, capabilities, providers)
