"""The synthetic benchmark: generated, not read (:mod:`fraglib.data.synthetic`, docs/synthetic.md).

python -m fraglib.data synthetic --params params.yaml --out data/synthetic
"""

from __future__ import annotations

from fraglib.data.synthetic import main  # noqa: F401  (the reader's command: the generator)

TITLE = "synthetic benchmark"
CREDIT = "Synthetic benchmark drawn by fraglib.data.synthetic (this project; params.yaml synthetic)."
READS_PARAMS = True  # its settings come from --params (the other readers take theirs on the command line)
