"""Frontends: the ONNX importer, the PyTorch entry and the Python builder API."""
