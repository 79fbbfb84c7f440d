"""Datasets in Karpathy's format, their converters, the synthetic benchmark and box annotations.

``python -m fraglib.data pascal1k|flickr8k|flickr30k|karpathy`` converts (see ``__main__``).
"""

from fraglib.data.dataset import (
    SPLITS,
    Dataset,
    fold_split,
    open_npz,
    read_karpathy_json,
    read_pascal1k,
    save_npz,
    stratified_folds,
    stratified_split,
    tokenize,
    write_karpathy_json,
)

__all__ = [
    "SPLITS",
    "Dataset",
    "open_npz",
    "read_karpathy_json",
    "read_pascal1k",
    "fold_split",
    "save_npz",
    "stratified_folds",
    "stratified_split",
    "tokenize",
    "write_karpathy_json",
]
