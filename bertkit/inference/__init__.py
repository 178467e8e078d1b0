"""Inference: ``Predictor`` (a trained model answering in memory), feature extraction and ONNX export."""

from bertkit.utils.moved import forwarding

__getattr__ = forwarding(__name__, "bertkit.inference.predictor")  # release 0.1's bertkit.inference
