"""The learned objectness score: geometry features, fitting, and use by the features stage."""

import numpy as np
import pytest

from fraglib.core.config import ConfigError
from fraglib.vision.objectness import Objectness, enlarge, fit, geometry
from fraglib.vision.rcnn import VisionConfig


def test_geometry_by_hand():
    g = geometry(np.array([[0, 0, 50, 25], [10, 10, 20, 20]]), 100, 50)
    np.testing.assert_allclose(g[0], [np.log(0.25), np.log(2.0), 0.25, 0.25, 1.0], rtol=1e-6)
    assert g[1, 4] == 0.0


@pytest.mark.parametrize("model", ["linear", "mlp"])
def test_fit_separates_a_separable_problem(tmp_path, model):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 6)).astype(np.float32)
    iou = np.where(X[:, 0] + 0.5 * X[:, 1] > 0.3, 0.8, 0.1)  # labels: IoU >= 0.5 positive, < 0.3 negative
    m = fit(X, iou, model=model, epochs=60, l2=1e-4, context=False)
    assert ((m.logits(X) > 0) == (iou > 0.5)).mean() > 0.95
    m.save(tmp_path / "o.npz")
    back = Objectness.load(tmp_path / "o.npz")
    np.testing.assert_array_equal(back.logits(X), m.logits(X))
    assert back.meta["model"] == model and not back.context


def test_fit_refuses_one_class_and_unknown_model():
    X = np.zeros((10, 3), np.float32)
    with pytest.raises(ValueError, match="0 positive of 10"):
        fit(X, np.zeros(10), model="linear")
    with pytest.raises(ValueError, match="model='svm'"):
        fit(X, np.r_[np.ones(5), np.zeros(5)], model="svm")


def test_enlarge_by_hand():
    np.testing.assert_allclose(enlarge(np.array([[10, 10, 20, 30]]), 2.0, 100, 100), [[5, 0, 25, 40]])
    np.testing.assert_allclose(enlarge(np.array([[0, 0, 50, 50]]), 2.0, 60, 60), [[0, 0, 60, 60]])


def test_learned_score_needs_a_model(tmp_path):
    with pytest.raises(ConfigError, match="objectness_file"):
        VisionConfig(score="learned").validate()
    with pytest.raises(FileNotFoundError, match="nope.npz"):
        Objectness.load(tmp_path / "nope.npz")


def test_learned_objectness_end_to_end(tiny_full, tmp_path):
    from fraglib.data import Dataset, read_karpathy_json
    from fraglib.data.cache import FeatureCache
    from fraglib.data.synthetic import synthetic_truth
    from fraglib.vision.features import extract
    from fraglib.vision.objectness import collect

    ds = read_karpathy_json(tiny_full / "dataset.json")
    truth = synthetic_truth(tiny_full / "ground_truth.json")
    cfg = VisionConfig(max_proposals=80, num_workers=0)
    train = Dataset(ds.name, ds.image_dir, [im for im in ds.images if im["split"] == "train"][:8], [])
    data = collect(train, truth, cfg, progress=False)
    assert data["X"].shape[1] == 2565 and 0 < (data["iou"] >= 0.5).sum() < len(data["iou"])
    assert data["annotated"].sum() == sum(len(truth[int(im["imgid"])]) for im in train.images)
    from fraglib.vision.regions import Regions, build  # the same examples from a regions cache (no CNN pass)

    build(ds, cfg, tmp_path / "regions.npz", progress=False)
    again = collect(train, truth, cfg, progress=False, regions=Regions.load(tmp_path / "regions.npz"))
    np.testing.assert_array_equal(again["iou"], data["iou"])
    np.testing.assert_allclose(again["X"].astype(np.float32), data["X"].astype(np.float32), rtol=0.02, atol=0.02)
    model = fit(data["X"], data["iou"], epochs=2)
    model.save(tmp_path / "obj.npz")
    from fraglib.vision.objectness import cross_validate

    cv = cross_validate(data, [truth[int(im["imgid"])] for im in train.images], [0.3, 0.5], 5, epochs=2)
    assert set(cv["recall_by_nms_iou"]) == {"0.3", "0.5"} and all(0 <= r <= 1 for r in cv["recall_by_nms_iou"].values())
    test = Dataset(ds.name, ds.image_dir, [im for im in ds.images if im["split"] == "test"], [])
    learned = VisionConfig(**{**cfg.__dict__, "score": "learned", "objectness_file": str(tmp_path / "obj.npz")})
    stats = extract(test, learned, tmp_path / "f", truth, progress=False)
    c = FeatureCache.load(tmp_path / "f" / "rcnn.npz", test)
    assert c.meta["settings"]["score"] == "learned" and 0 <= stats["recall_iou50_rcnn"] <= 1


@pytest.mark.parametrize(
    "damage, reason",
    [
        ("cut", r"not a readable .npz archive"),
        ("text", r"not a readable .npz archive \(not a complete zip file"),
        (
            "other",
            r"no layers W0, W1 ... \(an older format, or another file\); re-run python -m "
            r"fraglib.vision.objectness",
        ),
    ],
)
def test_a_damaged_objectness_model_is_not_called_missing(tmp_path, damage, reason):
    """A damaged model file was reported as "objectness model not found"."""
    path = tmp_path / "obj.npz"
    fit(
        np.random.default_rng(0).normal(size=(40, 3)).astype(np.float32),
        np.r_[np.ones(20), np.zeros(20)],
        model="linear",
        context=False,
    ).save(path)
    if damage == "cut":
        path.write_bytes(path.read_bytes()[:100])
    elif damage == "text":
        path.write_text("not a model")
    else:
        np.savez(path, features=np.zeros(3))
    message = rf"obj.npz: exists but cannot be read as an objectness model \({reason}"
    with pytest.raises(ValueError, match=message) as err:
        Objectness.load(path)
    assert "not found" not in str(err.value)
    with pytest.raises(
        FileNotFoundError,
        match=r"nope.npz: objectness model not found \(vision.objectness_file\); "
        r"train one with python -m fraglib.vision objectness",
    ):
        Objectness.load(tmp_path / "nope.npz")
