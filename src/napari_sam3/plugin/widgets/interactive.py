"""Interactive: clicks, a box and a painted seed mask refine one object; accept it as a new label.

The image is encoded once (Start, or the first prompt); each click on the Points layer, box on the
Shapes layer or "Refine with seed mask" sends only the prompt. The 3 candidates and their
predicted IoU are listed; the chosen one is previewed on the "SAM3 candidate" layer and Accept
writes it into the target labels layer as a new id (never over existing labels unless asked;
`_layers.paint_new_labels`, the results table's merge path), which Undo accept, or Ctrl+Z on that
layer, takes back.
"""

from __future__ import annotations

import weakref

import numpy as np
import pandas as pd
from magicgui.widgets import CheckBox, Label, PushButton, RadioButtons, SpinBox
from napari.components import ViewerModel
from napari.layers import Labels, Points, Shapes
from napari.utils.events import Event

from napari_sam3.core.errors import InvalidInput, InvalidState
from napari_sam3.plugin.georef import crop_metadata
from napari_sam3.plugin.widgets import _layers
from napari_sam3.plugin.widgets._common import (
    Sam3Widget,
    layer_combo,
    notify_error,
    reports_errors,
    row,
)
from napari_sam3.plugin.widgets._fields import (
    POSITIVE_COLOR,
    add_image_fields,
    set_negative,
    target_of,
)

CANDIDATE_LAYER = "SAM3 candidate"
ENCODING = "Encoding the image"
EVERYTHING = "Segmenting everything"
_LISTED = (ENCODING, EVERYTHING)  # long enough to show in napari's activity dock
CLICKS_LAYER = "SAM3 clicks"
BOX_LAYER = "SAM3 box"
SEED_LAYER = "SAM3 seed"
OBJECTS_LAYER = "SAM3 objects"

# napari actions (napari's "Viewer key bindings" under File > Preferences > Shortcuts, where they
# can be changed): name -> (default key, description, the InteractiveWidget method they call).
# Shift + a letter no napari layer binds, so they work whichever layer is selected.
SHORTCUTS = {
    "napari-sam3:positive_clicks": ("Shift-G", "SAM3: next clicks add positive points", "positive"),
    "napari-sam3:negative_clicks": (
        "Shift-N",
        "SAM3: next clicks add negative points",
        "negative_clicks",
    ),
    "napari-sam3:accept": ("Shift-C", "SAM3: accept the chosen candidate", "accept"),
    "napari-sam3:reset": ("Shift-R", "SAM3: reset the prompts", "reset"),
    "napari-sam3:undo_prompt": ("Shift-Z", "SAM3: undo the last prompt", "undo_prompt"),
    "napari-sam3:next_candidate": ("Shift-X", "SAM3: show the next candidate", "next_candidate"),
    "napari-sam3:undo_accept": ("Shift-U", "SAM3: undo the last accept", "undo_accept"),
}
_LIVE: list = []  # weak references to the InteractiveWidgets the keys act on, newest last


def register_shortcuts() -> None:
    """Register SHORTCUTS with napari's action manager, each bound to its default key unless
    napari's settings hold the analyst's own choice for it. Registering again (every widget
    does) binds the keys the actions have anew, on a keymap napari reset since."""
    from napari.settings import get_settings
    from napari.utils.action_manager import action_manager

    chosen = get_settings().shortcuts.shortcuts
    for name, (key, text, method) in SHORTCUTS.items():
        action_manager.register_action(name, _action(method), text, ViewerModel)
        if name not in chosen:
            action_manager.bind_shortcut(name, key)


def shortcut_keys(name: str) -> list[str]:
    """The keys bound to action `name` now (the default, or the analyst's from napari's
    preferences), as napari writes them (e.g. "Shift+G")."""
    from napari.utils.action_manager import action_manager

    return [str(key) for key in action_manager._shortcuts.get(name, [])]


def shortcut_help() -> str:
    """The tooltip listing the Interactive keys."""
    lines = [
        f"{' / '.join(shortcut_keys(name)) or '(no key)'}: {text.removeprefix('SAM3: ')}"
        for name, (_key, text, _method) in SHORTCUTS.items()
    ]
    return "\n".join(
        ["Keys (canvas focused; change them in File > Preferences > Shortcuts):", *lines]
    )


def _action(method: str):
    def command(viewer: ViewerModel) -> None:
        widget = _widget_for(viewer)
        if widget is None:
            from napari.utils.notifications import show_info

            show_info("SAM3 keys: open the SAM3 panel first (its Interactive tab uses them)")
            return
        getattr(widget, method)()

    command.__name__ = f"sam3_{method}"
    return command


def _widget_for(viewer):
    """The newest InteractiveWidget of `viewer` still alive."""
    for ref in reversed(_LIVE):
        widget = ref()
        if widget is not None and _same(widget.viewer, viewer) and not widget._closed:
            return widget
    return None


def _same(a, b) -> bool:
    """The same viewer (napari hands plugin widgets a proxy of it)."""
    return getattr(a, "__wrapped__", a) is getattr(b, "__wrapped__", b)


def is_prompt_layer(layer) -> bool:
    """True for a prompt layer the plugin made (clicks, box, seed): only those are ever cleared."""
    return _layers._record(layer).get("kind") == "prompt"


def _prompt_metadata() -> dict:
    return _layers.with_record(None, "prompt")


class InteractiveWidget(Sam3Widget):
    """Clicks, a box and a seed refine one object; Accept writes it into a labels layer.

    Nothing the analyst owns is cleared: starting the next object empties only the prompt layers
    the plugin made ("SAM3 clicks", "SAM3 box", "SAM3 seed"); a layer of the analyst's chosen
    as clicks, box or seed is read, never written.
    """

    def __init__(self, napari_viewer, shared=None) -> None:
        super().__init__(napari_viewer)
        self.session = None
        self.target_image: _layers.ModelImage | None = None
        self.preview: Labels | None = None
        self._queue: list = []
        self._accepts: list = []
        self._prompt_log: list = []
        self._watched: dict[str, object] = {}
        self._showing = False

        image_fields = add_image_fields(self, napari_viewer, shared)
        self.clicks = layer_combo(napari_viewer, Points, "Clicks", nullable=True)
        self.box = layer_combo(napari_viewer, Shapes, "Box", nullable=True)
        self.seed = layer_combo(napari_viewer, Labels, "Seed mask", nullable=True)
        self.target = layer_combo(
            napari_viewer,
            Labels,
            "Accept into",
            nullable=True,
            tooltip="Your labels layer; empty: a new 'SAM3 objects' layer",
        )
        self.prompt_layers_button = PushButton(text="New prompt layers")
        self.start_button = PushButton(text="Start (encode image)")
        self.negative = CheckBox(value=False, text="Negative clicks")
        self.seed_button = PushButton(text="Refine with seed mask")
        self.candidate = RadioButtons(choices=self._candidate_choices, label="Candidates")
        self.overwrite = CheckBox(value=False, text="Accept over existing labels")
        self.accept_button = PushButton(text="Accept")
        self.undo_button = PushButton(text="Undo prompt")
        self.reset_button = PushButton(text="Reset")
        self.undo_accept_button = PushButton(text="Undo accept")
        self.points_per_side = SpinBox(value=16, min=2, max=64, label="Points per side")
        self.everything_button = PushButton(text="Everything")
        register_shortcuts()
        self.shortcuts = Label(value="Keys: Shift + G, N, C, R, Z, X, U (hover)", label="Shortcuts")
        self.shortcuts.tooltip = shortcut_help()
        for button, name in (
            (self.accept_button, "accept"),
            (self.reset_button, "reset"),
            (self.undo_button, "undo_prompt"),
            (self.undo_accept_button, "undo_accept"),
        ):
            button.tooltip = _with_keys(SHORTCUTS[f"napari-sam3:{name}"][1], f"napari-sam3:{name}")
        self.negative.tooltip = (
            f"{_with_keys('positive clicks', 'napari-sam3:positive_clicks')}, "
            f"{_with_keys('negative clicks', 'napari-sam3:negative_clicks')}"
        )

        self.prompt_layers_button.changed.connect(self.new_prompt_layers)
        self.start_button.changed.connect(self.start)
        self.negative.changed.connect(self._negative_changed)
        self.seed_button.changed.connect(self.refine_with_seed)
        self.candidate.changed.connect(self._show_candidate)
        self.accept_button.changed.connect(self.accept)
        self.undo_button.changed.connect(self.undo_prompt)
        self.reset_button.changed.connect(self.reset)
        self.undo_accept_button.changed.connect(self.undo_accept)
        self.everything_button.changed.connect(self.everything)
        self.clicks.changed.connect(self._watch_layers)
        self.box.changed.connect(self._watch_layers)
        self.extend(
            [
                *image_fields,
                self.clicks,
                self.box,
                self.seed,
                self.target,
                row(self.prompt_layers_button, self.start_button),
                row(self.negative, self.seed_button),
                self.candidate,
                self.overwrite,
                row(self.accept_button, self.undo_accept_button),
                row(self.undo_button, self.reset_button),
                row(self.points_per_side, self.everything_button),
                self.shortcuts,
            ]
        )
        self._footer()
        self._controls = [self.start_button, self.everything_button]
        self.reset_choices()
        self._watch_layers()
        _LIVE[:] = [ref for ref in _LIVE if ref() is not None]
        _LIVE.append(weakref.ref(self))

    def reset_choices(self, *_args) -> None:
        """Refresh the layer pickers; the candidates change only with a new result."""
        for widget in self:
            if widget is not self.candidate and hasattr(widget, "reset_choices"):
                widget.reset_choices()

    def close(self) -> None:
        self._closed = True  # the keys no longer act on it
        self._unwatch()
        super().close()

    # -- layers -----------------------------------------------------------------------------
    def new_prompt_layers(self, *_args) -> None:
        """Points (clicks), Shapes (box) and Labels (seed) layers placed on the image; the
        plugin's own layers of those names when the viewer has them (never a second set)."""
        image = self.image.value
        if image is None:
            self.status.value = notify_error("New prompt layers", InvalidInput("choose an image"))
            return
        place = _layers.placement(image)
        clicks = self._own_layer(CLICKS_LAYER, Points, image)
        if clicks is None:
            clicks = self.viewer.add_points(
                ndim=2,
                name=CLICKS_LAYER,
                features=pd.DataFrame({_layers.POSITIVE: pd.Series(dtype=bool)}),
                face_color=POSITIVE_COLOR,
                size=max(_layers.image_shape(image)) / 100,
                metadata=_prompt_metadata(),
                **place,
            )
            clicks.feature_defaults[_layers.POSITIVE] = True
        set_negative(clicks, bool(self.negative.value))
        box = self._own_layer(BOX_LAYER, Shapes, image)
        if box is None:
            box = self.viewer.add_shapes(
                ndim=2,
                name=BOX_LAYER,
                edge_color="yellow",
                face_color="transparent",
                metadata=_prompt_metadata(),
                **place,
            )
        seed = self._own_layer(SEED_LAYER, Labels, image)
        if seed is None:
            seed = self.viewer.add_labels(
                np.zeros(_layers.image_shape(image), np.int32),
                name=SEED_LAYER,
                metadata=_prompt_metadata(),
                **place,
            )
        self.reset_choices()
        self.clicks.value, self.box.value, self.seed.value = clicks, box, seed
        self.viewer.layers.selection.active = clicks
        clicks.mode = "add"

    def _own_layer(self, name: str, kind, image):
        """The plugin's prompt layer `name` when it exists and lies on `image`'s pixels."""
        layer = _layers.layer_named(self.viewer, name, kind)
        if layer is None or not is_prompt_layer(layer):
            return None
        if isinstance(layer, Labels):
            try:
                _layers.check_same_grid(layer, image)
            except ValueError:
                return None
        elif not np.allclose(layer.scale[-2:], image.scale[-2:]) or not np.allclose(
            layer.translate[-2:], image.translate[-2:]
        ):
            return None
        return layer

    def _watch_layers(self, *_args) -> None:
        self._unwatch()
        for key, layer in (("clicks", self.clicks.value), ("box", self.box.value)):
            if layer is not None:
                layer.events.data.connect(self._on_data)
                self._watched[key] = layer

    def _unwatch(self) -> None:
        for layer in self._watched.values():
            try:
                layer.events.data.disconnect(self._on_data)
            except (TypeError, ValueError, RuntimeError):
                pass
        self._watched.clear()

    def _on_data(self, event: Event) -> None:
        action = str(getattr(event, "action", ""))
        layer = event.source
        indices = list(getattr(event, "data_indices", ()) or ())
        if isinstance(layer, Points) and action == "added":
            for index in indices:
                self._enqueue_point(layer, index % len(layer.data))
        elif isinstance(layer, Shapes) and action in ("added", "changed") and len(layer.data):
            index = (indices[-1] if indices else -1) % len(layer.data)
            self._enqueue_box(layer, index, added=action == "added")

    def _negative_changed(self, *_args) -> None:
        if self.clicks.value is not None:
            set_negative(self.clicks.value, bool(self.negative.value))

    def toggle_negative(self) -> None:
        self.negative.value = not self.negative.value

    def positive(self) -> None:
        """The next clicks add positive points (the Shift-G key)."""
        self._clicking(negative=False)

    def negative_clicks(self) -> None:
        """The next clicks add negative points (the Shift-N key)."""
        self._clicking(negative=True)

    def _clicking(self, negative: bool) -> None:
        """Negative (or positive) clicks, on the clicks layer (made if there is none), selected
        and in add mode: the next click on the canvas is that point."""
        self.negative.value = negative
        clicks = self.clicks.value
        if clicks is None:
            self.new_prompt_layers()
            clicks = self.clicks.value
        if clicks is not None:
            self.viewer.layers.selection.active = clicks
            clicks.mode = "add"

    # -- the prompt queue -------------------------------------------------------------------
    def _enqueue(self, what: str, make) -> None:
        """Run prompts one after another; `make()` (GUI thread) returns the worker function."""
        self._queue.append((what, make))
        self._pump()

    def _pump(self) -> None:
        while self._queue and not self.job.running:
            what, make = self._queue.pop(0)
            try:
                work, done = make()
            except Exception as error:  # noqa: BLE001 - shown to the analyst
                self.last_error = error
                self.status.value = notify_error(f"{what} failed", error)
                continue
            self.job.start(what, work, done=done, listed=what in _LISTED)

    def _job_finished(self) -> None:
        self._pump()

    def _job_cancelled(self) -> None:
        self._queue.clear()

    def _ensure_session(self) -> None:
        if self.session is None and not any(w == ENCODING for w, _ in self._queue):
            self._enqueue(ENCODING, self._make_start)

    @reports_errors("Encoding the image failed")
    def start(self, *_args) -> None:
        self.session = None
        self._enqueue(ENCODING, self._make_start)

    def _make_start(self):
        client = self.client
        target = target_of(self)

        def work():
            prepared = yield from _layers.prepared_with_status(client, target)
            return client.interactive(prepared)

        def done(session):
            self.session, self.target_image = session, target
            self._prompt_log.clear()
            self._set_result(None)
            return f"{target.description} encoded: click, draw a box or paint a seed"

        return work, done

    def _session_call(self, call, log_entry=None):
        """Worker function and done-callback for one prompt on the current session."""
        session = self.session
        if session is None:
            raise InvalidState("the image is not encoded (press Start)")

        def done(frame):
            if log_entry is not None:
                self._prompt_log.append(log_entry)
            self._set_result(frame)
            best = float(frame["iou"].iloc[0]) if len(frame) else float("nan")
            return f"{len(frame)} candidates, best IoU {best:.3f}"

        return (lambda: call(session)), done

    def _enqueue_point(self, layer, index: int) -> None:
        coords = np.array(layer.data[index], dtype=np.float64)
        positive = bool(_layers.shape_labels(layer)[index])
        self._ensure_session()

        def make():
            xy = _layers.point_xy(coords, layer, self._require_target())
            return self._session_call(
                lambda s: s.add_point(xy, positive=positive), ("point", layer, index)
            )

        self._enqueue("Adding a click", make)

    def _enqueue_box(self, layer, index: int, added: bool) -> None:
        vertices = np.array(layer.data[index], dtype=np.float64)
        self._ensure_session()

        def make():
            box = _layers.box_from_vertices(vertices, layer, self._require_target())
            return self._session_call(
                lambda s: s.add_box(box), ("box", layer, index if added else None)
            )

        self._enqueue("Adding a box", make)

    @reports_errors("Refining with the seed mask failed")
    def refine_with_seed(self, *_args) -> None:
        if self.seed.value is None:
            raise InvalidInput("choose the Labels layer you painted the seed on")
        self._ensure_session()

        def make():
            mask = _layers.crop_of(self.seed.value, self._require_target()) > 0
            return self._session_call(lambda s: s.add_mask(mask), ("mask", None, None))

        self._enqueue("Refining with the seed mask", make)

    def _require_target(self) -> _layers.ModelImage:
        if self.target_image is None:
            raise InvalidState("the image is not encoded (press Start)")
        return self.target_image

    # -- candidates -------------------------------------------------------------------------
    def _candidate_choices(self, _widget=None):
        result = None if self.session is None else self.session.result
        if result is None or len(result) == 0:
            return [("(no candidate yet)", -1)]
        return [(f"{i + 1}: IoU {iou:.3f}", i) for i, iou in enumerate(result["iou"])]

    def _set_result(self, frame) -> None:
        # Rebuilding the choices re-checks a button, which would show the candidate once more:
        # the preview is updated once, below.
        with self.candidate.changed.blocked():
            self.candidate.reset_choices()
            self.candidate.value = 0 if frame is not None and len(frame) else -1
        self._show_candidate()

    def candidate_mask(self) -> np.ndarray | None:
        """The chosen candidate as a bool mask of the encoded image (crop), or None."""
        result = None if self.session is None else self.session.result
        index = self.candidate.value
        if result is None or index is None or index < 0 or index >= len(result):
            return None
        return np.asarray(result["mask"].iloc[index], dtype=bool)

    def _show_candidate(self, *_args) -> None:
        target = self.target_image
        if target is None or self._showing:
            return
        self._showing = True  # adding the preview layer resets the choices, which calls us
        try:
            self._update_preview(target)
        finally:
            self._showing = False

    def _update_preview(self, target) -> None:
        mask = self.candidate_mask()
        live = self.preview is not None and self.preview in self.viewer.layers
        if live:
            shown = self.preview.data
            if (
                isinstance(shown, np.ndarray)
                and shown.shape == tuple(target.shape)
                and shown.dtype == np.uint8
            ):
                # In place: a new array makes napari re-check every layer's extent and the
                # dims. With the single update in _set_result, a click's main-thread part went
                # 60 -> 13-15 ms at full size (bench/bench_napari_click.py).
                np.copyto(shown, 0 if mask is None else mask)
                self.preview.refresh(extent=False)
                return
        data = np.zeros(target.shape, np.uint8) if mask is None else mask.astype(np.uint8)
        if live:
            self.preview.data = data
            return
        self.preview = self.viewer.add_labels(
            data,
            name=CANDIDATE_LAYER,
            opacity=0.6,
            **_layers.placement(target.layer, target.offset),
        )
        self.reset_choices()

    def next_candidate(self) -> None:
        choices = [c for c in self._candidate_choices() if c[1] >= 0]
        if choices:
            self.candidate.value = (self.candidate.value + 1) % len(choices)

    # -- accept / undo ----------------------------------------------------------------------
    @reports_errors("Accept failed")
    def accept(self, *_args) -> None:
        if self.job.running:
            raise InvalidState("wait for the running prompt to finish")
        mask = self.candidate_mask()
        if mask is None:
            raise InvalidInput("no candidate to accept: click, draw a box or paint a seed first")
        target = self._require_target()
        layer = self._target_layer(target)
        rr, cc = np.nonzero(mask)
        iou = float(self.session.result["iou"].iloc[self.candidate.value])
        info = {"score": iou, "prompt_kind": "interactive", "source": target.description}
        painted = _layers.paint_new_labels(
            layer,
            [(rr + target.offset[0], cc + target.offset[1], info)],
            overwrite=bool(self.overwrite.value),
            # The analyst's own layer on this image: the image's georeferencing, so the
            # GeoTIFF/GeoPackage writers place it.
            georeference=crop_metadata(target.layer.metadata, 0, 0),
        )
        if not painted.ids:
            raise InvalidInput("the candidate lies wholly on existing labels (tick 'Accept over')")
        self._accepts.append(painted)
        self.reset()  # the next object: clears the plugin's prompt layers only
        (new_id,) = painted.ids
        self.status.value = (
            f"accepted as label {new_id} in '{layer.name}' (Undo accept or Ctrl+Z on the layer "
            "takes it back)"
        )

    def _target_layer(self, target: _layers.ModelImage) -> Labels:
        layer = self.target.value
        if layer is None:
            layer = self.viewer.add_labels(
                np.zeros(_layers.image_shape(target.layer), np.int32),
                name=OBJECTS_LAYER,
                metadata=_layers.with_record(
                    crop_metadata(target.layer.metadata, 0, 0),
                    "result",
                    image_layer=target.layer.name,
                ),
                features=pd.DataFrame(columns=_layers.FEATURE_COLUMNS),
                **_layers.placement(target.layer),
            )
            self.reset_choices()
            self.target.value = layer
            return layer
        _layers.check_same_grid(layer, target.layer)
        if layer.data.ndim != 2:
            raise InvalidInput(f"{layer.name} is not 2-D")
        return layer

    @reports_errors("Undo accept failed")
    def undo_accept(self, *_args) -> None:
        if not self._accepts:
            raise InvalidInput("nothing accepted to undo")
        painted = self._accepts.pop()
        _layers.take_back(painted)
        (new_id,) = painted.ids
        self.status.value = f"label {new_id} removed from '{painted.layer.name}'"

    @reports_errors("Undo failed")
    def undo_prompt(self, *_args) -> None:
        if self.job.running:
            raise InvalidState("wait for the running prompt to finish")
        if self.session is None:
            raise InvalidInput("nothing to undo")
        frame = self.session.undo()
        if self._prompt_log:
            kind, layer, index = self._prompt_log.pop()
            if layer is not None and index is not None and index < len(layer.data):
                with layer.events.data.blocker(self._on_data):
                    if isinstance(layer, Points):
                        layer.data = np.delete(np.asarray(layer.data), index, axis=0)
                    else:
                        layer.selected_data = {index}
                        layer.remove_selected()
        self._set_result(frame)
        self.status.value = "last prompt undone"

    @reports_errors("Reset failed")
    def reset(self, *_args) -> None:
        """Forget the prompts; empty the plugin's own prompt layers (an analyst's layer chosen
        as clicks, box or seed stays as it is)."""
        if self.session is not None:
            self.session.reset()
        self._prompt_log.clear()
        for layer in (self.clicks.value, self.box.value):
            if layer is not None and is_prompt_layer(layer) and len(layer.data):
                with layer.events.data.blocker(self._on_data):
                    if isinstance(layer, Points):
                        layer.data = np.zeros((0, 2))
                    else:
                        layer.data = []
        seed = self.seed.value
        if seed is not None and is_prompt_layer(seed) and seed is not self.target.value:
            seed.data = np.zeros_like(seed.data)
        self._set_result(None)
        self.status.value = "prompts cleared"

    # -- everything -------------------------------------------------------------------------
    @reports_errors("Everything failed")
    def everything(self, *_args) -> None:
        self._ensure_session()
        points = int(self.points_per_side.value)

        def make():
            target = self._require_target()
            session = self.session

            def done(frame):
                labels, features = _layers.results_to_labels(
                    frame, target.shape, target.description
                )
                kwargs = _layers.result_layer_kwargs(
                    target, "SAM3 everything", features, prompt="everything"
                )
                self.everything_layer = self.viewer.add_labels(labels, **kwargs)
                return f"{len(frame)} object(s) -> layer '{self.everything_layer.name}'"

            return (lambda: session.everything(points_per_side=points)), done

        self._enqueue(EVERYTHING, make)


def _with_keys(text: str, name: str) -> str:
    keys = " / ".join(shortcut_keys(name))
    return f"{text.removeprefix('SAM3: ')} ({keys})" if keys else text
