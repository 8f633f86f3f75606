"""The recipes as data: each metadata.yaml read and resolved into a configuration, the
performance math, image names and the NeMo settings of a published row."""
