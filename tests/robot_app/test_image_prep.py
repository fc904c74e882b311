"""Fisheye rectification and CLIP crops (docs/design.md, "Camera images")."""

import numpy as np
import pytest

from robot_app.config import CameraConfig
from robot_app.mapping.image_prep import ImagePrepError, centre_crops, clip_views, rectify


def checkerboard(h=240, w=320, sq=20):
    yy, xx = np.mgrid[0:h, 0:w]
    v = (((yy // sq) + (xx // sq)) % 2 * 255).astype(np.uint8)
    return np.stack([v, v, v], axis=2)


def test_no_intrinsics_means_no_change():
    img = checkerboard()
    assert rectify(img, k=[], d=[]) is img or np.array_equal(rectify(img, k=[], d=[]), img)


def test_fisheye_rectification_straightens_a_distorted_view():
    import cv2

    img = checkerboard()
    k = [150.0, 150.0, 160.0, 120.0]
    d = [0.1, 0.01, 0.0, 0.0]
    kk = np.array([[k[0], 0, k[2]], [0, k[1], k[3]], [0, 0, 1.0]])
    # distort the straight board with the same model, then rectify it back
    h, w = img.shape[:2]
    pts = np.stack(np.meshgrid(np.arange(w), np.arange(h)), axis=-1).reshape(-1, 1, 2).astype(np.float64)
    und = cv2.fisheye.undistortPoints(pts, kk, np.array(d).reshape(4, 1), P=kk).reshape(h, w, 2).astype(np.float32)
    distorted = cv2.remap(img, und[..., 0], und[..., 1], cv2.INTER_LINEAR)
    back = rectify(distorted, k=k, d=d)
    assert back.shape == img.shape and back.dtype == np.uint8
    centre = (slice(80, 160), slice(110, 210))
    err_back = np.mean(np.abs(back[centre].astype(int) - img[centre].astype(int)))
    err_dist = np.mean(np.abs(distorted[centre].astype(int) - img[centre].astype(int)))
    assert err_back < err_dist


def test_crops_cover_the_centre_band():
    img = checkerboard(100, 400)
    crops = centre_crops(img, 3)
    assert [c.shape for c in crops] == [(100, 100, 3)] * 3
    assert np.array_equal(crops[0], img[:, :100]) and np.array_equal(crops[2], img[:, 300:])
    assert np.array_equal(centre_crops(img, 1)[0], img[:, 150:250])
    cfg = CameraConfig(clip_crops=2)
    assert len(clip_views(img, cfg)) == 2


def test_crops_overlap_on_a_narrow_frame():
    """A 4:3 frame: three full-height squares, at the left edge, the centre and the right edge."""
    img = np.zeros((120, 160, 3), np.uint8)
    img[:, :, 0] = np.arange(160)  # every column tells its index
    crops = centre_crops(img, 3)
    assert [c.shape for c in crops] == [(120, 120, 3)] * 3
    assert np.array_equal(crops[0], img[:, :120]) and np.array_equal(crops[1], img[:, 20:140])
    assert np.array_equal(crops[2], img[:, 40:])
    assert np.array_equal(centre_crops(img, 2)[1], img[:, 40:])
    with pytest.raises(ImagePrepError, match="clip_crops"):
        centre_crops(img, 0)


@pytest.mark.parametrize("kwargs, msg", [(dict(k=[1.0, 2.0], d=[0, 0, 0, 0]), "fisheye_k"),
                                         (dict(k=[100.0, 100.0, 50.0, 50.0], d=[0.1]), "fisheye_d")])
def test_bad_intrinsics(kwargs, msg):
    with pytest.raises(ImagePrepError, match=msg):
        rectify(checkerboard(), **kwargs)
    with pytest.raises(ImagePrepError, match="uint8"):
        centre_crops(np.zeros((10, 10)), 1)
