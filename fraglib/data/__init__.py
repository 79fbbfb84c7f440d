"""Datasets in Karpathy's format, their readers (:mod:`fraglib.data.readers`), the synthetic benchmark and box
annotations.

``python -m fraglib.data NAME`` runs reader NAME (``python -m fraglib.data`` lists them).
"""

from fraglib.data.dataset import (
    SPLITS,
    Dataset,
    fold_split,
    open_npz,
    read_karpathy_json,
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
    "fold_split",
    "save_npz",
    "stratified_folds",
    "stratified_split",
    "tokenize",
    "write_karpathy_json",
]
