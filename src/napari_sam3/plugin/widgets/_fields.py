"""The input fields the SAM3 modes share, and what a run sends to the model.

The SAM3 panel builds each group once (image / bands / region, exemplars, thresholds) and its
tabs point at the panel's fields (`shared=panel`); a mode built on its own gets fields of its own.
`target_of` turns a mode's image fields and its "Where" choice into the `ModelImage` of a run;
`new_exemplar_layer` and `set_negative` make and switch the exemplar (and click) layers.
"""

from __future__ import annotations

from magicgui.widgets import CheckBox, FloatSpinBox, LineEdit, PushButton, SpinBox
from napari.layers import Shapes

from napari_sam3.core.errors import InvalidInput
from napari_sam3.plugin.widgets import _layers
from napari_sam3.plugin.widgets._common import layer_combo, row, scene_combo
from napari_sam3.prompts.query import Query

EXEMPLAR_LAYER = "SAM3 exemplars"
POSITIVE_COLOR, NEGATIVE_COLOR = "lime", "red"
# Where a run looks: the choices of the panel's shared "Where" field.
WHOLE, VIEW, REGION = "Whole image", "Current view", "Selected region"
THRESHOLD_FIELDS = ("score_thr", "mask_thr", "max_det", "dedup")
IMAGE_FIELDS = ("image", "bands", "region", "where")
EXEMPLAR_FIELDS = ("exemplars", "new_exemplars", "negative")


def _share(widget, shared, names) -> list:
    """Point `widget`'s fields at the panel's shared ones (laid out by the panel, not here)."""
    for name in names:
        if hasattr(shared, name):
            setattr(widget, name, getattr(shared, name))
    return []


def thresholds(widget) -> dict:
    """The score/mask thresholds, max detections and dedup of a widget (dedup 0 = off)."""
    dedup = float(widget.dedup.value)
    return {
        "score_thr": float(widget.score_thr.value),
        "mask_thr": float(widget.mask_thr.value),
        "max_det": int(widget.max_det.value),
        "dedup": dedup if dedup > 0 else None,
    }


def query(widget, **fields) -> Query:
    """The run's :class:`~napari_sam3.prompts.query.Query`: `fields` (keywords, concepts,
    exemplar boxes) with the widget's thresholds; checked, with the library's messages."""
    return Query(**{**thresholds(widget), **fields})


def add_threshold_fields(widget, shared=None) -> list:
    if shared is not None:
        return _share(widget, shared, THRESHOLD_FIELDS)
    widget.score_thr = FloatSpinBox(value=0.5, min=0.0, max=1.0, step=0.05, label="Score threshold")
    widget.mask_thr = FloatSpinBox(value=0.5, min=0.05, max=0.95, step=0.05, label="Mask threshold")
    widget.max_det = SpinBox(value=100, min=1, max=1000, label="Max detections")
    widget.dedup = FloatSpinBox(
        value=0.85,
        min=0.0,
        max=1.0,
        step=0.05,
        label="Dedup overlap",
        tooltip=(
            "Drop a mask whose overlap coefficient with a better-scored mask (intersection / "
            "the smaller mask's area) is at least this, so a mask nested in a kept one goes too "
            "(0 = keep all)"
        ),
    )
    return [widget.score_thr, widget.mask_thr, widget.max_det, widget.dedup]


def bands_field() -> LineEdit:
    """The 'Bands' text field (parsed by napari_sam3.imagery.bands.parse_bands)."""
    return LineEdit(
        value="",
        label="Bands",
        tooltip="1 or 3 bands for the model, names (any case) or 1-based indices, e.g. "
        "B08 B04 B03 or 8 4 3; filled in with the scene's true colour when you choose it "
        "(empty: the layer's true colour)",
    )


def prefill_bands(viewer, image, bands) -> None:
    """Keep the Bands field at the chosen scene's bands as the reader describes them (its RGB
    bands, "B04 B03 B02" or "1 2 3"), filled in whenever another scene is chosen."""

    def fill(*_args) -> None:
        bands.value = _layers.default_bands_text(viewer, image.value)

    image.changed.connect(fill)
    fill()


REGION_TIP = "Optional: the last rectangle of this Shapes layer crops the image"


def add_image_fields(
    widget, viewer, shared=None, *, nullable=False, image_tip="", region_tip=REGION_TIP
) -> list:
    """The image picker, its bands and the region (or, with `shared`, the panel's)."""
    if shared is not None:
        return _share(widget, shared, IMAGE_FIELDS)
    widget.image = scene_combo(viewer, nullable=nullable, tooltip=image_tip)
    widget.bands = bands_field()
    prefill_bands(viewer, widget.image, widget.bands)
    widget.region = layer_combo(viewer, Shapes, "Region", nullable=True, tooltip=region_tip)
    return [widget.image, widget.bands, widget.region]


def target_of(widget, image=None, bands=None) -> _layers.ModelImage:
    """What a run of `widget` sends to the model: its image (or `image`) under its "Where"
    choice (a widget without one: the region when chosen, else the whole image)."""
    image = widget.image.value if image is None else image
    bands = widget.bands.value if bands is None else bands
    region = widget.region.value
    where = getattr(widget, "where", None)
    choice = where.value if where is not None else (REGION if region is not None else WHOLE)
    if choice == VIEW:
        if image is None:
            raise InvalidInput("choose an image layer")
        return _layers.model_image(
            widget.viewer, image, bands, window=_layers.view_window(widget.viewer, image)
        )
    if choice == REGION:
        if region is None:
            raise InvalidInput(
                "choose the Shapes layer whose last rectangle is the region, or Where: "
                f"{WHOLE} / {VIEW}"
            )
        return _layers.model_image(widget.viewer, image, bands, region)
    return _layers.model_image(widget.viewer, image, bands)


def add_exemplar_fields(widget, viewer, shared=None) -> list:
    """The exemplar Shapes layer choice, a button for a new one, and the negative-box switch."""
    if shared is not None:
        return _share(widget, shared, EXEMPLAR_FIELDS)
    widget.exemplars = layer_combo(
        viewer,
        Shapes,
        "Exemplars",
        nullable=True,
        tooltip="Boxes on a Shapes layer; its 'positive' feature marks negatives (red)",
    )
    widget.new_exemplars = PushButton(text="New exemplar layer")
    widget.negative = CheckBox(value=False, text="Draw negative boxes")

    def new_exemplars(*_args) -> None:
        layer = new_exemplar_layer(viewer, placed_on=widget.image.value)
        set_negative(layer, bool(widget.negative.value))
        widget.reset_choices()
        widget.exemplars.value = layer

    def negative_changed(*_args) -> None:
        if widget.exemplars.value is not None:
            set_negative(widget.exemplars.value, bool(widget.negative.value))

    widget.new_exemplars.changed.connect(new_exemplars)
    widget.negative.changed.connect(negative_changed)
    return [widget.exemplars, row(widget.new_exemplars, widget.negative)]


def new_exemplar_layer(viewer, name: str = EXEMPLAR_LAYER, placed_on=None) -> Shapes:
    """A Shapes layer for exemplar boxes with a `positive` feature (green +, red -); the one of
    that name when the viewer has it already (pressing the button twice makes one layer)."""
    import pandas as pd

    existing = _layers.layer_named(viewer, name, Shapes)
    if existing is not None:
        if _layers.POSITIVE not in existing.features.columns:
            existing.features[_layers.POSITIVE] = True
            existing.feature_defaults[_layers.POSITIVE] = True
        existing.mode = "add_rectangle"
        viewer.layers.selection.active = existing
        return existing
    kwargs = {} if placed_on is None else _layers.placement(placed_on)
    layer = viewer.add_shapes(
        name=name,
        ndim=2,
        features=pd.DataFrame({_layers.POSITIVE: pd.Series(dtype=bool)}),
        edge_color=POSITIVE_COLOR,
        face_color="transparent",
        edge_width=2,
        **kwargs,
    )
    layer.feature_defaults[_layers.POSITIVE] = True
    layer.mode = "add_rectangle"
    return layer


def set_negative(layer, negative: bool) -> None:
    """The next boxes (or clicks) drawn on `layer` are negative (or positive)."""
    layer.feature_defaults[_layers.POSITIVE] = not negative
    color = NEGATIVE_COLOR if negative else POSITIVE_COLOR
    if isinstance(layer, Shapes):
        layer.current_edge_color = color
    else:
        layer.current_face_color = color
