# TEMPORARY (task 13 iteration only, to be deleted): reuse a pre-exported tiny repository.
import os
from pathlib import Path

import pytest

if os.environ.get("T13_REPO"):

    @pytest.fixture(scope="session")
    def tiny_repository():
        return Path(os.environ["T13_REPO"])
