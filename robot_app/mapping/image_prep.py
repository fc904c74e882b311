"""Camera image preparation for CLIP: fisheye rectification and centre crops (docs/design.md, "Camera images").

The Jackal's cameras are wide-angle (LM-Nav: 170 degrees). Before CLIP sees a frame it is rectified
with the camera's fisheye intrinsics (OpenCV ``cv2.fisheye``, K and D from ``[camera]``) and cut into
``clip_crops`` square crops of side min(H, W) spread across the centre band of the rectified frame
(1 = the centre square; more overlap where needed so that the frame's edges get crops of their own).
Each crop is embedded separately and a node scores a landmark by its best crop (core.grounding takes
the max over a node's images). The raw JPEG stays in the log and the map; this is a pure function of
the config. The VNM gets the raw frame resized, as in its training data.
"""

from __future__ import annotations

import numpy as np


class ImagePrepError(ValueError):
    """Bad ``[camera]`` intrinsics or an image that is not HxWx3 uint8."""


def _check(img) -> np.ndarray:
    img = np.asarray(img)
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8 or min(img.shape[:2]) < 2:
        raise ImagePrepError(f"image: expected (H, W, 3) uint8, got {img.shape} {img.dtype}")
    return img


def rectify(img, *, k: list[float], d: list[float]) -> np.ndarray:
    """Fisheye-rectified copy of ``img`` (same size, same K: a pinhole view of the centre of the lens's
    field, the part CLIP's crops use); ``img`` unchanged when ``k`` is empty.

    Raises
    ------
    ImagePrepError
        ``k`` not [fx, fy, cx, cy] with positive focal lengths, or ``d`` not 4 coefficients.
    """
    img = _check(img)
    if not k:
        return img
    if len(k) != 4 or k[0] <= 0 or k[1] <= 0:
        raise ImagePrepError(f"[camera] fisheye_k: expected [fx, fy, cx, cy] with fx, fy > 0, got {k}")
    if len(d) != 4:
        raise ImagePrepError(f"[camera] fisheye_d: expected 4 coefficients [k1, k2, k3, k4], got {d}")
    import cv2

    kk = np.array([[k[0], 0.0, k[2]], [0.0, k[1], k[3]], [0.0, 0.0, 1.0]])
    dd = np.asarray(d, dtype=np.float64).reshape(4, 1)
    h, w = img.shape[:2]
    m1, m2 = cv2.fisheye.initUndistortRectifyMap(kk, dd, np.eye(3), kk, (w, h), cv2.CV_16SC2)
    return cv2.remap(img, m1, m2, interpolation=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)


def centre_crops(img, n: int = 1) -> list[np.ndarray]:
    """``n`` square crops of side min(H, W) spread evenly across the centre band of ``img``.

    One crop is the centre square (what CLIP's own preprocessing takes). With more, the first starts
    at the left edge, the last ends at the right edge and the others lie evenly between, overlapping
    where ``n`` squares are wider than the frame: then every column of the band is seen at the scale of
    the centre crop, and a landmark at the frame's edge gets a crop of its own. Where ``n`` x H < W (a wide rectified
    fisheye frame and few crops) gaps stay between the squares: take ``n >= W / H``.

    Returns
    -------
    list of ``n`` (S, S, 3) uint8 arrays, S = min(H, W), left to right.

    Raises
    ------
    ImagePrepError
        ``n < 1`` or an image that is not HxWx3 uint8.
    """
    img = _check(img)
    if n < 1:
        raise ImagePrepError(f"clip_crops: expected >= 1, got {n}")
    h, w = img.shape[:2]
    side = int(min(h, w))
    top = (h - side) // 2
    if n == 1:
        left = [(w - side) // 2]
    else:
        left = [int(round(i * (w - side) / (n - 1))) for i in range(n)]
    return [np.ascontiguousarray(img[top:top + side, x:x + side]) for x in left]


def clip_views(img, camera_cfg) -> list[np.ndarray]:
    """What CLIP embeds for one frame: the crops of the rectified frame (``[camera]`` settings)."""
    rect = rectify(img, k=list(camera_cfg.fisheye_k), d=list(camera_cfg.fisheye_d))
    return centre_crops(rect, camera_cfg.clip_crops)
