"""Labelled views of a simulated world, and landmark phrasings, for the sim-only stand-in VLM.

:func:`sample_poses` draws camera poses as the map sees the world (on the paths, heading along the path
within a few degrees, where the exploration drive records node images) and poses that look at a chosen
landmark from several distances and angles (seeded ``numpy.random.Generator``). :func:`label_pose`
labels a pose with the landmark categories that the evaluation's ground truth counts as seen
(:mod:`robot_app.sim.eval_truth`, one shared definition: an object counts within
``object_view_per_size`` times its largest dimension, clamped to ``object_view_m``-``object_view_max_m``;
a building within ``building_view_m`` of its outline), restricted to what the map's CLIP sees of the
frame: one square crop of side min(H, W) (:func:`robot_app.mapping.image_prep.centre_crops`; the centre
square, or with ``[camera] clip_crops = 3`` the left, centre or right one):

- the object's centre inside the crop's horizontal field of view (pinhole camera, focal length
  ``f = W / 2 / tan(hfov / 2)`` pixels; the centre crop spans ``2 atan(H / 2 / f)``), at least half of
  its height inside the vertical field,
- within :data:`SEEN_RANGE` times the truth's viewing range (flat objects such as a manhole cover,
  foreshortened by ``camera height / distance``, also at least :data:`CLEAR_PX` wide-ish on the frame),
- not hidden behind a building: 2-D rays from the camera against the buildings' footprint rectangles
  (buildings are taller than any catalogue object);
- a building: the first thing hit along at least :data:`MIN_RAYS` of 13 rays across the crop, its range
  measured from its outline as the truth measures it.

Each (view, category) label is 1 (seen), 0 (certainly not seen: outside the field of view, hidden, or
beyond :data:`UNSURE_RANGE` times the viewing range), :data:`FAR` (in clear view, but past
:data:`FAR_RANGE` times the truth's range: training keeps its score under a middle margin, so that it
falls off past the range the truth counts) or -1 (in between: just past the truth's cut, or partly
hidden; training ignores it). The generic
building category ``"building"`` is not labelled (it names every building).

:data:`PHRASES` gives every category several phrasings split into TRAIN phrasings (what the image
encoder is aligned with) and HELD-OUT phrasings (paraphrases training never sees, for the quality
figures; e.g. "a red octagonal sign").
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from robot_app.mapping.image_prep import centre_crops
from robot_app.sim.eval_truth import TruthParams, footprint_distance, object_size_m
from robot_app.sim.render import WorldRenderer
from robot_app.sim.world import BUILDING_COLOURS, CATALOGUE, Building, World, _point_in_building, object_footprint_m

__all__ = ["PHRASES", "CATEGORIES", "CLEAR_PX", "SEEN_RANGE", "BUILDING_SEEN_RANGE", "UNSURE_RANGE", "FAR",
           "FAR_RANGE", "MIN_RAYS", "view_range_m",
           "ViewSet",
           "sample_poses", "label_pose", "render_views",
           "train_phrases", "held_out_phrases"]

log = logging.getLogger(__name__)

#: category -> (TRAIN phrasings, HELD-OUT phrasings). The catalogue's own caption is a train phrasing.
PHRASES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "stop sign": (("stop sign", "a stop sign", CATALOGUE["stop sign"].caption, "a red stop sign by the road"),
                  ("a red octagonal sign", "the stop sign at the corner", "a traffic sign that says stop")),
    "traffic cone": (("traffic cone", "a traffic cone", CATALOGUE["traffic cone"].caption,
                      "a small orange and white cone"),
                     ("a road cone", "an orange safety pylon")),
    "fire hydrant": (("fire hydrant", "a fire hydrant", CATALOGUE["fire hydrant"].caption,
                      "a short red hydrant by the path"),
                     ("a hydrant", "a red water hydrant for firefighters")),
    "white truck": (("white truck", "a white truck", CATALOGUE["white truck"].caption, "a large white delivery truck"),
                    ("a white lorry", "a parked white vehicle")),
    "blue dumpster": (("blue dumpster", "a blue dumpster", "a large blue trash container"),
                      ("a blue waste bin", "a blue skip for garbage")),
    "picnic table": (("picnic table", "a picnic table", CATALOGUE["picnic table"].caption,
                      "a table with benches for eating outside"),
                     ("an outdoor wooden table", "a table in the park")),
    "bench": (("bench", "a bench", CATALOGUE["bench"].caption, "a bench to sit on"),
              ("a park seat", "a wooden seat by the path")),
    "trailer": (("trailer", "a trailer", CATALOGUE["trailer"].caption, "a semi trailer without a truck"),
                ("a cargo trailer", "a white freight trailer")),
    "manhole cover": (("manhole cover", "a manhole cover", CATALOGUE["manhole cover"].caption,
                       "a metal cover on the ground"),
                      ("a sewer lid", "a round metal plate in the road")),
    "tree": (("tree", "a tree", CATALOGUE["tree"].caption, "a tree with a round crown"),
             ("a green tree by the path", "an oak tree")),
    "street lamp": (("street lamp", "a street lamp", CATALOGUE["street lamp"].caption, "a lamp post"),
                    ("a street light", "a tall light pole")),
    "mailbox": (("mailbox", "a mailbox", CATALOGUE["mailbox"].caption, "a post box on a pole"),
                ("a blue letter box", "a postbox")),
    "red building": (("red building", "a red building", "a building with red walls"),
                     ("a red house", "a big red hall")),
    "brick building": (("brick building", "a brick building", "a building made of brown bricks"),
                       ("a brick house", "a brown brick block")),
    "white building": (("white building", "a white building", "a building with white walls"),
                       ("a white house", "a white office block")),
    "glass building": (("glass building", "a glass building", "a tall building with glass windows"),
                       ("a glass tower", "an office building with a glass facade")),
    "grey building": (("grey building", "a grey building", "a gray concrete building"),
                      ("a gray building", "a concrete hall")),
}

#: Labelled categories, in label-column order.
CATEGORIES: tuple[str, ...] = tuple(PHRASES)

#: Width in frame pixels (at 160 px) from which a FLAT object (manhole cover) counts as seen: 2x this
#: wide and a quarter of it high after foreshortening.
CLEAR_PX = 8.0
#: Past this multiple of the truth's viewing range a thing is labelled unseen (0); between 1 and it,
#: unsure (-1): the boundary of the truth is a hard cut the image cannot show exactly.
UNSURE_RANGE = 1.35
#: Seen (label 1) up to this fraction of the truth's viewing range; from there to UNSURE_RANGE times it,
#: unsure. The whole range, as for buildings below: with 0.65 (the near part only, so that a plan would
#: stop where the landmark is well in view) the views in the far part of the truth's range, which the
#: truth counts, were never trained to the target score, and development-set planning success
#: (``robot-app eval sim-tune``) was lower (docs/experiments.md).
SEEN_RANGE = 1.0
#: The same for buildings, which fill several of the crop's 13 rays up to the truth's whole range (30 m
#: from the outline), and which an instruction names as a place to go, reached anywhere in that range.
#: (At 0.65 the views 20-30 m from a building were never trained as showing it, and a building the
#: drive only passes at that distance scored like nothing on the map.)
BUILDING_SEEN_RANGE = 1.0
#: Label of a thing in clear view past the truth's range: beyond :data:`FAR_RANGE` times it (and up to
#: :data:`UNSURE_RANGE` times it), wholly inside the crop and not hidden. Training keeps its cosine under
#: a middle margin (``robot_app.sim.train_vlm.FAR_COSINE``), so that the score falls off past the range
#: the truth counts instead of staying at the seen target; the quality figures leave it out, as unsure.
FAR = 2
#: From this multiple of the truth's viewing range a thing in clear view is labelled :data:`FAR`; between
#: :data:`SEEN_RANGE` and it, unsure (-1).
FAR_RANGE = 1.1
#: A building is labelled seen (or FAR) when it is the first thing hit along at least this many of the
#: crop's 13 rays (the rest of its range: unsure). Two, not more: a building at the side of a path
#: fills only the edge of a side crop, and the truth counts it there.
MIN_RAYS = 2
assert max(SEEN_RANGE, BUILDING_SEEN_RANGE) <= FAR_RANGE < UNSURE_RANGE, "label ranges out of order"

_BUILDING_CATS = frozenset(BUILDING_COLOURS) - {"building"}
assert set(CATEGORIES) == set(CATALOGUE) | _BUILDING_CATS, "PHRASES must cover every labelled category"


def train_phrases(category: str) -> tuple[str, ...]:
    """TRAIN phrasings of ``category`` (raises KeyError naming the known categories)."""
    return _phrases(category)[0]


def held_out_phrases(category: str) -> tuple[str, ...]:
    """HELD-OUT phrasings of ``category`` (never used in training)."""
    return _phrases(category)[1]


def _phrases(category: str):
    try:
        return PHRASES[category]
    except KeyError:
        raise KeyError(f"no phrasings for category {category!r} (known: {', '.join(CATEGORIES)})") from None


@dataclass(frozen=True)
class _Thing:
    category: str
    x: float
    y: float
    width_m: float   # horizontal extent across the line of sight
    height_m: float  # top above the ground
    flat: bool
    footprint_m: float
    scale: float = 1.0


def _object_extent(category: str) -> tuple[float, float]:
    """(width, height) m of a catalogue object's bounding box (parts in its frame)."""
    half, top = 0.0, 0.0
    for part in CATALOGUE[category].parts:
        dx, dy, z = part.offset
        if part.shape == "box":
            r, hz = math.hypot(part.size[0], part.size[1]) / 2, part.size[2] / 2
        elif part.shape == "cylinder":
            r, hz = part.size[0], part.size[1] / 2
        else:
            r = hz = part.size[0]
        half = max(half, math.hypot(dx, dy) + r)
        top = max(top, z + hz)
    return 2 * half, top


def _things(world: World) -> list[_Thing]:
    out = []
    for o in world.objects:
        w, h = _object_extent(o.category)
        out.append(_Thing(o.category, o.at[0], o.at[1], w * o.scale, h * o.scale, h < 0.1, object_footprint_m(o),
                          o.scale))
    return out


def _ray_box(ox: float, oy: float, dx: float, dy: float, b: Building) -> float:
    """Distance along the unit ray (o, d) to building ``b``'s footprint rectangle (inf when missed)."""
    c, s = math.cos(b.yaw_rad), math.sin(b.yaw_rad)
    px, py = ox - b.center[0], oy - b.center[1]
    u0, v0 = c * px + s * py, -s * px + c * py
    du, dv = c * dx + s * dy, -s * dx + c * dy
    lo, hi = 0.0, math.inf
    for p0, d, half in ((u0, du, b.size_m[0] / 2), (v0, dv, b.size_m[1] / 2)):
        if abs(d) < 1e-12:
            if abs(p0) > half:
                return math.inf
            continue
        t1, t2 = (-half - p0) / d, (half - p0) / d
        lo, hi = max(lo, min(t1, t2)), min(hi, max(t1, t2))
        if lo > hi:
            return math.inf
    return lo


def _first_hit(world: World, x: float, y: float, angle: float) -> tuple[float, int]:
    dx, dy = math.cos(angle), math.sin(angle)
    best, which = math.inf, -1
    for i, b in enumerate(world.buildings):
        t = _ray_box(x, y, dx, dy, b)
        if t < best:
            best, which = t, i
    return best, which


def _wrap(a: float) -> float:
    return math.atan2(math.sin(a), math.cos(a))


def view_range_m(category: str, params: TruthParams = TruthParams(), *, scale: float = 1.0) -> float:
    """Distance (m) up to which the evaluation's truth counts an object of ``category`` (its size times
    ``scale``) as seen (:func:`robot_app.sim.eval_truth.landmark_nodes`); buildings: ``building_view_m``
    from the outline."""
    if category in CATALOGUE:
        return min(params.object_view_max_m,
                   max(params.object_view_m, params.object_view_per_size * object_size_m(category) * scale))
    return params.building_view_m


def label_pose(world: World, x_m: float, y_m: float, yaw_rad: float, *, hfov_deg: float = 90.0,
               width_px: int = 160, height_px: int = 120, camera_height_m: float = 0.5,
               truth: TruthParams = TruthParams(), crop_position: float = 0.5) -> np.ndarray:
    """Labels of one pose: (len(CATEGORIES),) int8, 1 seen, 0 not seen, FAR (2) in clear view past the
    range, -1 unsure (module docstring).

    The view is a square crop (side ``min(width_px, height_px)``) of a ``width_px`` x ``height_px``
    pinhole frame with horizontal field of view ``hfov_deg``, its left column at ``crop_position``
    times ``width_px - side``: 0.5 the centre crop (what the map's CLIP embeds with ``[camera]
    clip_crops = 1``), 0 and 1 the left and right crops of ``clip_crops = 3``
    (:func:`robot_app.mapping.image_prep.centre_crops`). The pose is world frame (m, yaw rad CCW from +x); the
    ranges are the evaluation's ground truth ``truth`` (:class:`robot_app.sim.eval_truth.TruthParams`).

    Raises
    ------
    ValueError
        ``crop_position`` outside [0, 1].
    """
    if not 0.0 <= crop_position <= 1.0:
        raise ValueError(f"crop_position: expected 0 (left) to 1 (right), got {crop_position}")
    f = (width_px / 2) / math.tan(math.radians(hfov_deg) / 2)
    side = min(width_px, height_px)
    x0 = crop_position * (width_px - side)  # the crop's left column
    tan_hi, tan_lo = (width_px / 2 - x0) / f, (width_px / 2 - x0 - side) / f  # bearings (CCW +) of its edges
    a_hi, a_lo = math.atan(tan_hi), math.atan(tan_lo)
    out = np.zeros(len(CATEGORIES), dtype=np.int8)
    col = {c: i for i, c in enumerate(CATEGORIES)}

    rank = {1: 3, -1: 2, FAR: 1, 0: 0}

    def vote(cat: str, value: int) -> None:  # 1 (seen somewhere) beats -1 (unsure) beats FAR beats 0
        j = col.get(cat)
        if j is not None and rank[value] > rank[int(out[j])]:
            out[j] = value

    for t in _things(world):
        dist = math.hypot(t.x - x_m, t.y - y_m)
        if dist < 0.3:
            vote(t.category, -1)
            continue
        bearing = _wrap(math.atan2(t.y - y_m, t.x - x_m) - yaw_rad)
        ang = math.atan(t.width_m / 2 / dist)
        reach = view_range_m(t.category, truth, scale=t.scale)
        if bearing - ang > a_hi or bearing + ang < a_lo or abs(bearing) > math.pi / 2 \
                or dist > UNSURE_RANGE * reach:
            continue  # fully outside the crop, or far past the truth's range
        # vertical coverage: fraction of the object's height inside the crop's vertical field
        top, bottom = camera_height_m + dist * side / 2 / f, camera_height_m - dist * side / 2 / f
        cover = 1.0 if t.flat else max(0.0, min(t.height_m, top) - max(0.0, bottom)) / t.height_m
        # occlusion: rays to the centre and both sides
        rays = [math.atan2(t.y - y_m, t.x - x_m) + k * ang for k in (-0.8, 0.0, 0.8)]
        blocked = [_first_hit(world, x_m, y_m, a)[0] < dist - t.footprint_m for a in rays]
        if all(blocked):
            continue
        resolved = _apparent_size_ok(t, dist, f, camera_height_m)(1.0) if t.flat else True
        clear = not any(blocked) and resolved and cover >= 0.5 and a_lo <= bearing <= a_hi
        vote(t.category, _range_label(clear, dist / reach, SEEN_RANGE))
    _label_buildings(world, x_m, y_m, yaw_rad, tan_lo, tan_hi, vote, reach_m=truth.building_view_m)
    return out


def _range_label(clear: bool, rel_dist: float, seen_range: float) -> int:
    """Label of a thing in view up to :data:`UNSURE_RANGE` times its range, at ``rel_dist`` times it:
    in clear view, 1 within ``seen_range``, :data:`FAR` past :data:`FAR_RANGE`; otherwise unsure (-1)."""
    if clear and rel_dist > FAR_RANGE:
        return FAR
    return 1 if clear and rel_dist <= seen_range else -1


def _apparent_size_ok(t: _Thing, dist: float, f: float, camera_height_m: float):
    """Whether ``t`` at ``dist`` m projects large enough at a fraction ``k`` of the clear size (a closure).

    Upright objects: height >= k CLEAR_PX and width >= k CLEAR_PX / 2 pixels; flat ones (seen
    foreshortened by camera height / distance): width >= 2 k CLEAR_PX and height >= k CLEAR_PX / 4.
    """
    w_px = f * t.width_m / dist
    if t.flat:
        h_px = f * t.width_m * camera_height_m / dist / dist
        return lambda k: w_px >= 2 * k * CLEAR_PX and h_px >= k * CLEAR_PX / 4
    h_px = f * t.height_m / dist
    return lambda k: h_px >= k * CLEAR_PX and w_px >= k * CLEAR_PX / 2


def _label_buildings(world: World, x_m: float, y_m: float, yaw_rad: float, tan_lo: float, tan_hi: float, vote, *,
                     reach_m: float) -> None:
    """Building labels: 13 rays across the crop (bearing tangents ``tan_lo`` to ``tan_hi``); a building
    hit first along at least :data:`MIN_RAYS` rays, its outline within :data:`BUILDING_SEEN_RANGE` times
    ``reach_m`` (the truth's range), is seen; along as many rays but past :data:`FAR_RANGE` times the
    range (up to :data:`UNSURE_RANGE` times it), FAR; otherwise, up to :data:`UNSURE_RANGE` times the
    range, unsure."""
    n = 13
    angles = [yaw_rad + math.atan(tan_lo + (i + 0.5) / n * (tan_hi - tan_lo)) for i in range(n)]
    hits: dict[int, list[float]] = {}
    for a in angles:
        t, which = _first_hit(world, x_m, y_m, a)
        if which >= 0:
            hits.setdefault(which, []).append(t)
    for i, dists in hits.items():
        b = world.buildings[i]
        d = float(footprint_distance(b, np.array([[x_m, y_m]]))[0])  # the truth's distance, from the outline
        if d > UNSURE_RANGE * reach_m:
            continue
        vote(b.category, _range_label(len(dists) >= MIN_RAYS, d / reach_m, BUILDING_SEEN_RANGE))


def _inside_obstacle(world: World, x: float, y: float, things: list[_Thing], margin_m: float = 1.0) -> bool:
    if abs(x) > world.extent_m[0] / 2 - 1 or abs(y) > world.extent_m[1] / 2 - 1:
        return True
    if any(_point_in_building(x, y, b, margin_m=margin_m) for b in world.buildings):
        return True
    return any(math.hypot(x - t.x, y - t.y) < t.footprint_m + 0.4 for t in things)


def sample_poses(world: World, n: int, *, rng: np.random.Generator, targeted_fraction: float = 0.4) -> np.ndarray:
    """``n`` camera poses (x_m, y_m, yaw_rad) as an (n, 3) float64 array, ENU.

    ``1 - targeted_fraction`` of them are map-like: on a path (uniform along the path length, lateral
    offset up to half the path width), heading along the path either way with 8 degrees of noise (where
    the exploration drive records the map's node images), or any heading one time in ten; the rest look
    at a landmark: a category drawn uniformly among those in the world, one of its instances, a distance
    up to 1.5 times its viewing range (buildings: 3-50 m from the wall), from any side, heading at it
    within 0.8 of the crop's half field of view.

    Raises
    ------
    ValueError
        ``n < 0`` or a world without paths and landmarks.
    """
    if n < 0:
        raise ValueError(f"n: expected >= 0, got {n}")
    things = _things(world)
    segs = [(p0, p1) for path in world.paths for p0, p1 in zip(path.points[:-1], path.points[1:])]
    seg_len = np.array([math.hypot(b[0] - a[0], b[1] - a[1]) for a, b in segs]) if segs else np.zeros(0)
    widths = [path.width_m for path in world.paths for _ in path.points[1:]]
    by_cat: dict[str, list] = {}
    for t in things:
        by_cat.setdefault(t.category, []).append(t)
    for b in world.buildings:
        if b.category in _BUILDING_CATS:
            by_cat.setdefault(b.category, []).append(b)
    cats = sorted(by_cat)
    if not segs and not cats:
        raise ValueError(f"world {world.name!r} has no paths and no landmarks to look at")
    out = np.empty((n, 3))
    k = 0
    while k < n:
        if cats and (not segs or rng.random() < targeted_fraction):
            target = by_cat[cats[rng.integers(len(cats))]]
            pose = _pose_at(target[rng.integers(len(target))], rng)
        else:
            j = rng.choice(len(segs), p=seg_len / seg_len.sum())
            (x0, y0), (x1, y1) = segs[j]
            s = rng.random()
            heading = math.atan2(y1 - y0, x1 - x0)
            lat = rng.uniform(-0.5, 0.5) * widths[j]
            x = x0 + s * (x1 - x0) - math.sin(heading) * lat
            y = y0 + s * (y1 - y0) + math.cos(heading) * lat
            yaw = rng.uniform(-math.pi, math.pi) if rng.random() < 0.1 else \
                heading + (math.pi if rng.random() < 0.5 else 0.0) + rng.normal(0.0, math.radians(8))
            pose = (x, y, yaw)
        if not _inside_obstacle(world, pose[0], pose[1], things):
            out[k] = (pose[0], pose[1], _wrap(pose[2]))
            k += 1
    return out


def _pose_at(target, rng: np.random.Generator) -> tuple[float, float, float]:
    half_h = math.atan(0.75)  # half field of view of the centre crop (90 degree frame, 4:3)
    if isinstance(target, Building):
        r = math.hypot(target.size_m[0], target.size_m[1]) / 2 + rng.uniform(3.0, 50.0)
        cx, cy = target.center
    else:
        reach = view_range_m(target.category, scale=target.scale)
        r = rng.uniform(max(1.0, target.footprint_m + 0.8), max(3.0, 1.5 * reach))
        cx, cy = target.x, target.y
    phi = rng.uniform(-math.pi, math.pi)
    x, y = cx + r * math.cos(phi), cy + r * math.sin(phi)
    return x, y, phi + math.pi + rng.uniform(-0.8, 0.8) * half_h


@dataclass
class ViewSet:
    """Rendered, labelled views.

    Attributes
    ----------
    images : (N, S, S, 3) uint8, the centre square crops resized to S (bicubic, what the CLIP runtime feeds).
    labels : (N, C) int8, 1 / 0 / FAR / -1 per :data:`CATEGORIES` (see :func:`label_pose`).
    poses : (N, 3) float64, x_m, y_m, yaw_rad (ENU).
    world : list of N world names.
    """

    images: np.ndarray
    labels: np.ndarray
    poses: np.ndarray
    world: list

    def __len__(self) -> int:
        return len(self.images)

    @staticmethod
    def concat(parts: list) -> "ViewSet":
        """One :class:`ViewSet` of several."""
        return ViewSet(np.concatenate([p.images for p in parts]), np.concatenate([p.labels for p in parts]),
                       np.concatenate([p.poses for p in parts]), [w for p in parts for w in p.world])


def render_views(world: World, poses: np.ndarray, *, image_size: int, seed: int = 0,
                 sizes: tuple = ((160, 120),), size_weights: tuple | None = None, hfov_deg: float = 90.0,
                 camera_height_m: float = 0.5, noise_std: float = 2.0, jpeg_quality: int = 85,
                 crops: int = 1, crop_weights: tuple | None = None, progress=None) -> ViewSet:
    """Render, JPEG round-trip (as the recorder stores frames), crop, resize and label each pose.

    Parameters
    ----------
    world
        The world.
    poses
        (N, 3) poses from :func:`sample_poses`.
    image_size
        S, side of the stored crops (the model input).
    seed
        Seeds the renderers' sensor noise and the frame-size choice.
    sizes, size_weights
        Frame sizes (W, H) in pixels to render at, chosen per view with these probabilities (default
        uniform): the map's frames may come from cameras of several resolutions.
    crops, crop_weights
        Each view is one of the ``crops`` squares :func:`robot_app.mapping.image_prep.centre_crops` cuts from the
        frame (as the map's CLIP with ``[camera] clip_crops = crops``), chosen with these probabilities
        (default uniform) and labelled for that crop.
    progress
        Optional callable(n) called after each view (a tqdm ``update``).

    Raises
    ------
    ImportError
        pybullet (extra ``sim``) is not installed.
    ValueError
        ``crops < 1``, or ``crop_weights`` not one per crop.
    """
    import cv2
    from PIL import Image

    rng = np.random.default_rng([int(seed), 7])
    which = rng.choice(len(sizes), size=len(poses), p=size_weights)
    if crops < 1 or (crop_weights is not None and len(crop_weights) != crops):
        raise ValueError(f"crops: expected >= 1 with one weight each, got {crops} and weights {crop_weights}")
    # the crop of each view (centre_crops' k-th of ``crops``); drawn only when there is a choice, so that
    # with one crop the draws of the frame sizes above (and the views) are those of a sampler without crops
    crop = rng.choice(crops, size=len(poses), p=crop_weights) if crops > 1 else np.zeros(len(poses), np.int64)
    n = len(poses)
    images = np.empty((n, image_size, image_size, 3), dtype=np.uint8)
    labels = np.empty((n, len(CATEGORIES)), dtype=np.int8)
    for si, (w, h) in enumerate(sizes):
        idx = np.flatnonzero(which == si)
        if not len(idx):
            continue
        with WorldRenderer(world, width=w, height=h, hfov_deg=hfov_deg, camera_height_m=camera_height_m,
                           seed=int(seed) * 31 + si, noise_std=noise_std) as r:
            for i in idx:
                x, y, yaw = poses[i]
                jpg = r.render_jpeg(x, y, yaw, index=int(i), quality=jpeg_quality)
                rgb = cv2.imdecode(np.frombuffer(jpg, np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
                k = int(crop[i])
                square = centre_crops(np.ascontiguousarray(rgb), crops)[k]
                images[i] = np.asarray(Image.fromarray(square).resize((image_size, image_size), Image.BICUBIC))
                # labels at the reference 160 px width: what counts as visible is what the model
                # input (S px) resolves, whatever the frame's resolution
                labels[i] = label_pose(world, x, y, yaw, hfov_deg=hfov_deg, width_px=160,
                                       height_px=max(1, round(160 * h / w)), camera_height_m=camera_height_m,
                                       crop_position=k / (crops - 1) if crops > 1 else 0.5)
                if progress is not None:
                    progress(1)
    return ViewSet(images, labels, np.asarray(poses, dtype=np.float64), [world.name] * n)
