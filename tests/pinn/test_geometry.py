import numpy as np
import pytest

from sciml.pinn.geometry import (Ball, Box, Difference, Disk, Intersection, Interval, Polygon,
                                 Rectangle, SpaceTime, TimeInterval, Union)

L_SHAPE = [(0, 0), (2, 0), (2, 1), (1, 1), (1, 2), (0, 2)]          # non-convex, area 3

GEOMS = {
    "interval": lambda: Interval(-1, 1),
    "rectangle": lambda: Rectangle((0, 0), (2, 1)),
    "box3": lambda: Box([0, 0, 0], [1, 2, 3]),
    "disk": lambda: Disk((0.5, -0.5), 1.5),
    "ball3": lambda: Ball((0, 0, 0), 1),
    "ball4": lambda: Ball(np.zeros(4), 2),
    "polygon_L": lambda: Polygon(L_SHAPE),
    "polygon_cw": lambda: Polygon([(0, 0), (0, 1), (3, 0)]),
    "rect_minus_disk": lambda: Rectangle((0, 0), (2, 1)) - Disk((1, 0.5), 0.25),
    "disk_or_rect": lambda: Disk((0, 0), 1) | Rectangle((0, 0), (2, 1)),
    "disk_and_rect": lambda: Disk((0, 0), 1) & Rectangle((0, 0), (2, 1)),
    "nested_csg": lambda: (Rectangle((-1, -1), (1, 1)) - Disk((0, 0), 0.5)) | Disk((1, 1), 0.3),
    "polygon_minus_disk": lambda: Polygon(L_SHAPE) - Disk((0.5, 0.5), 0.2),
    "interval_minus_interval": lambda: Interval(0, 3) - Interval(1, 2),
    "ball3_minus_box": lambda: Ball((0, 0, 0), 1) - Box([0, 0, 0], [2, 2, 2]),
    "interval_x_time": lambda: Interval(-1, 1) * TimeInterval(0, 1),
    "disk_x_time": lambda: Disk((0, 0), 1) * TimeInterval(0, 2),
    "csg_x_time": lambda: (Rectangle((0, 0), (2, 1)) - Disk((1, 0.5), 0.25)) * TimeInterval(0, 1),
}
METHODS = ["uniform", "lhs", "sobol", "grid"]


@pytest.fixture(scope="module", params=list(GEOMS))
def geom(request):
    return GEOMS[request.param]()


@pytest.mark.parametrize("method", METHODS)
def test_interior_samples_are_inside(geom, method):
    x = geom.sample_interior(300, 0, method)
    assert x.ndim == 2 and x.shape[1] == geom.dim
    assert len(x) == 300 if method != "grid" else 150 < len(x) < 600
    assert geom.inside(x).all()


@pytest.mark.parametrize("method", METHODS)
def test_boundary_samples_are_on_the_boundary(geom, method):
    x = geom.sample_boundary(300, 0, method)
    assert len(x) == 300 if method != "grid" else 150 < len(x) < 600
    assert geom.on_boundary(x).all() and geom.inside(x).all()


def test_normals_are_unit_and_outward(geom):
    x = geom.sample_boundary(400, 1)
    n = geom.normal(x)
    assert n.shape == x.shape
    np.testing.assert_allclose(np.linalg.norm(n, axis=1), 1.0)
    eps = 20 * geom.tol
    assert not geom.inside(x + eps * n).any()
    assert geom.inside(x - eps * n).all()
    assert not geom.on_boundary(x - eps * n).any()


@pytest.mark.parametrize("method", ["uniform", "lhs", "sobol"])
def test_seed_makes_samples_repeatable(geom, method):
    for fn in (geom.sample_interior, geom.sample_boundary):
        np.testing.assert_array_equal(fn(50, 3, method), fn(50, 3, method))
        if geom.dim > 1 or fn == geom.sample_interior:     # a 1-D boundary has 2 points
            assert not np.array_equal(fn(50, 3, method), fn(50, 4, method))


def test_every_geometry_has_a_boundary_part(geom):
    assert geom.part_names[0] == "boundary"
    x = geom.sample_boundary(20, 0)
    assert geom.select("boundary", x).all()
    with pytest.raises(ValueError, match=r"has no boundary part 'nope'; available: 'boundary'"):
        geom.select("nope", x)


def test_points_of_the_wrong_shape_are_refused(geom):
    with pytest.raises(ValueError, match=rf"pts has shape \(5, {geom.dim + 1}\); "
                                         rf"expected \(n, {geom.dim}\) with columns"):
        geom.inside(np.zeros((5, geom.dim + 1)))


# ---- measures and distributions --------------------------------------------------------
@pytest.mark.parametrize("make, volume, surface, rel", [
    (lambda: Interval(-1, 2), 3.0, 2.0, 1e-12),
    (lambda: Box([0, 0, 0], [1, 2, 3]), 6.0, 22.0, 1e-12),
    (lambda: Disk((0, 0), 2), 4 * np.pi, 4 * np.pi, 1e-12),
    (lambda: Ball((0, 0, 0), 1), 4 / 3 * np.pi, 4 * np.pi, 1e-12),
    (lambda: Ball(np.zeros(4), 1), np.pi ** 2 / 2, 2 * np.pi ** 2, 1e-12),
    (lambda: Polygon(L_SHAPE), 3.0, 8.0, 1e-12),
    (lambda: Rectangle((0, 0), (2, 1)) - Disk((1, 0.5), 0.25), 2 - np.pi / 16, 6 + np.pi / 2,
     1e-2),
    (lambda: Disk((0, 0), 1) & Rectangle((0, 0), (2, 1)), np.pi / 4, 2 + np.pi / 2, 1e-2),
    (lambda: Interval(-1, 1) * TimeInterval(0, 3), 6.0, 6.0, 1e-12),
])
def test_measures(make, volume, surface, rel):
    g = make()
    assert g.measure == pytest.approx(volume, rel=rel)
    assert g.boundary_measure == pytest.approx(surface, rel=rel)


def test_interior_is_uniform_by_volume():
    for g, inner in [(Disk((0, 0), 1), 0.25), (Ball((0, 0, 0), 1), 0.125)]:
        for method in ("uniform", "sobol"):
            r = np.linalg.norm(g.sample_interior(4000, 0, method), axis=1)
            assert np.mean(r < 0.5) == pytest.approx(inner, abs=0.02)


def test_boundary_is_distributed_by_measure():
    rect = Rectangle((0, 0), (2, 1))
    for method in ("uniform", "lhs", "sobol", "grid"):
        x = rect.sample_boundary(3000, 0, method)
        assert np.mean(rect.select("bottom", x)) == pytest.approx(2 / 6, abs=0.02)
    holed = rect - Disk((1, 0.5), 0.25)
    x = holed.sample_boundary(4000, 0)
    on_circle = np.abs(np.linalg.norm(x - [1, 0.5], axis=1) - 0.25) < 1e-9
    assert np.mean(on_circle) == pytest.approx((np.pi / 2) / (6 + np.pi / 2), abs=0.02)


def test_known_normals():
    x = np.array([[0.0, 0.5], [2.0, 0.3], [1.0, 0.0], [1.5, 1.0]])
    np.testing.assert_array_equal(Rectangle((0, 0), (2, 1)).normal(x),
                                  [[-1, 0], [1, 0], [0, -1], [0, 1]])
    np.testing.assert_allclose(Disk((1, 1), 2).normal(np.array([[3.0, 1.0], [1.0, -1.0]])),
                               [[1, 0], [0, -1]])
    hole = Rectangle((-2, -2), (2, 2)) - Disk((0, 0), 1)
    np.testing.assert_allclose(hole.normal(np.array([[1.0, 0.0], [-2.0, 0.5]])), [[-1, 0], [-1, 0]])
    np.testing.assert_array_equal(Interval(0, 3).normal(np.array([[0.0], [3.0]])), [[-1], [1]])


def test_grid_follows_the_aspect_ratio():
    x = Rectangle((0, 0), (2, 1)).sample_interior(200, method="grid")
    assert x.shape == (200, 2) and len(np.unique(x[:, 0])) == 20
    np.testing.assert_array_equal(Interval(-1, 1).sample_boundary(4, method="grid")[:, 0],
                                  [-1, -1, 1, 1])


# ---- polygons -------------------------------------------------------------------------
def test_polygon_inside_for_a_non_convex_shape():
    g = Polygon(L_SHAPE + [(0, 0)])                     # closing vertex is dropped
    assert len(g.vertices) == 6
    pts = np.array([[0.5, 0.5], [1.5, 0.5], [0.5, 1.5], [1.5, 1.5], [-0.1, 0.5], [1.0, 1.5]])
    np.testing.assert_array_equal(g.inside(pts), [True, True, True, False, False, True])
    np.testing.assert_array_equal(g.on_boundary(pts), [False, False, False, False, False, True])
    np.testing.assert_allclose(g.signed_distance(pts[:2]), [-0.5, -0.5])


def test_polygon_orientation_does_not_matter():
    cw, ccw = Polygon(L_SHAPE[::-1]), Polygon(L_SHAPE)
    x = ccw.sample_boundary(100, 0)
    np.testing.assert_allclose(cw.normal(x), ccw.normal(x))


@pytest.mark.parametrize("vertices, message", [
    ([(0, 0), (1, 1), (1, 0), (0, 1)], "edges 0 and 2 intersect; the polygon must be simple"),
    ([(0, 0), (1, 1)], "need at least 3 distinct vertices, got 2"),
    ([(0, 0), (1, 1), (2, 2)], "zero area"),
    ([(0, 0), (1, 0), (1, 0), (0, 1)], "consecutive vertices must differ"),
    ([[0, 0, 0], [1, 0, 0], [0, 1, 0]], r"shape \(m, 2\), got shape \(3, 3\)"),
])
def test_bad_polygons(vertices, message):
    with pytest.raises(ValueError, match=message):
        Polygon(vertices)


# ---- named parts, checks and errors ------------------------------------------------------
def test_named_parts_of_interval_and_rectangle():
    iv = Interval(-1, 1)
    x = np.array([[-1.0], [1.0], [0.0]])
    np.testing.assert_array_equal(iv.select("left", x), [True, False, False])
    np.testing.assert_array_equal(iv.boundary_part("right")(x), [False, True, False])
    rect = Rectangle((0, 0), (2, 1))
    assert rect.part_names == ("boundary", "left", "right", "bottom", "top",
                               "x_min", "x_max", "y_min", "y_max")
    top = rect.sample_boundary(50, 0, part="top")
    assert top.shape == (50, 2) and np.all(top[:, 1] == 1.0)
    with pytest.raises(ValueError, match=r"Rectangle\(\(0, 0\), \(2, 1\)\) has no boundary part "
                                         r"'lft'; available: 'boundary', 'left', 'right'"):
        rect.select("lft", top)
    holed = rect - Disk((1, 0.5), 0.25)
    left = holed.sample_boundary(30, 0, part="left")
    assert np.all(left[:, 0] == 0.0)


def test_check_inside():
    g = Disk((0, 0), 1)
    x = np.array([[0.0, 0.0], [2.0, 0.0], [0.5, 0.5], [0.0, -3.0]])
    np.testing.assert_array_equal(g.check_inside(x[[0, 2]]), x[[0, 2]])
    with pytest.raises(ValueError, match=r"observations: 2 of 4 points lie outside "
                                         r"Disk\(\(0, 0\), 1\), "
                                         r"e.g. \{'x': 2.0, 'y': 0.0\}"):
        g.check_inside(x, "observations")


@pytest.mark.parametrize("make, error, message", [
    (lambda: Interval(1, 0), ValueError, r"Interval\(a=1, b=0\): need a < b"),
    (lambda: Interval([0, 1], 2), ValueError, "a must be a finite real number"),
    (lambda: Rectangle((0, 0, 0), (1, 1, 1)), ValueError, r"must be \(x, y\) pairs.*use Box"),
    (lambda: Box([0, 0], [1, 0]), ValueError, "need lo < hi in every coordinate"),
    (lambda: Disk((0, 0), 0), ValueError, "radius must be > 0, got 0"),
    (lambda: Disk((0, 0, 0), 1), ValueError, "use Ball"),
    (lambda: Box([0, 0], [1, 1], names=("x", "x")), ValueError, "2 distinct strings"),
    (lambda: Disk((0, 0), 1) | Interval(0, 1), ValueError, "same coordinates"),
    (lambda: Disk((0, 0), 1) & Disk((5, 5), 1), ValueError, "is empty"),
    (lambda: (Disk((0, 0), 1) & Disk((1.8, 1.8), 1)).sample_boundary(10, 0), ValueError,
     "no boundary points found; is the domain empty"),
    (lambda: Interval(0, 1) * Interval(0, 1), TypeError, "only be multiplied by a TimeInterval"),
    (lambda: TimeInterval(0, 1) * Interval(0, 1), TypeError, "write the space first"),
    (lambda: Interval(0, 1) * TimeInterval(0, 1) * TimeInterval(0, 1), ValueError,
     "already has a coordinate 't'"),
    (lambda: Interval(0, 1).sample_interior(10, 0, "random-walk"), ValueError,
     "method must be one of"),
    (lambda: Interval(0, 1).sample_interior(10), TypeError, "needs rng"),
    (lambda: Interval(0, 1).inside(np.zeros(5)), ValueError, r"use pts\[:, None\]"),
])
def test_bad_input(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_csg_types_and_reprs():
    a, b = Rectangle((0, 0), (1, 1)), Disk((0, 0), 1)
    assert isinstance(a | b, Union) and isinstance(a & b, Intersection)
    assert isinstance(a - b, Difference)
    assert repr(a - b) == "(Rectangle((0, 0), (1, 1)) - Disk((0, 0), 1))"
    assert (a - b).names == ("x", "y")


# ---- space-time -------------------------------------------------------------------------
def test_space_time_names_and_bbox():
    st = Rectangle((0, 0), (2, 1)) * TimeInterval(0, 5)
    assert isinstance(st, SpaceTime) and st.names == ("x", "y", "t") and st.dim == 3
    np.testing.assert_array_equal(st.bbox[1], [2, 1, 5])
    assert Interval(0, 1).names == ("x",) and TimeInterval(0, 1).names == ("t",)
    assert repr(Interval(-1, 1) * TimeInterval(0, 1)) == "Interval(-1, 1) * TimeInterval(0, 1)"


def test_space_time_boundary_initial_and_normals():
    st = Disk((0, 0), 1) * TimeInterval(0.5, 2)
    b = st.sample_boundary(500, 0)
    np.testing.assert_allclose(np.linalg.norm(b[:, :2], axis=1), 1.0)
    assert b[:, 2].min() >= 0.5 and b[:, 2].max() <= 2 and np.ptp(b[:, 2]) > 1.3
    n = st.normal(b)
    assert np.all(n[:, 2] == 0)
    x0 = st.sample_initial(100, 0, "sobol")
    assert np.all(x0[:, 2] == 0.5) and Disk((0, 0), 1).inside(x0[:, :2]).all()
    assert st.select("initial", x0).all() and not st.select("boundary", x0).any()
    assert st.sample_final(10, 0)[:, 2].tolist() == [2.0] * 10
    assert st.part_names == ("boundary", "initial", "final")
    np.testing.assert_array_equal(st.sample_boundary(20, 0, part="initial")[:, 2], 0.5)


def test_space_time_named_spatial_parts():
    st = Interval(-1, 1) * TimeInterval(0, 1)
    x = st.sample_boundary(100, 0, part="left")
    assert np.all(x[:, 0] == -1) and st.select("left", x).all() and not st.select("right", x).any()


def test_space_time_sobol_is_stratified_jointly():
    x = (Rectangle((0, 0), (2, 1)) * TimeInterval(0, 1)).sample_interior(256, 0, "sobol")
    u = x / [2, 1, 1]
    for col in u.T:
        np.testing.assert_array_equal(np.sort(np.floor(col * 256)), np.arange(256))


def test_space_time_grid_is_a_product():
    st = Interval(-1, 1) * TimeInterval(0, 1)
    x = st.sample_interior(200, method="grid")
    assert len(np.unique(x[:, 0])) == 20 and len(np.unique(x[:, 1])) == 10
    b = st.sample_boundary(100, method="grid")
    assert set(b[:, 0]) == {-1.0, 1.0} and len(np.unique(b[:, 1])) == 50
