"""How a model runs: the registry of backends (``registry``, the one module the models import from here) and the
kernels behind it: the real positions of a padded batch (``positions``), recurrences over padded sequences
(``recurrence``), CPU products on oneDNN (``linear``)."""
