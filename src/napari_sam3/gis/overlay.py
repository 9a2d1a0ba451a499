"""Detections drawn on the picture an analyst looks at: fills, outlines, boxes and captions.

Overlaps follow the label images' rule (:func:`~napari_sam3.masks.paint.score_order`): row ``i`` is
drawn in colour ``i``, the higher score on top.
"""

from __future__ import annotations

import colorsys
import os
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw, ImageFont

from napari_sam3.core.errors import InvalidInput
from napari_sam3.core.files import atomic_path
from napari_sam3.masks.paint import paint_frame
from napari_sam3.masks.protocol import Mask

__all__ = ["overlay_image", "overlay_png"]


def overlay_image(
    rgb: np.ndarray,
    df: pd.DataFrame,
    alpha: float = 0.45,
    boxes: bool = True,
    text: bool = True,
) -> np.ndarray:
    """The RGB picture an analyst looks at: each mask blended in its own colour, outlined, boxed.

    Args:
        rgb: uint8 ``(rows, cols, 3)`` (or ``(rows, cols)`` grey) in the masks' pixels, e.g.
            ``client.prepare(path).rgb``.
        df: result DataFrame; row ``i`` is drawn in colour ``i`` (overlaps as in
            :func:`~napari_sam3.gis.vector.masks_to_labels`).
        alpha: opacity of the mask fill, 0..1.
        boxes: draw each detection's ``box`` (its mask's bounding box if there is no ``box``).
        text: write ``keyword score`` above each box.
    """
    arr = np.asarray(rgb)
    if arr.dtype != np.uint8 or not (arr.ndim == 2 or (arr.ndim == 3 and arr.shape[2] == 3)):
        raise InvalidInput(
            f"overlay expects uint8 RGB (rows, cols, 3) or grey (rows, cols), got {arr.dtype} "
            f"{arr.shape}; stretch rasters with napari_sam3.imagery.stretch.to_model_rgb first."
        )
    if arr.ndim == 2:
        arr = np.repeat(arr[:, :, np.newaxis], 3, axis=2)
    alpha = float(alpha)
    if not 0.0 <= alpha <= 1.0:
        raise InvalidInput(f"alpha is an opacity between 0 and 1, got {alpha}.")
    labels, masks, order = paint_frame(df, arr.shape[:2], "overlay")
    palette = np.vstack([np.zeros((1, 3)), _palette(len(df))]).astype(np.float32)

    out = arr.astype(np.float32)
    inside = labels > 0
    out[inside] = (1 - alpha) * out[inside] + alpha * palette[labels[inside]]
    edge = inside & _boundary(labels)
    out[edge] = palette[labels[edge]]
    image = Image.fromarray(np.clip(np.rint(out), 0, 255).astype(np.uint8))
    if (boxes or text) and len(df):
        _draw_boxes(image, df, masks, order, palette, boxes, text)
    return np.asarray(image)


def overlay_png(
    rgb: np.ndarray,
    df: pd.DataFrame,
    path: str | os.PathLike,
    alpha: float = 0.45,
    overwrite: bool = False,
) -> Path:
    """Write :func:`overlay_image` of ``rgb`` and ``df`` to a ``.png`` file, atomically."""
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise InvalidInput(f"overlay_png writes PNG; name the file .png, got {path.name!r}.")
    picture = overlay_image(rgb, df, alpha=alpha)
    with atomic_path(path, overwrite) as tmp:
        Image.fromarray(picture).save(tmp, format="PNG")
    return path


def _palette(n: int) -> np.ndarray:
    """``n`` distinct saturated colours (golden-ratio hue steps), 0..255."""
    colours = [
        colorsys.hsv_to_rgb((0.08 + i * 0.618033988749895) % 1.0, 0.85, 1.0 - 0.25 * ((i // 7) % 2))
        for i in range(n)
    ]
    return np.asarray(colours, dtype=np.float32).reshape(n, 3) * 255


def _boundary(labels: np.ndarray) -> np.ndarray:
    """Pixels whose 4-neighbour (or the image edge) has a different label."""
    edge = np.zeros(labels.shape, dtype=bool)
    edge[:-1] |= labels[:-1] != labels[1:]
    edge[1:] |= labels[1:] != labels[:-1]
    edge[:, :-1] |= labels[:, :-1] != labels[:, 1:]
    edge[:, 1:] |= labels[:, 1:] != labels[:, :-1]
    edge[[0, -1], :] = True
    edge[:, [0, -1]] = True
    return edge


def _draw_boxes(
    image: Image.Image,
    df: pd.DataFrame,
    masks: list[Mask],
    order: np.ndarray,
    palette: np.ndarray,
    boxes: bool,
    text: bool,
) -> None:
    draw = ImageDraw.Draw(image)
    cols, rows = image.size
    width = max(1, round(max(rows, cols) / 400))
    font = _font(max(10, round(max(rows, cols) / 70)))
    box_column = df["box"].to_list() if "box" in df.columns else None
    for i in order:
        colour = tuple(int(v) for v in palette[i + 1])
        if box_column is not None and box_column[i] is not None:
            x1, y1, x2, y2 = (float(v) for v in np.asarray(box_column[i]).reshape(4))
        elif masks[i].area:
            x1, y1, x2, y2 = masks[i].bbox
        else:
            continue
        # Boxes are pixel edges; PIL's rectangle includes its far corner pixel.
        left, top = round(x1), round(y1)
        right, bottom = max(left, round(x2) - 1), max(top, round(y2) - 1)
        if boxes:
            draw.rectangle([left, top, right, bottom], outline=colour, width=width)
        if text:
            caption = _caption(df, i)
            if caption:
                tl, tt, tr, tb = draw.textbbox((0, 0), caption, font=font)
                y = top - (tb - tt) - 2 * width if top >= (tb - tt) + 2 * width else top
                draw.rectangle(
                    [left, y, left + (tr - tl) + 2 * width, y + (tb - tt) + 2 * width], fill=colour
                )
                ink = (0, 0, 0) if _luma(colour) > 140 else (255, 255, 255)
                draw.text((left + width - tl, y + width - tt), caption, fill=ink, font=font)


def _luma(colour: tuple[int, ...]) -> float:
    return 0.299 * colour[0] + 0.587 * colour[1] + 0.114 * colour[2]


def _caption(df: pd.DataFrame, i: int) -> str:
    parts = []
    if "keyword" in df.columns and isinstance(df["keyword"].iloc[i], str):
        parts.append(df["keyword"].iloc[i])
    if "score" in df.columns:
        score = pd.to_numeric(df["score"].iloc[i], errors="coerce")
        if np.isfinite(score):
            parts.append(f"{float(score):.2f}")
    return " ".join(parts)


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, ImportError, OSError):  # Pillow without FreeType: the fixed bitmap font
        return ImageFont.load_default()
