"""Text & exemplars: any number of keywords and/or exemplar boxes -> labels layers.

The fields make one :class:`~napari_sam3.prompts.query.Query` for `Sam3Client.find`: one keyword
(with or without exemplar boxes) is one grounding pass; several keywords share one vision pass. The run keeps every candidate the model gives (score
threshold 0) and shows those at or above the Score threshold: moving the threshold afterwards
re-filters the last result in place, with no model call. That is exact, because dedup and the
detection cap keep a mask only by comparing it with better-scored masks, which a higher threshold
keeps too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from magicgui.widgets import ComboBox, PushButton, TextEdit

from napari_sam3.core.errors import InvalidInput
from napari_sam3.plugin.widgets import _layers
from napari_sam3.plugin.widgets._common import Sam3Widget, reports_errors
from napari_sam3.plugin.widgets._fields import (
    add_exemplar_fields,
    add_image_fields,
    add_threshold_fields,
    query,
    target_of,
)
from napari_sam3.prompts.keywords import parse_keywords

PER_KEYWORD = "One labels layer per keyword"
ONE_LAYER = "One labels layer, keyword in its features"
OBJECT = "object"  # feature: the object's row in the run's full result (all candidates)


@dataclass
class LastRun:
    """The last result, kept whole so a new score threshold can re-filter it."""

    frame: pd.DataFrame  # every candidate (score threshold 0)
    target: _layers.ModelImage
    layers: dict = field(default_factory=dict)  # layer name -> (layer, keywords it shows)


class TextWidget(Sam3Widget):
    """Everything some keywords and/or exemplar boxes name in the image."""

    def __init__(self, napari_viewer, shared=None) -> None:
        super().__init__(napari_viewer)
        self.shared = shared
        self.last: LastRun | None = None
        self.results: list = []
        image_fields = add_image_fields(self, napari_viewer, shared)
        self.keywords = TextEdit(
            value="",
            label="Keywords",
            tooltip="One per line, or separated by commas or semicolons; repeats are dropped. "
            "Empty: the exemplar boxes only",
        )
        self.keywords.native.setMaximumHeight(70)
        exemplar_fields = add_exemplar_fields(self, napari_viewer, shared)
        self.output = ComboBox(choices=[PER_KEYWORD, ONE_LAYER], value=PER_KEYWORD, label="Output")
        self.run_button = PushButton(text="Segment")
        self.run_button.changed.connect(self.run)
        self.extend(
            [
                *image_fields,
                self.keywords,
                *exemplar_fields,
                self.output,
                *add_threshold_fields(self, shared),
                self.run_button,
            ]
        )
        self._footer()
        self._controls = [self.run_button]
        self.score_thr.changed.connect(self._refilter)
        self.reset_choices()

    @reports_errors("Segment failed")
    def run(self, *_args) -> None:
        client = self.client
        keywords = parse_keywords(self.keywords.value)
        target = target_of(self)
        boxes, labels = _layers.boxes_from_shapes(self.exemplars.value, target)
        if not keywords and len(boxes) == 0:
            raise InvalidInput("type a keyword, or draw exemplar boxes on the Exemplars layer")
        if len(boxes) and len(keywords) > 1:
            raise InvalidInput(
                f"exemplar boxes go with one keyword at most, got {len(keywords)}: keep one, "
                "or encode the boxes as a concept (Concepts tab) and apply it beside the keywords"
            )
        # every candidate is kept (score 0): the threshold re-filters in place (_refilter)
        wanted = query(
            self, keywords=keywords, exemplar_boxes=boxes, exemplar_labels=labels, score_thr=0.0
        )

        def work():
            prepared = yield from _layers.prepared_with_status(client, target)
            return client.find(prepared, wanted)

        names = keywords or ["visual query"]
        what = f"Segmenting {', '.join(repr(k) for k in names)}"
        per_keyword = self.output.value == PER_KEYWORD
        self.job.start(what, work, done=lambda frame: self._show(frame, target, names, per_keyword))

    def _show(self, frame: pd.DataFrame, target, names: list[str], per_keyword: bool) -> str:
        frame = frame.reset_index(drop=True)
        frame[OBJECT] = np.arange(len(frame), dtype=np.int64)
        self.last = LastRun(frame, target)
        self.results = []
        groups = [[k] for k in names] if per_keyword else [names]
        for group in groups:
            name = "SAM3 " + ", ".join(group)
            layer = self.viewer.add_labels(
                np.zeros(target.shape, np.int32),
                **_layers.result_layer_kwargs(
                    target,
                    name,
                    pd.DataFrame(columns=_layers.FEATURE_COLUMNS),
                    prompt=", ".join(group),
                ),
            )
            self.last.layers[layer.name] = (layer, group)
            self.results.append(layer)
        self.result = self.results[-1]
        shown = self._refilter()
        counts = pd.Series([k for k, _ in shown]).value_counts() if shown else {}
        summary = ", ".join(f"{k}: {int(counts.get(k, 0))}" for k in names)
        return f"{summary} -> {len(self.results)} layer(s)"

    def _refilter(self, *_args) -> list:
        """Show the last run's objects at or above the score threshold, in their layers, in
        place (no model call); objects rejected in the results table stay out."""
        last = self.last
        if last is None:
            return []
        thr = float(self.score_thr.value)
        shown = []
        for layer, group in list(last.layers.values()):
            if layer not in self.viewer.layers:
                continue
            part = last.frame
            if "keyword" in part.columns and group != ["visual query"]:
                part = part[part["keyword"].isin(group)]
            rejected = set(_layers._record(layer).get("rejected", ()))
            part = part[(part["score"] >= thr) & ~part[OBJECT].isin(rejected)]
            part = part.reset_index(drop=True)
            labels, features = _layers.results_to_labels(
                part, last.target.shape, last.target.description
            )
            features[OBJECT] = np.asarray(part[OBJECT], np.int64)
            layer.features = features
            layer.colormap = _layers.keyword_colormap(features)
            layer.data = labels
            _layers._record(layer)["score_thr"] = thr
            shown.extend(
                (str(k), int(o)) for k, o in zip(features["keyword"], part[OBJECT], strict=True)
            )
        return shown
