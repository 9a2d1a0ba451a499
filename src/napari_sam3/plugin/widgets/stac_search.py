"""A STAC API search form: a catalog's items over the area in view, one opened lazily.

The form gathers the search (the API's URL, the collections, the dates, the most cloud cover,
the area: what the canvas shows of a georeferenced image, or anywhere) and lists the items found
(id, date, cloud cover); Open reads the chosen one with the plugin's reader, lazily (only the
blocks shown are fetched). The search itself is :func:`napari_sam3.imagery.stac_search.search_items`.
"""

from __future__ import annotations

from typing import Any

from magicgui.widgets import ComboBox, Container, Label, LineEdit, PushButton, Select, SpinBox

from napari_sam3.core.errors import InvalidInput
from napari_sam3.plugin.widgets._common import notify_error, row

VIEW, ANYWHERE = "Current view", "Anywhere"
NO_CLOUD_LIMIT = 100


class StacSearchWidget(Container):
    """Search a STAC API, list the items, open one."""

    def __init__(self, napari_viewer) -> None:
        super().__init__(labels=True)
        self.viewer = napari_viewer
        self.url = LineEdit(label="STAC API", tooltip="the API's landing page URL")
        self.collections = LineEdit(label="Collections", tooltip="one id, or several: a,b")
        self.dates = LineEdit(
            label="Dates", tooltip="a date or range: 2024-06-01, 2024-06/2024-08, 2024/.."
        )
        self.cloud = SpinBox(
            value=NO_CLOUD_LIMIT,
            min=0,
            max=NO_CLOUD_LIMIT,
            label="Max cloud %",
            tooltip="100: no limit; below it, a CQL2 filter (APIs with the Filter extension)",
        )
        self.area = ComboBox(choices=[VIEW, ANYWHERE], value=VIEW, label="Area")
        self.max_items = SpinBox(value=50, min=1, max=1000, label="Max items")
        self.search_button = PushButton(text="Search")
        self.items = Select(choices=[], label="Items")
        self.open_button = PushButton(text="Open")
        self.status = Label(value="")
        self.found: dict[str, Any] = {}
        self.extend(
            [
                self.url,
                self.collections,
                self.dates,
                row(self.cloud, self.area, label="Cloud, area"),
                self.max_items,
                self.search_button,
                self.items,
                self.open_button,
                self.status,
            ]
        )
        self.search_button.changed.connect(self.search)
        self.open_button.changed.connect(self.open_selected)

    def search(self, _value: Any = None) -> None:
        """Search with the form's values; list what was found."""
        from napari_sam3.imagery.stac_search import search_items

        try:
            result = search_items(
                self.url.value.strip(),
                self.collections.value,
                bbox=view_lonlat(self.viewer) if self.area.value == VIEW else None,
                datetime=self.dates.value.strip() or None,
                filter=(
                    f"eo:cloud_cover<={self.cloud.value}"
                    if self.cloud.value < NO_CLOUD_LIMIT
                    else None
                ),
                max_items=self.max_items.value,
            )
        except Exception as error:  # noqa: BLE001 - shown to the analyst, never a traceback
            self.status.value = notify_error("STAC search", error)
            return
        self.found = dict(zip(result.listing(), result.scenes, strict=True))
        self.items.choices = list(self.found)
        more = " (more match: raise Max items)" if result.truncated else ""
        self.status.value = f"{len(result)} items found{more}"

    def open_selected(self, _value: Any = None) -> list:
        """Open the chosen items (each a lazy layer named by its id)."""
        from napari.layers import Layer

        from napari_sam3.plugin.reader import read_layers

        layers = []
        for line in self.items.value:
            scene = self.found[line]
            try:
                read = read_layers(scene)
                for data, meta, kind in read:
                    name = scene.item.id if len(read) == 1 else f"{scene.item.id} {meta['name']}"
                    layers.append(
                        self.viewer.add_layer(Layer.create(data, {**meta, "name": name}, kind))
                    )
            except Exception as error:  # noqa: BLE001 - shown to the analyst
                self.status.value = notify_error(f"open {scene.item.id}", error)
        return layers


def view_lonlat(viewer) -> tuple[float, float, float, float]:
    """What the canvas shows of the selected (else the top) georeferenced image, as
    (west, south, east, north) in longitude/latitude."""
    from napari.layers import Image
    from rasterio.transform import Affine, array_bounds
    from rasterio.warp import transform_bounds

    from napari_sam3.plugin.georef import georeferencing
    from napari_sam3.plugin.widgets._layers import view_window

    active = viewer.layers.selection.active
    candidates = [active, *reversed(list(viewer.layers))]
    for layer in candidates:
        if not isinstance(layer, Image):
            continue
        crs, transform = georeferencing(layer.metadata)
        if crs is None or transform is None:
            continue
        r0, r1, c0, c1 = view_window(viewer, layer)
        window_transform = transform * Affine.translation(c0, r0)
        west, south, east, north = array_bounds(r1 - r0, c1 - c0, window_transform)
        return tuple(transform_bounds(crs, "EPSG:4326", west, south, east, north))
    raise InvalidInput(
        "Area: Current view needs a georeferenced image layer in view; open one, or choose "
        "Area: Anywhere"
    )
