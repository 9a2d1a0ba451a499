"""Export SAM3 to static-shape fp32 ONNX graphs and a Triton model repository."""
