import numpy as np
import pytest

from fraglib.data.voc import read_voc, voc_truth

from conftest import shared_data

XML = """<annotation><filename>x.jpg</filename>
<object><name>person</name><truncated>1</truncated><difficult>0</difficult>
 <bndbox><xmin>10</xmin><ymin>20</ymin><xmax>110</xmax><ymax>220</ymax></bndbox>
 <part><name>head</name><bndbox><xmin>40</xmin><ymin>20</ymin><xmax>60</xmax><ymax>40</ymax></bndbox></part>
</object>
<object><name>dog</name><difficult>1</difficult>
 <bndbox><xmin>1</xmin><ymin>1</ymin><xmax>5</xmax><ymax>5</ymax></bndbox></object>
</annotation>"""


def test_top_level_objects_flags_and_coordinates(tmp_path):
    (tmp_path / "x.xml").write_text(XML)
    objs = read_voc(tmp_path / "x.xml")
    assert [o["name"] for o in objs] == ["person", "dog"]  # the <part> is not an object
    assert objs[0]["box"] == [9, 19, 110, 220] and objs[0]["truncated"] and not objs[0]["difficult"]
    assert objs[1]["difficult"]
    t = voc_truth(tmp_path, [{"imgid": 3, "filename": "x.jpg"}])
    np.testing.assert_array_equal(t[3], [[9, 19, 110, 220]])  # difficult objects left out


def test_bad_files_are_named(tmp_path):
    (tmp_path / "y.xml").write_text("<annotation><object>")
    with pytest.raises(ValueError, match="y.xml"):
        read_voc(tmp_path / "y.xml")
    with pytest.raises(FileNotFoundError, match="z.xml"):
        voc_truth(tmp_path, [{"imgid": 0, "filename": "z.jpg"}])


def test_real_annotations():
    root = shared_data("pascal1k")
    from fraglib.data.readers.pascal1k import read_pascal1k

    ds = read_pascal1k(root)
    t = voc_truth(root / "annotations", ds.images, include_difficult=True)
    assert sum(len(b) for b in t.values()) == 3439
