"""Images -> proposals -> detections -> CNN descriptors (the image fragments), and their recall."""
