import numpy as np
import pytest

from core.grounding import landmark_log_likelihoods, log_likelihoods, node_similarity
from core.metrics import planning_efficiency, planning_success


def test_similarity_takes_max_over_a_nodes_images():
    img = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], dtype=np.float16)
    txt = np.array([[1.0, 0.0], [0.0, 2.0]])  # not normalised on purpose
    sim = node_similarity(img, np.array([0, 0, 1]), txt, n_nodes=3)
    assert sim[0].tolist() == [1.0, 1.0]
    np.testing.assert_allclose(sim[1], [0.6, 0.8], atol=1e-3)
    assert np.all(np.isneginf(sim[2]))  # node without images


def test_log_likelihoods_softmax_over_nodes_sums_to_one():
    sim = np.array([[0.3, 0.1], [0.2, 0.25], [-np.inf, -np.inf]])
    g = log_likelihoods(sim, logit_scale=100.0)
    np.testing.assert_allclose(np.exp(g).sum(axis=0), [1.0, 1.0])
    assert g[0, 0] == pytest.approx(-np.log1p(np.exp(-10.0)))
    assert np.all(np.isneginf(g[2]))
    g2 = log_likelihoods(sim[:2], logit_scale=100.0, normalise="landmarks")
    np.testing.assert_allclose(np.exp(g2).sum(axis=1), [1.0, 1.0])


def test_end_to_end_grounding_shape_and_order():
    rng = np.random.default_rng(0)
    img = rng.normal(size=(10, 8))
    txt = img[[3, 7]] + 0.01 * rng.normal(size=(2, 8))
    g = landmark_log_likelihoods(img, np.arange(10), txt, n_nodes=10, logit_scale=100.0)
    assert g.shape == (10, 2) and g.dtype == np.float64
    assert np.argmax(g, axis=0).tolist() == [3, 7]


def test_max_cosine_makes_every_clear_view_alike():
    """Above the cap the views of a landmark score nearly alike (the walk length picks among them, the
    clearest view breaks a tie); below it nothing changes; nodes without an image stay -inf; 1 is the
    paper's objective."""
    from core.grounding import CAP_SLOPE

    sim = np.array([[0.55], [0.47], [0.30], [-np.inf]])
    plain = log_likelihoods(sim, logit_scale=20.0)
    np.testing.assert_array_equal(log_likelihoods(sim, logit_scale=20.0, max_cosine=1.0), plain)
    capped = log_likelihoods(sim, logit_scale=20.0, max_cosine=0.46)
    assert capped[0, 0] - capped[1, 0] == pytest.approx(20.0 * CAP_SLOPE * (0.55 - 0.47))  # both over the cap
    assert 0 < capped[0, 0] - capped[1, 0] < 0.2 * (plain[0, 0] - plain[1, 0]) + 1e-12
    assert capped[1, 0] - capped[2, 0] == pytest.approx(20.0 * (0.46 - 0.30 + CAP_SLOPE * 0.01))
    assert np.isneginf(capped[3, 0]) and np.exp(capped[:3, 0]).sum() == pytest.approx(1.0)
    for bad in (1.5, -1.0, float("nan")):
        with pytest.raises(ValueError, match="max_cosine"):
            log_likelihoods(sim, logit_scale=20.0, max_cosine=bad)


@pytest.mark.parametrize("kwargs, message", [
    (dict(image_emb=np.zeros((2, 3))), "all-zero"),
    (dict(image_emb=np.full((2, 3), np.nan)), "NaN"),
    (dict(text_emb=np.ones((1, 4))), "does not match"),
    (dict(image_node=np.array([0, 5])), "out of range"),
    (dict(image_node=np.array([0])), "image_node: expected shape"),
    (dict(image_emb=np.ones(3)), "image_emb: expected shape"),
])
def test_grounding_bad_input(kwargs, message):
    args = dict(image_emb=np.ones((2, 3)), image_node=np.array([0, 1]), text_emb=np.ones((1, 3)))
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        node_similarity(args["image_emb"], args["image_node"], args["text_emb"], n_nodes=2)


def test_log_likelihood_bad_input():
    with pytest.raises(ValueError, match="logit_scale"):
        log_likelihoods(np.zeros((2, 1)), logit_scale=0.0)
    with pytest.raises(ValueError, match="normalise"):
        log_likelihoods(np.zeros((2, 1)), logit_scale=1.0, normalise="images")
    with pytest.raises(ValueError, match="NaN"):
        log_likelihoods(np.full((2, 1), np.nan), logit_scale=1.0)


def test_planning_metrics():
    assert planning_success([3, 5], [{3, 4}, {5}])
    assert not planning_success([3, 6], [{3, 4}, {5}])
    with pytest.raises(ValueError, match="2 landmark nodes but 1"):
        planning_success([3, 5], [{3}])
    assert planning_efficiency(80.0, 100.0) == pytest.approx(0.8)
    assert planning_efficiency(120.0, 100.0) == 1.0
    assert planning_efficiency(0.0, 0.0) == 1.0
    with pytest.raises(ValueError, match="planned_length"):
        planning_efficiency(1.0, -1.0)
