"""Change: two scenes of one place, one query -> new / gone / changed objects as coloured layers.

The library does the work (`napari_sam3.change.change_between`: both dates segmented with the
same query on the first date's grid, over the ground both cover, each with its own stretch,
objects matched one to one). Here the two scenes are picked (image layers opened from raster
files, or files), and the result becomes one labels layer per class on the first date's grid,
in the class colours of `napari_sam3.change.style`. They are SAM3 result layers: the results
table lists them (its Show filter picks one class), and can delete, merge or export objects.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pandas as pd
from magicgui.widgets import FileEdit, LineEdit, PushButton

from napari_sam3.core.columns import FEATURE_COLUMNS
from napari_sam3.core.errors import InvalidInput
from napari_sam3.plugin.widgets import _layers
from napari_sam3.plugin.widgets._common import Sam3Widget, number, reports_errors, scene_combo
from napari_sam3.plugin.widgets._fields import add_threshold_fields, bands_field, query
from napari_sam3.plugin.widgets.scene import SUFFIXES, default_bands, layer_source, tile_work
from napari_sam3.prompts.keywords import parse_keywords

# the classes shown, and whether their layer starts visible (same: there, but hidden)
SHOWN = {"new": True, "gone": True, "changed": True, "unknown": True, "same": False}
EXTRA_COLUMNS = ["change", "reason", "iou", "before_score", "after_score"]


def change_work(client, sources, cancel: threading.Event, query, settings, options: dict):
    """Generator for the widget's job: yields (tiles done, tiles) over both dates and returns
    `change_between`'s (table, summary); `cancel` stops it after the tile in progress."""
    from napari_sam3.change import change_between

    return (
        yield from tile_work(change_between, cancel, client, sources, query, settings, **options)
    )


def change_layers(table, grid_source) -> list[tuple[np.ndarray, dict, str]]:
    """The change table -> one napari labels layer tuple per class present (data, kwargs,
    "labels"), rasterized on the grid of `grid_source` (the first date's raster) over the
    footprint both dates cover, placed by its georeferencing as the reader places the raster
    (``contour``, not an ``add_labels`` argument, is set on the layer afterwards)."""
    from rasterio.features import rasterize
    from rasterio.windows import Window, from_bounds
    from rasterio.windows import transform as window_transform

    from napari_sam3.change.style import CHANGE_COLOURS, OUTLINE_ONLY
    from napari_sam3.imagery.raster import raster_info
    from napari_sam3.plugin.georef import affine_list, transform_kwargs

    info = raster_info(grid_source)
    footprint = table.attrs.get("footprint")
    bounds = footprint.bounds if footprint is not None else table.total_bounds
    window = from_bounds(*bounds, transform=info.transform).round_offsets().round_lengths()
    window = window.intersection(Window(0, 0, info.cols, info.rows))
    transform = window_transform(window, info.transform)
    shape = (int(window.height), int(window.width))
    layers = []
    for change, visible in SHOWN.items():
        rows = table[table["change"] == change].reset_index(drop=True)
        if not len(rows):
            continue
        ids = np.arange(1, len(rows) + 1, dtype=np.int64)
        # the better-scored object on top where two overlap (rasterize paints in order)
        score = rows["after_score"].where(rows["after_score"].notna(), rows["before_score"])
        order = np.argsort(score.to_numpy(np.float64), kind="stable")
        labels = rasterize(
            [(rows.geometry[i], int(ids[i])) for i in order if not rows.geometry[i].is_empty],
            out_shape=shape,
            transform=transform,
            fill=0,
            dtype="int32",
        )
        area = np.bincount(labels.ravel(), minlength=len(rows) + 1)[1:]
        dates = f"{rows['before_date'].iloc[0]} -> {rows['after_date'].iloc[0]}"
        features = pd.DataFrame(
            {
                "index": ids,
                "keyword": rows["keyword"].astype(str),
                "score": score.to_numpy(np.float32),
                "area": area.astype(np.int64),
                "prompt_kind": ["change"] * len(rows),
                "source": [dates] * len(rows),
                **{c: rows[c] for c in EXTRA_COLUMNS},
            },
            columns=[*FEATURE_COLUMNS, *EXTRA_COLUMNS],
        )
        metadata = _layers.with_record(
            {"crs": info.crs.to_string(), "transform": affine_list(transform), "source": ""},
            "result",
            offset=[int(window.row_off), int(window.col_off)],
            change=change,
            dates=dates,
        )
        colour = CHANGE_COLOURS[change]
        kwargs = {
            "name": f"SAM3 change {change} ({dates})",
            "features": features,
            "metadata": metadata,
            "colormap": _class_colormap(ids, "#bdbdbd" if change in OUTLINE_ONLY else colour),
            "visible": visible,
            "opacity": 0.8,
            **transform_kwargs(transform),
        }
        if change in OUTLINE_ONLY:
            kwargs["contour"] = 1
        layers.append((labels, kwargs, "labels"))
    return layers


def _class_colormap(ids, colour: str):
    from napari.utils.colormaps import DirectLabelColormap

    colours: dict = {None: "transparent", 0: "transparent"}
    colours.update({int(i): colour for i in ids})
    return DirectLabelColormap(color_dict=colours)


class ChangeWidget(Sam3Widget):
    """Compare two dates of one place with one query; one coloured layer per change class."""

    def __init__(self, napari_viewer, shared=None) -> None:
        super().__init__(napari_viewer)
        tip = "A layer opened from a raster file: {} (its file is read tile by tile)"
        self.before = scene_combo(
            napari_viewer, "Before", nullable=True, tooltip=tip.format("the earlier date"),
            follow=False,
        )  # fmt: skip
        self.after = scene_combo(
            napari_viewer, "After", nullable=True, tooltip=tip.format("the later date"),
            follow=False,
        )  # fmt: skip
        raster_filter = " ".join(f"*{s}" for s in SUFFIXES.split())
        self.before_file = FileEdit(
            mode="r", filter=raster_filter, label="Before file",
            tooltip="Optional: a raster file instead of the Before layer",
        )  # fmt: skip
        self.after_file = FileEdit(
            mode="r", filter=raster_filter, label="After file",
            tooltip="Optional: a raster file instead of the After layer",
        )  # fmt: skip
        self.bands = shared.bands if shared is not None else bands_field()
        self.prompt = LineEdit(
            value="",
            label="Prompt",
            tooltip="Keywords separated by commas or semicolons, the same on both dates",
        )
        self.gsd = number(
            0.0, (0.0, 100_000.0), "GSD (m)",
            "Read both dates at this many metres per pixel; 0 = the earlier date's grid",
            step=0.5,
        )  # fmt: skip
        self.iou = number(0.3, (0.0, 1.0), "Match IoU", "Overlap two dates' objects need to match")
        self.changed_iou = number(
            0.5, (0.0, 1.0), "Changed IoU", "A match overlapping less than this is changed"
        )
        self.area_factor = number(
            1.5, (1.0, 100.0), "Area factor", "A match whose area grew or shrank more is changed"
        )
        for box in (self.iou, self.changed_iou, self.area_factor):
            box.step = 0.05
        self.run_button = PushButton(text="Compare dates")
        self.run_button.changed.connect(self.run)
        self._cancel_event = threading.Event()
        self.extend(
            [
                self.before,
                self.before_file,
                self.after,
                self.after_file,
                *([self.bands] if shared is None else []),
                self.prompt,
                self.gsd,
                self.iou,
                self.changed_iou,
                self.area_factor,
                *add_threshold_fields(self, shared),
                self.run_button,
            ]
        )
        self._footer()
        self._controls = [self.run_button]
        self.reset_choices()

    def _date(self, picker, chosen, which: str):
        """(the source of one date, its layer or None)."""
        if chosen is not None and str(chosen) not in ("", "."):
            if not Path(chosen).is_file():
                raise InvalidInput(f"no such file: {chosen}")
            return str(chosen), None
        layer = picker.value
        if layer is None:
            raise InvalidInput(f"choose the {which} scene: a layer opened from a raster, or a file")
        return layer_source(layer), layer

    def arguments(self) -> tuple:
        """(sources, Query, SceneSettings, the matching options) from the fields."""
        from napari_sam3.scene import SceneSettings

        words = parse_keywords(self.prompt.value)
        if not words:
            raise InvalidInput("type keywords such as building, pool (the same on both dates)")
        wanted = query(self, keywords=words)
        before, before_layer = self._date(self.before, self.before_file.value, "Before")
        after, _ = self._date(self.after, self.after_file.value, "After")
        if before == after:
            raise InvalidInput("Before and After are the same scene: choose two dates")
        settings = SceneSettings(
            bands=default_bands(before_layer, self.bands.value),
            gsd=float(self.gsd.value) or None,
        )
        options = {
            "iou": float(self.iou.value),
            "changed_iou": float(self.changed_iou.value),
            "area_factor": float(self.area_factor.value),
        }
        return [before, after], wanted, settings, options

    @reports_errors("Change failed")
    def run(self, *_args) -> None:
        client = self.client
        sources, wanted, settings, options = self.arguments()
        self._cancel_event = cancel = threading.Event()
        self.job.start(
            "Comparing dates",
            change_work,
            client,
            sources,
            cancel,
            wanted,
            settings,
            options,
            done=lambda result: self._show(result, sources[0]),
        )

    def _job_cancelled(self) -> None:
        self._cancel_event.set()

    def _show(self, result, grid_source) -> str:
        table, summary = result
        self.results = []
        for data, kwargs, _ in change_layers(table, grid_source):
            contour = kwargs.pop("contour", 0)
            layer = self.viewer.add_labels(data, **kwargs)
            layer.contour = contour  # not an add_labels argument
            self.results.append(layer)
        lines = summary.lines()
        return "; ".join(lines) if lines else "no objects on either date"
