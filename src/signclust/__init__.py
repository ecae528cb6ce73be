"""signclust: script clustering — grouping sign tokens (image crops, in reading order) into sign types."""
__version__ = "0.1.0"
