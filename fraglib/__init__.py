"""fraglib: a reproducible study of Deep Fragment Embeddings (Karpathy, Joulin, Fei-Fei, NIPS 2014)."""

__version__ = "0.1.0"
