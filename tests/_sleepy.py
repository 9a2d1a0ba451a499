"""A Python model for a real tritonserver that takes the time it is asked to, and its journal:
a legitimately slow request whose start and end the tests can see (timeouts, a full queue)."""

from __future__ import annotations

import json
import time
from pathlib import Path

SLEEPY = "test_sleepy"
SLEEPY_CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [
  {{ name: "seconds" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "tag" data_type: TYPE_INT64 dims: [ 1 ] }}
]
output [ {{ name: "slept" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: {instances} }} ]
{queue}parameters {{ key: "journal" value: {{ string_value: {journal} }} }}
"""
SLEEPY_MODEL = '''
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Sleeps as many seconds as asked: a legitimately slow request. Each request's start and
    end go to the journal file named in the config, under the request's tag."""

    def initialize(self, args):
        self.journal = json.loads(args["model_config"])["parameters"]["journal"]["string_value"]

    def _note(self, what, tag):
        with open(self.journal, "a") as f:
            f.write(f"{what} {tag}\\n")

    def execute(self, requests):
        responses = []
        for request in requests:
            seconds = pb_utils.get_input_tensor_by_name(request, "seconds").as_numpy()
            tag = int(pb_utils.get_input_tensor_by_name(request, "tag").as_numpy()[0])
            self._note("start", tag)
            time.sleep(float(seconds[0]))
            self._note("end", tag)
            out = pb_utils.Tensor("slept", seconds.astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
'''


class Journal:
    """What the sleepy model wrote: which tagged requests it started and finished."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tags = iter(range(1, 2**62))

    def new_tag(self) -> int:
        return next(self._tags)

    def entries(self, tag: int) -> list[str]:
        text = self.path.read_text() if self.path.exists() else ""
        return [what for what, _, t in (line.partition(" ") for line in text.splitlines())
                if int(t) == tag]  # fmt: skip

    def wait_for(self, what: str, tag: int, guard: float = 60.0) -> bool:
        """Wait for the model to write `what` ("start", "end") for `tag`; False if it never
        did within `guard` seconds (a hang guard, not a measurement)."""
        end = time.monotonic() + guard
        while what not in self.entries(tag):
            if time.monotonic() > end:
                return False
            time.sleep(0.02)
        return True


def add_sleepy(repo: Path, journal: Journal, instances: int = 2, max_queue: int | None = None):
    """Add `test_sleepy` to the repository `repo`: `instances` run at once; with `max_queue`,
    that many requests wait beside them and the others are answered busy (Triton's queue policy,
    as sam3-export --max-queue writes it for the SAM3 models)."""
    queue = ""
    if max_queue is not None:
        queue = f"dynamic_batching {{ default_queue_policy {{ max_queue_size: {max_queue} }} }}\n"
    (repo / SLEEPY / "1").mkdir(parents=True)
    config = SLEEPY_CONFIG.format(
        name=SLEEPY, journal=json.dumps(str(journal.path)), instances=instances, queue=queue
    )
    (repo / SLEEPY / "config.pbtxt").write_text(config)
    (repo / SLEEPY / "1" / "model.py").write_text(SLEEPY_MODEL)
