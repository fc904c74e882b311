"""World files: the shipped worlds load; bad files get errors naming the file and the entry."""

from __future__ import annotations

import math

import pytest

from robot_app.sim.world import CATALOGUE, WorldError, load_world, shipped_worlds

GOOD = """
[world]
name = "tiny"
extent_m = [40.0, 40.0]
anchor_latlon = [37.8719, -122.2585]
start = [0.0, -15.0, 90.0]

[[paths]]
name = "main"
points = [[0.0, -18.0], [0.0, 18.0]]

[[buildings]]
name = "hall"
category = "red building"
center = [8.0, 0.0]
size_m = [6.0, 10.0, 8.0]

[[objects]]
category = "stop sign"
at = [2.5, 5.0]
"""


def write(tmp_path, text):
    p = tmp_path / "w.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("name", sorted(shipped_worlds()))
def test_shipped_worlds_load_with_distractors(name):
    w = load_world(name)
    assert w.extent_m[0] >= 150 and w.extent_m[1] >= 150
    cats = [c for _, c, _, _ in w.landmarks()]
    assert len(w.objects) >= 20 and len(w.buildings) >= 5 and w.paths
    assert any(b.glass for b in w.buildings)
    # distractors: several object categories appear in more than one place, and look-alike buildings
    repeated = {c for c in cats if cats.count(c) > 1}
    assert len(repeated & set(CATALOGUE)) >= 5
    assert any(cats.count(c) > 1 for c in cats if c.endswith("building"))


def test_good_file_round_trip(tmp_path):
    w = load_world(write(tmp_path, GOOD))
    assert w.name == "tiny" and w.start[2] == pytest.approx(math.pi / 2)
    assert w.landmarks() == [("hall", "red building", 8.0, 0.0), ("stop sign 0", "stop sign", 2.5, 5.0)]
    assert w.path("main").width_m == 3.0
    with pytest.raises(KeyError, match="no path 'nope'"):
        w.path("nope")


OPTIONAL = """
[[objects]]
category = "white truck"
at = [-8.0, -10.0]
scale = 1.2
tint = [1.1, 0.9, 1.0]

[exploration]
route = [[0.0, -15.0], [0.0, 15.0], [0.0, -15.0]]

[render]
ground_colour = [0.4, 0.5, 0.3]
light_direction = [0.0, 0.5, 0.8]
ambient = 0.6
"""


def test_optional_object_look_exploration_and_render_tables(tmp_path):
    from robot_app.sim.plant import obstacle_at
    from robot_app.sim.world import RenderStyle, object_footprint_m, object_parts

    w = load_world(write(tmp_path, GOOD + OPTIONAL))
    sign, truck = w.objects
    assert (sign.scale, sign.tint) == (1.0, (1.0, 1.0, 1.0)) and object_parts(sign) == CATALOGUE["stop sign"].parts
    assert truck.scale == 1.2 and object_footprint_m(truck) == pytest.approx(1.2 * CATALOGUE["white truck"].footprint_m)
    body = object_parts(truck)[0]
    cat = CATALOGUE["white truck"].parts[0]
    assert body.size == pytest.approx(tuple(1.2 * v for v in cat.size)) and body.rgb[0] == 1.0  # clipped to 1
    assert body.rgb[1] == pytest.approx(0.9 * cat.rgb[1])
    assert obstacle_at(w, -8.0 + 4.3, -10.0, 0.1) is not None  # within the scaled footprint (4.32 m), not 3.6
    assert w.exploration_route == ((0.0, -15.0), (0.0, 15.0), (0.0, -15.0))
    assert w.render == RenderStyle(ground_rgb=(0.4, 0.5, 0.3), light_direction=(0.0, 0.5, 0.8), ambient=0.6)
    plain = load_world(write(tmp_path, GOOD))
    assert plain.exploration_route == () and plain.render == RenderStyle()


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: t.replace("scale = 1.2", "scale = 3"), r"objects\[1\] \(white truck\): scale: 3.0 must be 0.5-2"),
        (lambda t: t.replace("tint = [1.1, 0.9, 1.0]", "tint = [2.0, 1.0, 1.0]"), r"objects\[1\] .*tint: .* 0.5-1.5"),
        (lambda t: t.replace("route = [[0.0, -15.0], [0.0, 15.0], [0.0, -15.0]]", "route = [[0.0, -15.0]]"),
         r"\[exploration\]: route: expected a list of at least 2"),
        (lambda t: t.replace("route = [[0.0, -15.0], [0.0, 15.0], [0.0, -15.0]]", "route = [[1.0, 1.0], [1.0, 1.0]]"),
         r"\[exploration\]: route: needs at least 2 distinct points"),
        (lambda t: t.replace("[0.0, 15.0], [0.0, -15.0]]", "[8.0, 0.0]]"),
         r"\[exploration\]: route\[1\]: \[8.0, 0.0\] is inside building 'hall'"),
        (lambda t: t.replace("[0.0, 15.0], [0.0, -15.0]]", "[0.0, 35.0]]"), r"\[exploration\]: route\[1\]: .* outside"),
        (lambda t: t.replace("ground_colour = [0.4, 0.5, 0.3]", "ground_colour = [1.4, 0.5, 0.3]"),
         r"\[render\]: ground_colour: .* RGB values in 0-1"),
        (lambda t: t.replace("light_direction = [0.0, 0.5, 0.8]", "light_direction = [0.0, 0.5, -0.8]"),
         r"\[render\]: light_direction: .* must point up"),
        (lambda t: t.replace("ambient = 0.6", "ambient = 1.6"), r"\[render\]: ambient: 1.6 must be 0-1"),
        (lambda t: t.replace("ambient = 0.6", "fog = 0.6"), r"\[render\]: unknown key 'fog'"),
    ],
)
def test_bad_optional_tables_name_the_entry(tmp_path, edit, message):
    p = write(tmp_path, edit(GOOD + OPTIONAL))
    with pytest.raises(WorldError, match=message) as exc:
        load_world(p)
    assert str(p) in str(exc.value)


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda t: t.replace('category = "stop sign"', 'category = "unicorn"'),
            r"objects\[0\] \(unicorn\): category: unknown object category 'unicorn' \(catalogue: stop sign",
        ),
        (lambda t: t.replace("at = [2.5, 5.0]", "at = [2.5, 50.0]"), r"objects\[0\] \(stop sign\): at: .* outside"),
        (
            lambda t: t.replace("at = [2.5, 5.0]", "at = [8.0, 1.0]"),
            r"objects\[0\] \(stop sign\): at: .* inside building 'hall'",
        ),
        (
            lambda t: t.replace("at = [2.5, 5.0]", 'at = [2.5, "x"]'),
            r"objects\[0\] \(stop sign\): at: expected a list of 2",
        ),
        (
            lambda t: t.replace("at = [2.5, 5.0]", "at = [2.5, 5.0]\nheight = 3"),
            r"objects\[0\] \(stop sign\): unknown key 'height'",
        ),
        (lambda t: t.replace("size_m = [6.0, 10.0, 8.0]", "size_m = [6.0, 10.0]"), r"buildings\[0\] \(hall\): size_m"),
        (
            lambda t: t.replace("size_m = [6.0, 10.0, 8.0]", "size_m = [6.0, 10.0, 0.0]"),
            r"buildings\[0\] \(hall\): size_m: .* 0.5-500",
        ),
        (
            lambda t: t.replace('category = "red building"', 'category = "castle"'),
            r"buildings\[0\] \(hall\): category: unknown building",
        ),
        (lambda t: t.replace("center = [8.0, 0.0]\n", ""), r"buildings\[0\] \(hall\): missing key 'center'"),
        (
            lambda t: t.replace("points = [[0.0, -18.0], [0.0, 18.0]]", "points = [[0.0, -18.0]]"),
            r"paths\[0\] \(main\): points",
        ),
        (
            lambda t: t.replace("start = [0.0, -15.0, 90.0]", "start = [8.0, 0.0, 90.0]"),
            r"\[world\] start: .* inside building 'hall'",
        ),
        (lambda t: t.replace("extent_m = [40.0, 40.0]", "extent_m = [40.0, 1.0]"), r"\[world\]: extent_m"),
        (
            lambda t: t.replace("anchor_latlon = [37.8719, -122.2585]", "anchor_latlon = [137.0, 0.0]"),
            r"\[world\]: anchor_latlon",
        ),
        (lambda t: t.replace('name = "tiny"\n', ""), r"\[world\]: missing key 'name'"),
        (lambda t: t + "\n[[ponds]]\nat = [1, 2]\n", r"unknown table 'ponds'"),
        (lambda t: t.replace("[world]", "[world"), r"not valid TOML"),
    ],
)
def test_bad_files_name_the_file_and_the_entry(tmp_path, edit, message):
    p = write(tmp_path, edit(GOOD))
    with pytest.raises(WorldError, match=message) as exc:
        load_world(p)
    assert str(p) in str(exc.value)


def test_unknown_world_name_lists_the_shipped_ones():
    with pytest.raises(WorldError, match="shipped: .*campus"):
        load_world("atlantis")
