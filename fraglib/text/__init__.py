"""Captions -> parses -> sentence fragments (``python -m fraglib.text parse|fragments``)."""
