"""The learned objectness score: geometry features, fitting, and use by the features stage."""
import numpy as np
import pytest

from fraglib.config import ConfigError
from fraglib.objectness import Objectness, fit, geometry
from fraglib.vision import VisionConfig


def test_geometry_by_hand():
    g = geometry(np.array([[0, 0, 50, 25], [10, 10, 20, 20]]), 100, 50)
    np.testing.assert_allclose(g[0], [np.log(0.25), np.log(2.0), 0.25, 0.25, 1.0], rtol=1e-6)
    assert g[1, 4] == 0.0


def test_fit_separates_a_separable_problem(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 6)).astype(np.float32)
    y = (X[:, 0] + 0.5 * X[:, 1] > 0.3).astype(np.float32)
    m = fit(X, y, l2=1e-4)
    # Objectness.score appends 5 geometry columns: test the linear part directly
    logits = ((X - m.mean) / m.std) @ m.weight + m.bias
    assert ((logits > 0) == (y > 0)).mean() > 0.95
    m.save(tmp_path / "o.npz")
    back = Objectness.load(tmp_path / "o.npz")
    np.testing.assert_array_equal(back.weight, m.weight)


def test_learned_score_needs_a_model(tmp_path):
    with pytest.raises(ConfigError, match="objectness_file"):
        VisionConfig(score="learned").validate()
    with pytest.raises(FileNotFoundError, match="nope.npz"):
        Objectness.load(tmp_path / "nope.npz")


def test_learned_objectness_end_to_end(tiny_full, tmp_path):
    from fraglib.data import Dataset, read_karpathy_json
    from fraglib.features import FeatureCache, extract, synthetic_truth
    from fraglib.objectness import collect

    ds = read_karpathy_json(tiny_full / "dataset.json")
    truth = synthetic_truth(tiny_full / "ground_truth.json")
    cfg = VisionConfig(max_proposals=80, num_workers=0)
    train = Dataset(ds.name, ds.image_dir, [im for im in ds.images if im["split"] == "train"][:8], [])
    X, y = collect(train, truth, cfg, progress=False)
    assert X.shape[1] == 1285 and 0 < y.sum() < len(y)
    fit(X, y).save(tmp_path / "obj.npz")
    test = Dataset(ds.name, ds.image_dir, [im for im in ds.images if im["split"] == "test"], [])
    learned = VisionConfig(**{**cfg.__dict__, "score": "learned", "objectness_file": str(tmp_path / "obj.npz")})
    stats = extract(test, learned, tmp_path / "f", truth, progress=False)
    c = FeatureCache.load(tmp_path / "f" / "rcnn.npz", test)
    assert c.meta["settings"]["score"] == "learned" and 0 <= stats["recall_iou50_rcnn"] <= 1
