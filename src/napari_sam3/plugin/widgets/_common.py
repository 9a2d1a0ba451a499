"""What every SAM3 dock widget shares: the connected client, layer pickers, and the job runner.

The Connection widget puts a `Sam3Client` into `STATE`; the other widgets read it from there
(one client per napari process, whichever viewer asks). Library calls run in napari thread
workers, one at a time per widget, with a progress bar and a Cancel button; their errors become
napari notifications carrying the library's message.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from magicgui.widgets import (
    ComboBox,
    Container,
    FloatSpinBox,
    Label,
    ProgressBar,
    PushButton,
    SpinBox,
)
from psygnal import Signal

from napari_sam3.core.errors import InvalidState

# A worker's status line, said once its call has returned.
PAST = {"encoding the image": "image encoded"}
NOT_CONNECTED = (
    "Not connected: choose a model in the connection section at the top of the SAM3 panel "
    "(Plugins > SAM3 for geospatial imagery > SAM3), then Connect."
)


class Sam3State:
    """The client shared by the widgets of this napari process."""

    changed = Signal(object)

    def __init__(self) -> None:
        self._client = None

    @property
    def client(self):
        return self._client

    def set_client(self, client) -> None:
        self._client = client
        self.changed.emit(client)

    def require(self):
        if self._client is None:
            raise InvalidState(NOT_CONNECTED)
        return self._client


STATE = Sam3State()


def describe_client(client) -> str:
    """One line for the widgets' model label."""
    if client is None:
        return NOT_CONNECTED
    manifest = client.manifest
    address = str(client.address)
    if address.startswith("local:"):  # the embedded engine: the repository folder's name
        address = f"embedded ({Path(address[len('local:') :]).name})"
    text = (
        f"{address} · SAM3 {manifest.size} · input {client.image_size} px · "
        f"model {client.model_id[:12]}"
    )
    if manifest.random_weights:
        text += " · RANDOM WEIGHTS: masks are meaningless"
    return text


def summary_line(client) -> tuple[str, str]:
    """The SAM3 panel's one-line connection status, and its tooltip (the whole description)."""
    if client is None:
        return "Not connected: choose a model below, then Connect", NOT_CONNECTED
    full = describe_client(client)
    text = full
    if client.manifest.random_weights:  # said first: the line may be cut on a narrow panel
        text = "RANDOM WEIGHTS · " + full.split(" · RANDOM WEIGHTS")[0]
    return f"Connected: {text}", full


def notify_error(what: str, error: BaseException) -> str:
    """Show `error` as a napari error notification (message only, no traceback)."""
    from napari.utils.notifications import show_error

    message = f"{what}: {error}" if str(error) else f"{what}: {type(error).__name__}"
    show_error(message)
    return message


def reports_errors(what: str):
    """Decorate a button handler: any exception becomes a notification (and the status line)."""

    def decorate(method):
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except Exception as error:  # noqa: BLE001 - shown to the analyst, not swallowed
                self.last_error = error
                self.status.value = notify_error(what, error)
                return None

        return wrapper

    return decorate


def layer_combo(viewer, kinds, label: str, nullable: bool = False, tooltip: str = "") -> ComboBox:
    """A drop-down of the viewer's layers of type `kinds` (kept up to date by `watch_layers`)."""

    def choices(_widget=None):
        return [(layer.name, layer) for layer in viewer.layers if isinstance(layer, kinds)]

    return ComboBox(label=label, choices=choices, nullable=nullable, tooltip=tooltip)


class ScenePicker(ComboBox):
    """The image picker: one entry per scene ("name: 3 bands (B04, B03, B02)" for the band layers
    the reader opened from one raster, else the layer's name). Its value is the scene's first
    band layer; setting any band layer of a scene, or selecting one in napari's layer list,
    chooses that scene."""

    def __init__(
        self, viewer, label: str, nullable: bool = False, tooltip: str = "", follow: bool = True
    ) -> None:
        from napari.layers import Image

        from napari_sam3.plugin.widgets import _layers

        def choices(_widget=None):
            scenes = []
            for layer in viewer.layers:
                if isinstance(layer, Image):
                    scene = _layers.scene_of(viewer, layer)
                    if all(scene is not s for _, s in scenes):
                        scenes.append((_layers.scene_name(viewer, scene), scene))
            return scenes

        self._viewer = viewer
        super().__init__(label=label, choices=choices, nullable=nullable, tooltip=tooltip)
        if follow:
            viewer.layers.selection.events.active.connect(self._follow_selection)

    @property
    def value(self):
        return ComboBox.value.fget(self)

    @value.setter
    def value(self, value) -> None:
        from napari_sam3.plugin.widgets import _layers

        if value is not None and all(value is not c for c in self.choices):
            value = _layers.scene_of(self._viewer, value)
        ComboBox.value.fset(self, value)

    def _follow_selection(self, event) -> None:
        from napari.layers import Image

        layer = getattr(event, "value", None)
        if not isinstance(layer, Image) or self.value is layer:
            return
        try:
            self.reset_choices()
            self.value = layer
        except (RuntimeError, ValueError):  # the widget is gone, or the layer is being removed
            pass


def scene_combo(
    viewer, label: str = "Image", nullable: bool = False, tooltip: str = "", follow: bool = True
):
    """The image picker of the SAM3 widgets (`ScenePicker`); `follow`: selecting an image layer
    in napari's layer list chooses its scene."""
    return ScenePicker(viewer, label, nullable=nullable, tooltip=tooltip, follow=follow)


def number(value: float, span: tuple[float, float], label: str, tooltip: str = "", step=None):
    """A spin box over `span` (min, max): whole numbers for an int `value`, else decimals."""
    kind = SpinBox if isinstance(value, int) else FloatSpinBox
    options = {} if step is None else {"step": step}
    return kind(value=value, min=span[0], max=span[1], label=label, tooltip=tooltip, **options)


def row(*widgets, label: str = "") -> Container:
    return Container(widgets=list(widgets), layout="horizontal", labels=False, label=label)


@dataclass(frozen=True)
class _Failed:
    error: BaseException


def _errors_returned(func: Callable) -> Callable:
    """A generator job whose error comes back as its result. superqt's generator worker takes a
    RuntimeError it returns for a deleted Qt object and emits neither ``errored`` nor
    ``finished``: the widget would wait forever on, e.g., a closed engine's error."""

    @functools.wraps(func)
    def run(*args: Any, **kw: Any):
        try:
            return (yield from func(*args, **kw))
        except Exception as error:  # noqa: BLE001 - shown to the analyst by Job._errored
            return _Failed(error)

    return run


class Job:
    """Runs one library call at a time in a napari thread worker for a widget."""

    def __init__(self, owner: Sam3Widget) -> None:
        self.owner = owner
        self.worker = None
        self.what = ""
        self.note = ""  # the last line the worker yielded (e.g. "features cached")
        self._cancelled = False

    @property
    def running(self) -> bool:
        return self.worker is not None

    def start(
        self,
        what: str,
        func: Callable,
        *args: Any,
        done: Callable | None = None,
        listed: bool = True,
        **kw,
    ):
        """Run `func(*args, **kw)` in a worker; `done(result)` runs on the GUI thread and may
        return the status line to show.

        `func` may be a generator yielding `(done, total)` to drive the progress bar (and the
        run's entry in napari's activity dock, a `napari.utils.progress`). `listed=False`: no
        activity entry, for calls that take a blink (an interactive click: the entry would
        flash, and making one cost 5 ms of the click's main thread).
        """
        from napari.qt.threading import create_worker
        from napari.utils import progress

        if self.running:
            raise InvalidState(f"{self.what} is still running: wait for it or press Cancel")
        self.what = what
        self.note = ""
        self._cancelled = False
        self._close_activity()
        self.activity = progress(total=0, desc=f"SAM3: {what}") if listed else None
        if inspect.isgeneratorfunction(func):
            func = _errors_returned(func)
        worker = create_worker(func, *args, _start_thread=False, _ignore_errors=True, **kw)
        worker.returned.connect(lambda result: self._returned(worker, done, result))
        worker.errored.connect(lambda error: self._errored(worker, error))
        worker.finished.connect(lambda: self._finished(worker))
        if hasattr(worker, "yielded"):
            worker.yielded.connect(self._progress)
        self.worker = worker
        self.owner._busy(True, f"{what}…")
        worker.start()
        return worker

    def cancel(self) -> None:
        """Stop waiting for the running call: its result is dropped and the widget is free."""
        if self.worker is None:
            return
        self.abandon()
        self.owner._busy(False, f"{self.what}: cancelled")

    def abandon(self) -> None:
        """Drop the running call without touching the widget (it may be deleted already)."""
        if self.worker is None:
            return
        self._cancelled = True
        self.worker.quit()
        self.worker = None
        self._close_activity()
        self.owner._job_cancelled()

    def _close_activity(self) -> None:
        activity = getattr(self, "activity", None)
        self.activity = None
        if activity is not None:
            activity.close()

    def _progress(self, value) -> None:
        if isinstance(value, str):  # a line for the status, e.g. "features cached"
            self.note = value
            self.owner.status.value = f"{self.what}: {value}"
            return
        try:
            done, total = value
        except (TypeError, ValueError):
            return
        bar = self.owner.progress
        bar.max = max(int(total), 1)
        bar.value = min(int(done), bar.max)
        if self.activity is not None:
            if self.activity.total != bar.max:
                self.activity.total = bar.max
            self.activity.n = bar.value
            self.activity.refresh()

    def _returned(self, worker, done, result) -> None:
        if isinstance(result, _Failed):
            self._errored(worker, result.error)
            return
        if worker is not self.worker or self._cancelled:
            return
        try:
            message = (done(result) if done is not None else None) or f"{self.what}: done"
            note = PAST.get(self.note, self.note)
            if note and note not in message:
                message = f"{message} ({note})"
            self.owner.status.value = message
            self.owner.last_error = None
        except Exception as error:  # noqa: BLE001 - shown to the analyst
            self.owner.last_error = error
            self.owner.status.value = notify_error(f"{self.what} failed", error)

    def _errored(self, worker, error) -> None:
        if worker is not self.worker or self._cancelled:
            return
        self.owner.last_error = error
        self.owner.status.value = notify_error(f"{self.what} failed", error)

    def _finished(self, worker) -> None:
        if worker is not self.worker:
            return
        self.worker = None
        self._close_activity()
        self.owner._busy(False, self.owner.status.value)
        self.owner._job_finished()


class Sam3Widget(Container):
    """Base of the SAM3 dock widgets: model line, status line, progress bar and Cancel."""

    def __init__(self, napari_viewer) -> None:
        super().__init__(labels=True)
        self.viewer = napari_viewer
        self.last_error: BaseException | None = None
        self.model = Label(value=describe_client(STATE.client), label="Model")
        self.model.native.setWordWrap(True)
        self.status = Label(value="", label="Status")
        self.status.native.setWordWrap(True)
        self.progress = ProgressBar(min=0, max=0, visible=False, label="Progress")
        self.cancel_button = PushButton(text="Cancel", visible=False)
        self.cancel_button.changed.connect(self._cancel)
        self.job = Job(self)
        self._closed = False
        self._controls: list = []
        STATE.changed.connect(self._client_changed)
        # When Qt deletes the widget (its dock or the viewer closed), stop listening and drop the
        # running call: its result must not land in a viewer nobody is watching half-built.
        self.native.destroyed.connect(_forget(self._client_changed))
        self.native.destroyed.connect(_abandon(self.job))
        # Its dock removed or closed (napari un-parents the widget): cancel the running call too.
        self._removal_filter = _RemovalFilter(self)
        self.native.installEventFilter(self._removal_filter)
        events = napari_viewer.layers.events
        for event in (events.inserted, events.removed, events.moved, events.reordered):
            event.connect(self._layers_changed)

    def _footer(self) -> None:
        """Append the shared status rows; call at the end of a subclass's __init__."""
        self.extend([self.model, self.status, self.progress, self.cancel_button])

    def _layers_changed(self, *_args) -> None:
        self.reset_choices()

    def _client_changed(self, client) -> None:
        self.model.value = describe_client(client)

    def _job_finished(self) -> None:
        """Called on the GUI thread when a job has finished (after its result was shown)."""

    def _removed(self) -> None:
        """The widget left its dock (the dock closed or was removed): nothing may land now."""
        self.job.cancel()

    def _job_cancelled(self) -> None:
        """Called when the analyst cancels the running job."""

    def _cancel(self, *_args) -> None:
        self.job.cancel()

    def _busy(self, busy: bool, message: str) -> None:
        for control in self._controls:
            control.enabled = not busy
        self.progress.min, self.progress.max, self.progress.value = 0, 0, 0
        self.progress.visible = busy
        self.cancel_button.visible = busy
        self.status.value = message

    @property
    def client(self):
        return STATE.require()

    def close(self) -> None:
        STATE.changed.disconnect(self._client_changed)
        self.job.cancel()
        super().close()


def _removal_filter_class():
    from qtpy.QtCore import QEvent, QObject

    class RemovalFilter(QObject):
        def __init__(self, owner) -> None:
            super().__init__()
            self.owner = owner

        def eventFilter(self, obj, event) -> bool:  # noqa: N802 - Qt's name
            if event.type() == QEvent.Type.ParentChange and obj.parent() is None:
                self.owner._removed()
            return False

    return RemovalFilter


def _RemovalFilter(owner):  # noqa: N802 - a class made lazily (no Qt import at module load)
    return _removal_filter_class()(owner)


def _abandon(job: Job):
    def abandon(*_args) -> None:
        job.owner._closed = True
        job.abandon()

    return abandon


def _forget(callback):
    def disconnect(*_args) -> None:
        STATE.changed.disconnect(callback)

    return disconnect
