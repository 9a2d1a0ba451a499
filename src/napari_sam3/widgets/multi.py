"""Multi-keyword: several keywords on one vision pass -> a labels layer each, or one layer."""

from __future__ import annotations

import pandas as pd
from magicgui.widgets import PushButton, RadioButtons, TextEdit

from ..prompts import parse_keywords
from . import _layers
from ._common import Sam3Widget, reports_errors
from .segment import add_image_fields, add_threshold_fields, thresholds

PER_KEYWORD = "One labels layer per keyword"
ONE_LAYER = "One labels layer, keyword in its features"


class MultiKeywordWidget(Sam3Widget):
    def __init__(self, napari_viewer) -> None:
        super().__init__(napari_viewer)
        image_fields = add_image_fields(self, napari_viewer)
        self.keywords = TextEdit(
            value="",
            label="Keywords",
            tooltip="One per line, or separated by commas or semicolons; repeats are dropped",
        )
        self.output = RadioButtons(
            choices=[PER_KEYWORD, ONE_LAYER], value=PER_KEYWORD, label="Output"
        )
        self.run_button = PushButton(text="Segment keywords")
        self.run_button.changed.connect(self.run)
        self.extend(
            [
                *image_fields,
                self.keywords,
                self.output,
                *add_threshold_fields(self),
                self.run_button,
            ]
        )
        self._footer()
        self._controls = [self.run_button]
        self.reset_choices()

    @reports_errors("Multi-keyword segment failed")
    def run(self, *_args) -> None:
        client = self.client
        keywords = parse_keywords(self.keywords.value)
        if not keywords:
            raise ValueError("type at least one keyword, e.g. building")
        target = _layers.model_image(
            self.viewer, self.image.value, self.bands.value, self.region.value
        )
        options = thresholds(self)

        def work():
            prepared = _layers.prepare(client, target)
            return client.multi(prepared, keywords, **options)

        per_keyword = self.output.value == PER_KEYWORD
        self.job.start(
            f"Segmenting {len(keywords)} keywords",
            work,
            done=lambda frame: self._show(frame, target, keywords, per_keyword),
        )

    def _show(self, frame: pd.DataFrame, target, keywords, per_keyword: bool) -> str:
        self.results = []
        if per_keyword:
            for keyword in keywords:
                part = frame[frame["keyword"] == keyword].reset_index(drop=True)
                labels, features = _layers.results_to_labels(part, target.shape, target.description)
                kwargs = _layers.result_layer_kwargs(
                    target, f"SAM3 {keyword}", features, prompt=keyword
                )
                self.results.append(self.viewer.add_labels(labels, **kwargs))
        else:
            labels, features = _layers.results_to_labels(frame, target.shape, target.description)
            kwargs = _layers.result_layer_kwargs(
                target, f"SAM3 {', '.join(keywords)}", features, prompt=", ".join(keywords)
            )
            self.results.append(self.viewer.add_labels(labels, **kwargs))
        counts = frame["keyword"].value_counts() if len(frame) else {}
        summary = ", ".join(f"{k}: {int(counts.get(k, 0))}" for k in keywords)
        return f"{summary} -> {len(self.results)} layer(s)"
