"""Concepts: encode exemplar boxes once, keep them in a bank, save/load .npz, apply elsewhere."""

from __future__ import annotations

from pathlib import Path

from magicgui.widgets import CheckBox, FileEdit, LineEdit, PushButton, Select
from napari.layers import Shapes

from napari_sam3.core.errors import InvalidInput
from napari_sam3.plugin.widgets import _layers
from napari_sam3.plugin.widgets._common import (
    Sam3Widget,
    layer_combo,
    reports_errors,
    row,
    scene_combo,
)
from napari_sam3.plugin.widgets._fields import (
    add_exemplar_fields,
    add_image_fields,
    add_threshold_fields,
    query,
    target_of,
)
from napari_sam3.prompts.concept import Concept


def describe_concept(concept: Concept) -> str:
    return (
        f"{concept.name}: {concept.n_positive}+ / {concept.n_negative}- "
        f"(model {concept.model_id[:8]})"
    )


class ConceptsWidget(Sam3Widget):
    """Encode exemplar boxes into concepts; apply the selected ones through one `multi` call.

    Inside the SAM3 panel (`shared` given) the image, region, exemplars and thresholds are the
    panel's, and concepts apply to the panel's image (choose another image there to apply one
    elsewhere).
    """

    def __init__(self, napari_viewer, shared=None) -> None:
        super().__init__(napari_viewer)
        self.shared = shared
        self.bank: dict[str, Concept] = {}
        image_fields = add_image_fields(self, napari_viewer, shared)
        exemplar_fields = add_exemplar_fields(self, napari_viewer, shared)
        self.name = LineEdit(value="", label="Concept name", tooltip="e.g. greenhouse")
        self.encode_button = PushButton(text="Encode concept")
        self.concepts = Select(choices=self._bank_choices, label="Concept bank")
        self.concepts.native.setMinimumHeight(90)
        self.save_path = FileEdit(mode="w", filter="*.npz", label="Save to")
        self.overwrite = CheckBox(value=False, text="Overwrite")
        self.save_button = PushButton(text="Save selected")
        self.load_path = FileEdit(mode="r", filter="*.npz", label="Load from")
        self.load_button = PushButton(text="Load")
        self.remove_button = PushButton(text="Remove selected")
        if shared is None:
            self.apply_image = scene_combo(napari_viewer, "Apply to image", follow=False)
            self.apply_bands = LineEdit(value="", label="Apply bands")
            self.apply_region = layer_combo(napari_viewer, Shapes, "Apply region", nullable=True)
            apply_fields = [self.apply_image, self.apply_bands, self.apply_region]
        else:
            apply_fields = []
        self.apply_button = PushButton(text="Apply selected concept(s)")

        self.encode_button.changed.connect(self.encode)
        self.save_button.changed.connect(self.save)
        self.load_button.changed.connect(self.load)
        self.remove_button.changed.connect(self.remove)
        self.apply_button.changed.connect(self.apply)
        self.extend(
            [
                *image_fields,
                *exemplar_fields,
                self.name,
                self.encode_button,
                self.concepts,
                self.save_path,
                row(self.save_button, self.overwrite),
                self.load_path,
                row(self.load_button, self.remove_button),
                *apply_fields,
                *add_threshold_fields(self, shared),
                self.apply_button,
            ]
        )
        self._footer()
        self._controls = [self.encode_button, self.apply_button]
        self.reset_choices()

    # -- bank -------------------------------------------------------------------------------
    def _bank_choices(self, _widget=None):
        return [(describe_concept(c), name) for name, c in self.bank.items()]

    def add_concept(self, concept: Concept) -> str:
        """Put `concept` in the bank (a unique name) and select it; returns its name."""
        base = concept.name or "concept"
        name, n = base, 1
        while name in self.bank:
            n += 1
            name = f"{base} {n}"
        concept.name = name
        self.bank[name] = concept
        self.concepts.reset_choices()
        self.concepts.value = [name]
        return name

    def _selected(self) -> list[Concept]:
        names = list(self.concepts.value or [])
        if not names:
            raise InvalidInput("select a concept in the bank (encode or load one first)")
        return [self.bank[n] for n in names]

    # -- encode -----------------------------------------------------------------------------
    @reports_errors("Encoding the concept failed")
    def encode(self, *_args) -> None:
        client = self.client
        target = target_of(self)
        boxes, labels = _layers.boxes_from_shapes(self.exemplars.value, target)
        if len(boxes) == 0:
            raise InvalidInput("draw exemplar boxes on the Exemplars layer first")
        if not labels.any():
            raise InvalidInput("a concept needs at least one positive box")
        name = self.name.value.strip() or "concept"

        def work():
            prepared = yield from _layers.prepared_with_status(client, target)
            concept = client.encode_exemplars(prepared, boxes, labels, name=name)
            concept.source = target.description
            return concept

        self.job.start(f"Encoding '{name}'", work, done=self._encoded)

    def _encoded(self, concept: Concept) -> str:
        name = self.add_concept(concept)
        return f"concept '{name}' is in the bank"

    # -- files ------------------------------------------------------------------------------
    @reports_errors("Saving the concept failed")
    def save(self, *_args) -> None:
        concepts = self._selected()
        if len(concepts) != 1:
            raise InvalidInput("select exactly one concept to save")
        path = Path(self.save_path.value)
        if path.suffix.lower() != ".npz":
            path = path.with_suffix(".npz")
        written = concepts[0].save(path, overwrite=bool(self.overwrite.value))
        self.status.value = f"saved '{concepts[0].name}' to {written.name}"

    @reports_errors("Loading the concept failed")
    def load(self, *_args) -> None:
        concept = Concept.load(Path(self.load_path.value))
        name = self.add_concept(concept)
        self.status.value = f"loaded '{name}'"

    @reports_errors("Removing the concept failed")
    def remove(self, *_args) -> None:
        for concept in self._selected():
            self.bank.pop(concept.name, None)
        self.concepts.reset_choices()

    # -- apply ------------------------------------------------------------------------------
    @reports_errors("Applying the concept failed")
    def apply(self, *_args) -> None:
        client = self.client
        concepts = self._selected()
        for concept in concepts:
            concept.check_model(client.model_id)
        if self.shared is None:
            target = _layers.model_image(
                self.viewer, self.apply_image.value, self.apply_bands.value, self.apply_region.value
            )
        else:
            target = target_of(self)
        wanted = query(self, concepts=[(c.name, c) for c in concepts])

        def work():
            # One vision pass for all of them (the `keyword` column is each concept's name).
            prepared = yield from _layers.prepared_with_status(client, target)
            frame = client.find(prepared, wanted)
            return [frame[frame["keyword"] == c.name].reset_index(drop=True) for c in concepts]

        self.job.start(
            f"Applying {len(concepts)} concept(s)",
            work,
            done=lambda frames: self._show(frames, concepts, target),
        )

    def _show(self, frames, concepts, target) -> str:
        self.results = []
        for concept, frame in zip(concepts, frames, strict=True):
            labels, features = _layers.results_to_labels(frame, target.shape, target.description)
            kwargs = _layers.result_layer_kwargs(
                target, f"SAM3 concept {concept.name}", features, prompt=concept.name
            )
            self.results.append(self.viewer.add_labels(labels, **kwargs))
        counts = ", ".join(f"{c.name}: {len(f)}" for c, f in zip(concepts, frames, strict=True))
        return f"{counts} -> {len(self.results)} layer(s)"
