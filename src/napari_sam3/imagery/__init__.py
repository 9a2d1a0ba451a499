"""Raster in: reading any raster, its bands, the stretch the model sees, the letterbox, the lazy pyramid."""
