"""A concept file saved without a name is labelled by its file's stem where its detections are
named (CLI, scene runs, the QGIS provider), and keeps its empty name through plain `load`."""

from __future__ import annotations

import numpy as np

from napari_sam3.prompts.concept import Concept


def test_an_unnamed_concept_file_takes_its_stem(local_client, tmp_path):
    image = np.random.default_rng(5).integers(0, 256, (96, 96, 3), np.uint8)
    unnamed = local_client.encode_exemplars(image, [[10, 10, 50, 60]], name="")
    path = unnamed.save(tmp_path / "sheds.npz")
    assert Concept.load(path).name == ""
    assert Concept.load_named(path, local_client.manifest).name == "sheds"
    named = local_client.encode_exemplars(image, [[10, 10, 50, 60]], name="roofs")
    assert Concept.load_named(named.save(tmp_path / "other.npz")).name == "roofs"
