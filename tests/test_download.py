"""The Pascal1K downloader, offline: a page and images served from file:// URLs the test builds."""

import json

import pytest

from fraglib.data.readers.pascal1k import download_pascal1k, parse_page, sha256

PAGE = """<html><body><table>
<tr><td><img src="cat/2008_000001.jpg"/></td><td><table>
<tr><td> A cat on a sofa. </td></tr><tr><td>Grey cat &amp; pillow</td></tr></table></td></tr>
<tr><td><img src="dog/2008_000002.jpg"/></td><td><table><tr><td>A dog.</td></tr></table></td></tr>
</table></body></html>"""


def _site(tmp_path):
    site = tmp_path / "site"
    for cat, name, data in (("cat", "2008_000001.jpg", b"cat-bytes"), ("dog", "2008_000002.jpg", b"dog-bytes")):
        (site / cat).mkdir(parents=True)
        (site / cat / name).write_bytes(data)
    (site / "index.html").write_text(PAGE)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(
        json.dumps(
            {
                "2008_000001.jpg": sha256(site / "cat" / "2008_000001.jpg"),
                "2008_000002.jpg": sha256(site / "dog" / "2008_000002.jpg"),
            }
        )
    )
    return site, manifest


def test_parse_page():
    items = parse_page(PAGE)
    assert items["2008_000001.jpg"] == {
        "category": "cat",
        "sentences": ["A cat on a sofa.", "Grey cat & pillow"],
        "src": "cat/2008_000001.jpg",
    }
    assert items["2008_000002.jpg"]["sentences"] == ["A dog."]


def test_download_writes_the_project_layout_and_verifies(tmp_path):
    site, manifest = _site(tmp_path)
    rep = download_pascal1k(tmp_path / "out", f"file://{site}/", manifest)
    assert rep == {"images": 2, "downloaded": 2, "verified": 2, "not_in_manifest": 0, "manifest_not_on_page": 0}
    data = json.loads((tmp_path / "out" / "sentences.json").read_text())
    assert data["2008_000001.jpg"]["category"] == "cat"
    assert (tmp_path / "out" / "images" / "2008_000002.jpg").read_bytes() == b"dog-bytes"


def test_checksum_mismatch_stops_with_names(tmp_path):
    site, manifest = _site(tmp_path)
    (site / "dog" / "2008_000002.jpg").write_bytes(b"tampered")
    with pytest.raises(RuntimeError, match="2008_000002.jpg"):
        download_pascal1k(tmp_path / "out", f"file://{site}/", manifest)


def test_manifest_matches_the_shared_copy():
    from fraglib.data.readers.pascal1k import MANIFEST

    from conftest import shared_data

    root = shared_data("pascal1k")
    known = json.loads(MANIFEST.read_text())
    assert len(known) == 1000
    for name in sorted(known)[:20]:
        assert sha256(root / "images" / name) == known[name]


def test_duplicate_names_and_unlisted_images_refused(tmp_path):
    """A file name listed twice kept only its last captions; an image missing from the checksum
    manifest was accepted silently."""
    with pytest.raises(ValueError, match="2008_000001.jpg.*twice.*cat/2008_000001.jpg and dog/2008_000001.jpg"):
        parse_page(PAGE.replace("dog/2008_000002.jpg", "dog/2008_000001.jpg"))
    site, manifest = _site(tmp_path)
    manifest.write_text(json.dumps({"2008_000001.jpg": sha256(site / "cat" / "2008_000001.jpg")}))
    with pytest.raises(RuntimeError, match=r"1 image\(s\).*not in the checksum manifest.*2008_000002.jpg"):
        download_pascal1k(tmp_path / "out", f"file://{site}/", manifest)
    assert not (tmp_path / "out").exists()  # refused before writing anything
    rep = download_pascal1k(tmp_path / "out", f"file://{site}/", manifest, allow_unverified=True)
    assert rep["not_in_manifest"] == 1 and rep["verified"] == 1


def test_an_interrupted_download_leaves_no_partial_image(tmp_path, monkeypatch):
    """An image was fetched straight into its place: a cut connection left half a file there."""
    import urllib.request

    site, manifest = _site(tmp_path)

    def cut(url, dest):
        with open(dest, "wb") as f:
            f.write(b"half")
        raise OSError("connection reset")

    monkeypatch.setattr(urllib.request, "urlretrieve", cut)
    with pytest.raises(OSError, match="connection reset"):
        download_pascal1k(tmp_path / "out", f"file://{site}/", manifest)
    assert list((tmp_path / "out" / "images").iterdir()) == []
