"""The napari plugin: reader, writers, sample data, settings and the dock widgets."""
