"""signclust: script clustering — grouping sign tokens (image crops, in reading order) into sign types.

    from signclust import SignClusterer
    model = SignClusterer(method="lm").fit(images, text_ids, positions)
    model.labels_, model.n_types_, model.predict(new_images)

See :class:`signclust.api.SignClusterer`; the ``signclust`` command runs the pipeline's stages.
"""
__version__ = "0.1.0"
__all__ = ["SignClusterer", "__version__"]


def __getattr__(name):      # lazy: `import signclust` stays light (no torch) until the API is used
    if name == "SignClusterer":
        from signclust.api import SignClusterer
        return SignClusterer
    raise AttributeError(f"module 'signclust' has no attribute '{name}'")
