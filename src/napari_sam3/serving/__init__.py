"""sam3-serve: the repository check and the supervised CPU tritonserver."""
