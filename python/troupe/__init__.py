"""Troupe: TensorFlow 2's distributed training, in C++ on the actor model, from Python.

The package gives Troupe's runtime the shapes a TensorFlow user knows: ``troupe.keras``
(a Keras model trained by Troupe: ``load_model``, ``Model.from_keras``, ``fit``,
``evaluate``, ``predict``, ``save``, ``to_keras``), ``troupe.data`` (datasets executed in
C++), ``troupe.distribute`` (TF_CONFIG clusters, ``Server``, ``ParameterServerStrategy``)
and ``troupe.errors`` (TensorFlow's error classes). The training loop, the data
pipeline and every step run in C++ (``troupe._troupe``); Python declares and reads.
"""

from troupe import errors  # noqa: F401  (first: the C++ module raises its classes)
from troupe import _troupe  # noqa: F401
from troupe import data, distribute, keras  # noqa: F401

__all__ = ["data", "distribute", "errors", "keras"]
