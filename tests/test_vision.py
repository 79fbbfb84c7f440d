"""Image loading (bad input), box geometry, NMS, degradation, and the feature cache end to end."""

import hashlib
import json
import shutil

import numpy as np
import pytest
from PIL import Image

from fraglib.data import read_karpathy_json
from fraglib.data.dataset import Dataset
from fraglib.vision.rcnn import BadImage, VisionConfig, box_iou, degrade_boxes, load_image, nms_top_k, recall_at_iou


# ------------------------------------------------------------------ bad input
def _photo(w=64, h=48, seed=0):
    return (np.random.default_rng(seed).random((h, w, 3)) * 255).astype(np.uint8)


def test_image_conversions(tmp_path):
    Image.fromarray(_photo()[..., 0]).save(tmp_path / "gray.jpg")
    Image.fromarray(_photo()).convert("CMYK").save(tmp_path / "cmyk.jpg")
    rgba = np.dstack([_photo(), np.zeros((48, 64), np.uint8)])  # fully transparent
    Image.fromarray(rgba, "RGBA").save(tmp_path / "alpha.png")
    for name in ("gray.jpg", "cmyk.jpg", "alpha.png"):
        arr, note = load_image(tmp_path / name)
        assert arr.shape == (48, 64, 3) and arr.dtype == np.uint8 and "converted" in note
    alpha, _ = load_image(tmp_path / "alpha.png")
    assert np.all(alpha == 128)  # transparent pixels composited onto mid-grey, not black noise


def test_bad_images_raise_with_reason(tmp_path):
    Image.fromarray(_photo()).save(tmp_path / "ok.jpg")
    data = (tmp_path / "ok.jpg").read_bytes()
    (tmp_path / "truncated.jpg").write_bytes(data[: len(data) // 2])
    (tmp_path / "garbage.jpg").write_bytes(b"not an image at all")
    Image.fromarray(_photo(20, 40)).save(tmp_path / "tiny.png")
    for name, reason in [
        ("truncated.jpg", "corrupt"),
        ("garbage.jpg", "corrupt"),
        ("tiny.png", "too_small"),
        ("absent.jpg", "missing"),
    ]:
        with pytest.raises(BadImage, match=name) as exc:
            load_image(tmp_path / name)
        assert exc.value.reason == reason


def test_huge_image_is_reduced(tmp_path):
    Image.new("RGB", (4800, 300), (10, 200, 30)).save(tmp_path / "wide.png")
    arr, note = load_image(tmp_path / "wide.png")
    assert arr.shape == (250, 4000, 3) and note == "reduced from 4800x300"


def test_valid_but_unusual_images_decode_correctly(tmp_path):
    """16-bit grayscale once came out all white, EXIF rotation was ignored, and a 20000 x 100 panorama
    was shrunk to 4000 x 20 and then rejected as too small."""
    import torch

    from fraglib.vision.rcnn import Backbone, resize_longer

    ramp = np.tile(np.linspace(0, 65535, 64).astype(np.uint16), (48, 1))
    Image.fromarray(ramp).save(tmp_path / "gray16.png")
    arr, note = load_image(tmp_path / "gray16.png")
    assert "converted from I" in note and arr[0, 0].tolist() == [0, 0, 0] and arr[0, -1].tolist() == [255, 255, 255]
    np.testing.assert_allclose(arr[0, :, 0], np.rint(np.linspace(0, 255, 64)), atol=1)  # a ramp, not white

    upright = np.zeros((40, 64, 3), np.uint8)
    upright[:10] = 255  # white band on top when shown upright
    exif = Image.Exif()
    exif[0x0112] = 6  # stored rotated: "rotate 90 CW to view"
    Image.fromarray(np.rot90(upright, 1).copy()).save(tmp_path / "phone.jpg", exif=exif, quality=95)
    arr, note = load_image(tmp_path / "phone.jpg")
    assert arr.shape == (40, 64, 3) and "EXIF orientation 6" in note
    assert arr[:8].mean() > 200 and arr[12:].mean() < 50

    Image.new("RGB", (20000, 100), (90, 90, 200)).save(tmp_path / "panorama.png")
    arr, note = load_image(tmp_path / "panorama.png")
    assert arr.shape == (32, 6400, 3) and "reduced from 20000x100" in note
    small, scale = resize_longer(arr, 512)
    assert small.shape == (32, 6400, 3) and scale == 1.0  # the CNN input keeps 32 px
    fmap = Backbone(0).feature_map(Backbone.to_input(small, torch.device("cpu")))
    assert fmap.shape[2] >= 1 and torch.isfinite(fmap).all()


# ------------------------------------------------------------------ geometry
def test_box_iou_by_hand():
    a = np.array([[0, 0, 10, 10]])
    b = np.array([[5, 0, 15, 10], [20, 20, 30, 30], [0, 0, 10, 10]])
    np.testing.assert_allclose(box_iou(a, b), [[50 / 150, 0.0, 1.0]])


def test_nms_top_k_suppresses_then_pads():
    boxes = np.array([[0, 0, 10, 10], [1, 0, 11, 10], [50, 50, 60, 60]], np.float32)
    scores = np.array([0.9, 0.8, 0.7])
    assert nms_top_k(boxes, scores, 0.3, 2).tolist() == [0, 2]
    assert nms_top_k(boxes, scores, 0.3, 3).tolist() == [0, 2, 1]  # padded with the suppressed box
    assert nms_top_k(boxes[:0], scores[:0], 0.3, 5).tolist() == []


def test_recall_by_hand():
    truth = [np.array([[0, 0, 10, 10], [20, 20, 30, 30]]), np.zeros((0, 4))]
    dets = [np.array([[0, 0, 10, 9]]), np.array([[0, 0, 5, 5]])]
    assert recall_at_iou(dets, truth, 0.5) == 0.5


def test_degradation_knobs():
    rng = np.random.default_rng(0)
    true = np.array([[10, 10, 50, 50], [60, 60, 90, 90]], np.float32)
    clean = VisionConfig(gt_miss_prob=0.0, gt_jitter=0.0, gt_false_positives=0.0, gt_duplicate_prob=0.0)
    np.testing.assert_array_equal(degrade_boxes(rng, true, 100, 100, clean), true)
    missed = VisionConfig(gt_miss_prob=1.0, gt_false_positives=0.0)
    assert len(degrade_boxes(rng, true, 100, 100, missed)) == 0
    dup = VisionConfig(gt_miss_prob=0.0, gt_duplicate_prob=1.0, gt_false_positives=0.0)
    assert len(degrade_boxes(rng, true, 100, 100, dup)) == 4
    noisy = degrade_boxes(rng, true, 100, 100, VisionConfig(gt_miss_prob=0.0, gt_false_positives=3.0))
    assert np.all(noisy[:, [0, 1]] >= 0) and np.all(noisy[:, [2, 3]] <= 100)


# ------------------------------------------------------------------ the cache, end to end
@pytest.fixture(scope="module")
def tiny_features(tiny_synth, tmp_path_factory):
    """Features of the tiny benchmark with one image deleted and one corrupted."""
    from fraglib.data.synthetic import synthetic_truth
    from fraglib.vision.features import extract

    src, _ = tiny_synth
    root = tmp_path_factory.mktemp("vis") / "synth"
    shutil.copytree(src, root)
    (root / "images" / "000003.png").unlink()
    (root / "images" / "000005.png").write_bytes(b"\x89PNG broken")
    ds = read_karpathy_json(root / "dataset.json")
    cfg = VisionConfig(max_proposals=150, num_workers=1)
    stats = extract(ds, cfg, root / "features", synthetic_truth(root / "ground_truth.json"), progress=False)
    return root, ds, cfg, stats


def test_cache_layout_and_skips(tiny_features):
    from fraglib.data.cache import FeatureCache

    root, ds, cfg, stats = tiny_features
    assert stats["skipped"] == {"missing": 1, "corrupt": 1}
    for d in ("rcnn", "groundtruth"):
        c = FeatureCache.load(root / "features" / f"{d}.npz", ds)
        counts = np.diff(c.offsets)
        assert counts[3] == 0 and counts[5] == 0 and c.status[3] == "missing" and c.status[5] == "corrupt"
        assert np.all(counts[[n for n in range(len(counts)) if n not in (3, 5)]] == cfg.k + 1)
        assert c.features.shape == (counts.sum(), 1280) and c.features.dtype == np.float32
        assert np.isfinite(c.features).all()
        assert np.all(c.is_full[c.offsets[:-1][counts > 0]])  # first row of each image is the full frame
        full = c.fullframe()
        assert np.diff(full.offsets).tolist() == [0 if n in (3, 5) else 1 for n in range(len(counts))]
    assert 0 <= stats["recall_iou50_rcnn"] <= 1 and stats["recall_iou50_groundtruth"] > stats["recall_iou50_rcnn"]


def test_cache_top_keeps_the_frame_and_the_first_detections():
    """top(k): per image the full frame and the first k other rows (the detector's order, not the
    score: NMS padding puts suppressed boxes last); an image with fewer rows keeps them all; top(0) is
    the full frame alone."""
    from fraglib.data.cache import FeatureCache

    scores = np.array([np.inf, 0.2, 0.9, 0.5, np.inf, 0.7, np.inf, 0.1, 0.3, 0.8], np.float32)
    is_full = np.isinf(scores)
    c = FeatureCache(
        np.arange(10, dtype=np.float32)[:, None],
        np.zeros((10, 4), np.float32),
        scores,
        is_full,
        np.array([0, 4, 6, 6, 10]),
        np.arange(4),
        np.array(list("abcd")),
        np.array([""] * 4),
        {"detector": "top36"},
    )
    t = c.top(2)
    assert t.features[:, 0].tolist() == [0, 1, 2, 4, 5, 6, 7, 8]  # image 2 has no rows at all
    assert t.offsets.tolist() == [0, 3, 5, 5, 8] and t.is_full.sum() == 3
    assert t.meta == {"detector": "top36", "detections": 2}
    assert c.top(0).features[:, 0].tolist() == c.fullframe().features[:, 0].tolist() == [0, 4, 6]
    assert c.top(50).features.shape == c.features.shape


def test_a_streamed_cache_gives_the_loaded_cache_s_views_and_splits(tiny_features):
    """load(stream=True), then top/fullframe and subset (how training reads a cache, never holding the whole file):
    the very rows, boxes and offsets of the cache loaded whole."""
    from fraglib.data.cache import FeatureCache
    from fraglib.data.dataset import Chunks

    root, ds, _, _ = tiny_features
    whole = FeatureCache.load(root / "features" / "rcnn.npz", ds)
    stream = FeatureCache.load(root / "features" / "rcnn.npz", ds, stream=True)
    imgs = [n for n, im in enumerate(ds.images) if im["split"] == "train"] + [3, 5]  # two skipped images too
    for view in (lambda c: c, lambda c: c.top(2), lambda c: c.fullframe()):
        a, b = view(whole), view(stream)
        assert isinstance(b.features, Chunks) and b.features.shape == a.features.shape
        sa, sb = a.subset(imgs), b.subset(imgs)
        assert isinstance(sb.features, np.ndarray) and sb.features.tobytes() == sa.features.tobytes()
        for k in ("boxes", "scores", "is_full", "offsets", "imgids"):
            np.testing.assert_array_equal(getattr(sa, k), getattr(sb, k))


def test_cache_refuses_other_row_order(tiny_features):
    from fraglib.data import Dataset
    from fraglib.data.cache import FeatureCache

    root, ds, _, _ = tiny_features
    shuffled = Dataset(ds.name, ds.image_dir, ds.images[::-1], ds.sentences)
    with pytest.raises(ValueError, match="row order differs"):
        FeatureCache.load(root / "features" / "rcnn.npz", shuffled)


def test_same_input_same_bytes(tiny_features, tmp_path):
    from fraglib.data import Dataset
    from fraglib.vision.features import extract

    root, ds, cfg, _ = tiny_features
    small = Dataset(ds.name, ds.image_dir, ds.images[:4], [])
    extract(small, cfg, tmp_path / "a", progress=False)
    extract(small, cfg, tmp_path / "b", progress=False)
    za, zb = np.load(tmp_path / "a" / "rcnn.npz"), np.load(tmp_path / "b" / "rcnn.npz")
    for key in ("features", "boxes", "scores", "offsets"):
        assert hashlib.sha256(za[key].tobytes()).hexdigest() == hashlib.sha256(zb[key].tobytes()).hexdigest(), key
    # (another thread count changes the float summation order, hence near-tied proposal scores and
    # possibly the boxes kept: byte identity holds for the same settings, which is what is promised)


def test_streamed_descriptors_are_the_held_ones_and_leave_no_file(tiny_features, tmp_path, monkeypatch):
    """The stage spools each detector's descriptors to an unnamed file and writes the cache from it in blocks:
    read back one row per block, the caches hold the same arrays as read back in one block, and the output
    folder holds only the caches and the stats (the spool files are gone)."""
    import fraglib.data.dataset as dataset
    from fraglib.data import Dataset
    from fraglib.vision.features import extract

    root, ds, cfg, _ = tiny_features
    small = Dataset(ds.name, ds.image_dir, ds.images[:3], [])
    extract(small, cfg, tmp_path / "whole", progress=False, region_views=True)
    monkeypatch.setattr(dataset, "BLOCK_BYTES", 1)  # one 1280-float row per block
    extract(small, cfg, tmp_path / "rows", progress=False, region_views=True)
    assert sorted(p.name for p in (tmp_path / "rows").iterdir()) == [
        "features_stats.json",
        "grid.npz",
        "rcnn.npz",
        "top36.npz",
    ]
    for view in ("rcnn", "top36", "grid"):
        a, b = np.load(tmp_path / "whole" / f"{view}.npz"), np.load(tmp_path / "rows" / f"{view}.npz")
        assert a.files == b.files and a["features"].shape[0] > 3
        for key in a.files:
            assert a[key].tobytes() == b[key].tobytes(), (view, key)


def test_region_views_of_the_attention_model(tiny_features, tmp_path):
    """top36: the full frame + up to 36 proposals, the rcnn detections first (same score, same NMS);
    grid: the full frame + 6 x 6 cells tiling the image."""
    from fraglib.data import Dataset
    from fraglib.data.cache import FeatureCache
    from fraglib.vision.features import extract, grid_boxes

    root, ds, cfg, _ = tiny_features
    small = Dataset(ds.name, ds.image_dir, ds.images[:3], [])
    stats = extract(small, cfg, tmp_path, progress=False, region_views=True)
    rcnn, top, grid = (FeatureCache.load(tmp_path / f"{d}.npz") for d in ("rcnn", "top36", "grid"))
    for n in range(3):
        r, t, g = rcnn.rows(n), top.rows(n), grid.rows(n)
        assert top.is_full[t][0] and grid.is_full[g][0] and 1 < t.stop - t.start <= 37 and g.stop - g.start == 37
        k = r.stop - r.start
        np.testing.assert_array_equal(top.boxes[t][:k], rcnn.boxes[r])  # greedy NMS: a prefix of the longer list
        w, h = top.boxes[t][0][2:]
        cells = grid.boxes[g][1:]
        np.testing.assert_allclose(((cells[:, 2] - cells[:, 0]) * (cells[:, 3] - cells[:, 1])).sum(), w * h, rtol=1e-5)
    assert grid_boxes(60, 30, 2).tolist() == [[0, 0, 30, 15], [30, 0, 60, 15], [0, 15, 30, 30], [30, 15, 60, 30]]
    assert set(stats["fragments_per_image_mean"]) == {"rcnn", "top36", "grid"}


def test_existing_caches_never_replaced_without_overwrite(tiny_features, tmp_path):
    """`features --limit 2` once replaced the full cache in the default folder, and a run without
    truth left an old groundtruth.npz beside a new rcnn.npz."""
    from fraglib.data import Dataset
    from fraglib.data.synthetic import synthetic_truth
    from fraglib.vision.features import extract

    root, ds, cfg, _ = tiny_features
    small = Dataset(ds.name, ds.image_dir, ds.images[:4], [])
    extract(small, cfg, tmp_path, synthetic_truth(root / "ground_truth.json"), progress=False)
    full = (tmp_path / "rcnn.npz").read_bytes()
    with pytest.raises(FileExistsError, match="rcnn.npz.*--overwrite"):
        extract(Dataset(ds.name, ds.image_dir, ds.images[:2], []), cfg, tmp_path, progress=False)
    assert (tmp_path / "rcnn.npz").read_bytes() == full
    extract(Dataset(ds.name, ds.image_dir, ds.images[:2], []), cfg, tmp_path, progress=False, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["features_stats.json", "rcnn.npz"]  # no stale groundtruth


def test_no_usable_images_stop_the_stage(tiny_features, tmp_path):
    """A wrong image folder once gave an empty cache (every image "missing") and exit 0."""
    from fraglib.data import Dataset
    from fraglib.vision.features import extract
    from fraglib.vision.regions import check_images_usable

    root, ds, cfg, _ = tiny_features
    with pytest.raises(FileNotFoundError, match="nowhere: image folder of dataset"):
        extract(Dataset(ds.name, tmp_path / "nowhere", ds.images[:3], []), cfg, tmp_path / "f", progress=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"only 0 of 3 images .* usable \(missing 3\).*nothing was written"):
        extract(Dataset(ds.name, empty, ds.images[:3], []), cfg, tmp_path / "f", progress=False)
    assert not (tmp_path / "f").exists()
    (tmp_path / "dangling").symlink_to(tmp_path / "gone", target_is_directory=True)
    with pytest.raises(NotADirectoryError, match="dangling: not a folder"):  # before any work
        extract(Dataset(ds.name, empty, ds.images[:3], []), cfg, tmp_path / "dangling", progress=False)
    check_images_usable(["", "", "corrupt", "missing"], ds)  # half usable: a counted skip
    with pytest.raises(ValueError, match="corrupt 2, missing 1"):
        check_images_usable(["", "corrupt", "corrupt", "missing"], ds)


def test_on_bad_image_error_names_the_file(tiny_features, tmp_path):
    from fraglib.vision.features import extract

    root, ds, cfg, _ = tiny_features
    from fraglib.data import Dataset

    with pytest.raises(BadImage, match="000003.png"):
        extract(
            Dataset(ds.name, ds.image_dir, ds.images[2:4], []),
            VisionConfig(**{**cfg.__dict__, "on_bad_image": "error", "num_workers": 0}),
            tmp_path,
            progress=False,
        )


# ------------------------------------------------------------------ the CNN itself
@pytest.mark.parametrize("variant", [0, 2])
def test_backbone_keeps_the_lite_relu6(variant):
    """EfficientNet-Lite uses ReLU6, not swish: the head activation lies in [0, 6]. (Replacing it
    by swish — what the package's ``set_swish`` does — silently ruins every descriptor.)"""
    import torch

    from fraglib.vision.rcnn import Backbone

    bb = Backbone(variant)
    x = Backbone.to_input(_photo(96, 64), torch.device("cpu"))
    f = bb.feature_map(x)
    assert f.shape[1] == 1280
    assert float(f.min()) >= 0.0 and float(f.max()) <= 6.0
    assert float(f.max()) > 0.0


def test_backbone_recognises_pascal_photographs():
    """On real photographs the ImageNet head names the class: most of the first 20 Pascal1K
    photographs of the category 'dog' get a dog breed as top-1 (with swish instead of ReLU6: few)."""
    import torch

    from fraglib.data.readers.pascal1k import read_pascal1k
    from fraglib.vision.rcnn import Backbone

    from conftest import shared_data

    ds = read_pascal1k(shared_data("pascal1k"))
    bb = Backbone(0)
    dogs = range(151, 269)  # ImageNet dog breeds
    hits = n = 0
    for im in ds.images:
        if im.get("category") != "dog":
            continue
        arr, _ = load_image(ds.image_dir / im["filename"])
        arr = np.asarray(Image.fromarray(arr).resize((224, 224), Image.BILINEAR))
        f = bb.feature_map(Backbone.to_input(arr, torch.device("cpu"))).mean((2, 3))
        hits += int(bb.classify(f).argmax()) in dogs
        n += 1
        if n == 20:
            break
    assert n == 20
    assert hits >= 10, f"only {hits}/20 Pascal1K dog photographs classified as a dog breed"


# ------------------------------------------------------------------ the regions cache (proposals + maps once)
def test_features_from_regions_cache_match_direct(tiny_features, tmp_path):
    """A regions cache (skips kept in place) gives the same boxes as computing from the images,
    and descriptors within float16 rounding of them."""
    from fraglib.data.cache import FeatureCache
    from fraglib.data.synthetic import synthetic_truth
    from fraglib.vision.features import extract
    from fraglib.vision.regions import Regions, build

    root, ds, cfg, _ = tiny_features
    meta = build(ds, cfg, tmp_path / "regions.npz", progress=False)
    assert meta["skipped"] == {"missing": 1, "corrupt": 1}
    regions = Regions.load(tmp_path / "regions.npz")
    truth = synthetic_truth(root / "ground_truth.json")
    extract(ds, cfg, tmp_path / "via", truth, progress=False, regions=regions)
    for d in ("rcnn", "groundtruth"):
        a = FeatureCache.load(root / "features" / f"{d}.npz", ds)
        b = FeatureCache.load(tmp_path / "via" / f"{d}.npz", ds)
        assert b.status.tolist() == a.status.tolist() and b.offsets.tolist() == a.offsets.tolist()
        # the score order can swap near-tied proposals: compare the sets of boxes per image
        same = sum(
            np.array_equal(np.sort(a.boxes[a.rows(n)], 0), np.sort(b.boxes[b.rows(n)], 0))
            for n in range(len(ds.images))
        )
        assert same >= len(ds.images) - 3
        full = a.is_full
        np.testing.assert_allclose(b.features[full], a.features[full], rtol=0.02, atol=0.02)


def test_regions_cache_refuses_other_settings_and_images(tiny_features, tmp_path):
    import dataclasses

    from fraglib.data import Dataset
    from fraglib.vision.features import extract
    from fraglib.vision.regions import Regions, build

    root, ds, cfg, _ = tiny_features
    small = Dataset(ds.name, ds.image_dir, ds.images[:3], [])
    build(small, cfg, tmp_path / "r.npz", progress=False)
    regions = Regions.load(tmp_path / "r.npz")
    with pytest.raises(ValueError, match="image_size=320 but the regions cache was built with 512"):
        extract(small, dataclasses.replace(cfg, image_size=320), tmp_path / "a", progress=False, regions=regions)
    with pytest.raises(ValueError, match="lacks 1 image"):
        extract(Dataset(ds.name, ds.image_dir, ds.images[:4], []), cfg, tmp_path / "b", progress=False, regions=regions)
    with pytest.raises(ValueError, match="region_features=crop needs the images"):
        extract(
            small, dataclasses.replace(cfg, region_features="crop"), tmp_path / "c", progress=False, regions=regions
        )
    with pytest.raises(FileNotFoundError, match="regions cache not found"):
        Regions.load(tmp_path / "nothing.npz")


def test_selective_search_depends_on_the_image_alone(tiny_synth):
    """OpenCV ranks regions with C rand(): without reseeding, an image's proposals (their order and
    which survive max_boxes) changed with the calls made before it in the process."""
    from fraglib.vision.rcnn import load_image, selective_search

    root, _ = tiny_synth
    a, b = load_image(root / "images" / "000000.png")[0], load_image(root / "images" / "000001.png")[0]
    first = selective_search(a, 200, 12, 40)
    selective_search(b, 200, 12, 40)
    np.testing.assert_array_equal(selective_search(a, 200, 12, 40), first)


def test_roi_descriptors_equal_torchvision_roi_align():
    """The matmul form reproduces roi_align (aligned, 2x2 samples) averaged over its bins, for
    boxes inside, across and beyond the image edges, tiny and whole-image boxes."""
    import torch
    from torchvision.ops import roi_align

    from fraglib.vision.rcnn import roi_descriptors

    g = torch.Generator().manual_seed(0)
    fmap = torch.randn(1, 7, 9, 13, generator=g)
    scale = 0.8  # original px -> input px; the map is input / 32
    W, H = 13 * 32 / scale, 9 * 32 / scale
    rng = np.random.default_rng(0)
    xy = rng.uniform(-0.2, 1.1, (200, 2)) * [W, H]
    wh = rng.uniform(0.005, 0.8, (200, 2)) * [W, H]
    boxes = np.concatenate([np.concatenate([xy, xy + wh], 1), [[0, 0, W, H], [5, 5, 6, 6], [W - 3, H - 3, W, H]]])
    boxes = boxes.astype(np.float32)
    ours = roi_descriptors(fmap, boxes, scale)
    ref = roi_align(
        fmap,
        [torch.from_numpy(boxes) * scale],
        output_size=(3, 3),
        spatial_scale=1 / 32,
        sampling_ratio=2,
        aligned=True,
    ).mean(dim=(2, 3))
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


def test_report_recall_functions_on_fake_voc_boxes(tiny_full, tmp_path):
    """The vision report's recall tables (fraglib.vision.recall) on the tiny benchmark, its true boxes
    written as VOC files: every object is found by the groundtruth detector's cache at IoU >= 0.5
    only if a kept box overlaps it, and the floor never beats the ceiling."""
    import json
    from pathlib import Path

    from fraglib.data import read_karpathy_json
    from fraglib.data.cache import FeatureCache
    from fraglib.data.synthetic import synthetic_truth
    from fraglib.vision.recall import floor_and_ceiling, recall_by_size, recall_curve, voc_per_class

    ds = read_karpathy_json(tiny_full / "dataset.json")
    truth = synthetic_truth(tiny_full / "ground_truth.json")
    rec = {r["imgid"]: r for r in json.loads((tiny_full / "ground_truth.json").read_text())["images"]}
    for im in ds.images:
        objs = "".join(
            f"<object><name>{o['shape']}</name><difficult>0</difficult><bndbox><xmin>{o['box'][0]}</xmin>"
            f"<ymin>{o['box'][1]}</ymin><xmax>{o['box'][2]}</xmax><ymax>{o['box'][3]}</ymax></bndbox></object>"
            for o in rec[im["imgid"]]["objects"]
        )
        (tmp_path / (Path(im["filename"]).stem + ".xml")).write_text(f"<annotation>{objs}</annotation>")
    caches = {d: FeatureCache.load(tiny_full / "features" / f"{d}.npz", ds) for d in ("rcnn", "groundtruth")}
    curve = recall_curve(caches, ds.images, truth, range(1, 4))
    assert list(curve.k.unique()) == [1, 2, 3] and curve.recall.between(0, 1).all()
    assert curve.groupby("detector").recall.is_monotonic_increasing.all()
    per_class = voc_per_class(caches["rcnn"], ds.images, tmp_path)
    assert per_class["objects"].sum() == sum(len(truth[im["imgid"]]) for im in ds.images)
    settings = caches["rcnn"].meta["settings"]
    summary, sample = floor_and_ceiling(ds, caches["rcnn"], truth, settings, "", n_sample=3)
    assert len(sample) == 3 and summary.between(0, 1).all()
    floor = summary[[k for k in summary.index if k.startswith("floor")][0]]
    ceiling = summary[[k for k in summary.index if k.startswith("ceiling")][0]]
    assert floor <= ceiling
    assert set(recall_by_size(caches, tiny_full / "ground_truth.json").columns) == {"rcnn", "groundtruth"}


def test_shards_merge_into_the_single_process_caches(tiny_full, tmp_path):
    """Two shards (contiguous images) extracted apart and merged give the very arrays one process wrote
    (tiny_full's caches, same settings); a missing shard or one of other settings is refused by name."""
    import shutil

    from fraglib.data.synthetic import synthetic_truth
    from fraglib.vision.features import extract, merge_shards, shard_dataset, shard_dir

    ds = read_karpathy_json(tiny_full / "dataset.json")
    truth = synthetic_truth(tiny_full / "ground_truth.json")
    cfg = VisionConfig(max_proposals=100, num_workers=0)
    out = tmp_path / "features"
    for i in range(2):
        extract(shard_dataset(ds, i, 2), cfg, shard_dir(out, i, 2), truth, progress=False, region_views=True)
    stats = merge_shards(ds, out, 2, truth)
    for det in ("rcnn", "groundtruth", "top36", "grid"):
        a, b = np.load(tiny_full / "features" / f"{det}.npz"), np.load(out / f"{det}.npz")
        assert sorted(a.files) == sorted(b.files)
        for k in a.files:
            assert np.array_equal(a[k], b[k]), (det, k)
    one = json.loads((tiny_full / "features" / "features_stats.json").read_text())
    assert stats["images"] == one["images"] == len(ds.images) and stats["shards"] == 2
    assert stats["recall_iou50_rcnn"] == one["recall_iou50_rcnn"]
    assert stats["fragments_per_image_mean"] == one["fragments_per_image_mean"]
    with pytest.raises(FileExistsError):
        merge_shards(ds, out, 2, truth)  # never overwrites silently
    other = tmp_path / "other"
    shutil.copytree(shard_dir(out, 0, 2), shard_dir(other, 0, 2))
    with pytest.raises(FileNotFoundError, match="missing shard.*1of2"):
        merge_shards(ds, other, 2)
    extract(
        shard_dataset(ds, 1, 2),
        VisionConfig(max_proposals=50, num_workers=0),
        shard_dir(other, 1, 2),
        truth,
        progress=False,
        region_views=True,
    )
    with pytest.raises(ValueError, match="other settings than shard 0"):
        merge_shards(ds, other, 2)
    assert stats["pictures_sha256"] == one["pictures_sha256"]
    # a shard computed from other pictures under the same file names is refused by their hash
    pics = tmp_path / "pics"
    shutil.copytree(ds.image_dir, pics)
    moved = Dataset(ds.name, pics, ds.images, ds.sentences)
    third = tmp_path / "third"
    for i in range(2):
        shutil.copytree(shard_dir(out, i, 2), shard_dir(third, i, 2))
    victim = moved.image_path(len(ds.images) - 1)  # an image of shard 1
    victim.write_bytes(moved.image_path(0).read_bytes())
    with pytest.raises(ValueError, match=r"1of2: computed from other pictures .* same file names"):
        merge_shards(moved, third, 2)


def test_features_never_read_an_image_outside_the_image_folder(tiny_synth, tmp_path, capsys):
    """A dataset.json name like ../../../etc/passwd, or a link out of images/, was opened (counted corrupt, or used)."""
    from fraglib.vision.features import extract, main

    src, _ = tiny_synth
    root = tmp_path / "synth"
    (root / "images").mkdir(parents=True)
    d = json.loads((src / "dataset.json").read_text())
    d["images"] = d["images"][:2]
    for im in d["images"]:
        shutil.copy(src / "images" / im["filename"], root / "images")
    outside = tmp_path / "private.png"
    shutil.copy(src / "images" / d["images"][1]["filename"], outside)
    d["images"][1]["filename"] = f"../../../..{outside}"
    (root / "dataset.json").write_text(json.dumps(d))
    with pytest.raises(SystemExit) as exit_:
        main(["--dataset-dir", str(root)])
    err = capsys.readouterr().err
    assert (
        exit_.value.code == 2
        and f"images[1] (imgid {d['images'][1]['imgid']}): file name '../../../..{outside}' "
        "leads outside the image folder"
        in err
    ), err
    (root / "images" / "linked.png").symlink_to(outside)
    d["images"][1]["filename"] = "linked.png"
    (root / "dataset.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match=r"file name 'linked.png': it is .*private.png, outside the image folder"):
        extract(
            read_karpathy_json(root / "dataset.json"),
            VisionConfig(max_proposals=20, num_workers=0),
            tmp_path / "features",
            progress=False,
        )
    assert not (tmp_path / "features").exists()
