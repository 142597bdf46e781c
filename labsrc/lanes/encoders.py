"""An optional sentence-transformers encoder, loaded lazily, failing loudly.

The lab runs without any model: :class:`~labsrc.lanes.dense.HashingEncoder` is the
deterministic default. For real semantic recall, install the ``embed`` extra
(``pip install 'hybrid-retrieval-lab[embed]'``) and pass
``SentenceTransformerEncoder()`` as the embedder.

Nothing is imported or loaded until the first :meth:`~SentenceTransformerEncoder.encode`
(or an explicit :meth:`~SentenceTransformerEncoder.load`). Loading either
works or raises an :class:`EmbedderLoadError` (a
:class:`~labsrc.errors.LabError`) that names the model and the reason: a missing
package, a missing or corrupt model, no memory. It never falls back to another
encoder behind the caller's back: a silent fallback would turn a broken deployment
into quietly worse search. ``local_files_only=True`` (the default) also
means it never downloads a model at run time.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from labsrc.errors import InvalidArgument, LabError, MissingDependency

__all__ = ["DEFAULT_SENTENCE_MODEL", "EmbedderLoadError", "SentenceTransformerEncoder"]

DEFAULT_SENTENCE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

_INSTALL = "pip install 'hybrid-retrieval-lab[embed]'"


class EmbedderLoadError(LabError, RuntimeError):
    """An embedding model could not be loaded; ``model`` and ``reason`` say which and why."""

    def __init__(self, model: str, reason: str) -> None:
        self.model = model
        self.reason = reason
        super().__init__(f"cannot load embedding model {model!r}: {reason}")


class SentenceTransformerEncoder:
    """``encode(list[str]) -> ndarray [N, D]`` with a sentence-transformers model.

    Parameters
    ----------
    model:
        A model name or a local directory.
    device:
        ``"cpu"``, ``"cuda"``, ... or ``None`` for the library's choice.
    normalize:
        L2-normalise the embeddings (cosine similarity then equals the dot product).
    local_files_only:
        Only use models already on disk; never download.
    batch_size:
        Texts per forward pass.
    """

    def __init__(
        self,
        model: str = DEFAULT_SENTENCE_MODEL,
        *,
        device: str | None = None,
        normalize: bool = True,
        local_files_only: bool = True,
        batch_size: int = 32,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise InvalidArgument(f"model must be a model name or path, not {model!r}")
        self.model_name = model
        self.device = device
        self.normalize = normalize
        self.local_files_only = local_files_only
        self.batch_size = batch_size
        self.version = f"sentence-transformers:{model}"
        self._model: Any = None

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def _import(self) -> Callable[..., Any]:
        try:
            module = importlib.import_module("sentence_transformers")
        except ImportError as exc:
            raise MissingDependency(
                f"cannot load embedding model {self.model_name!r}: the sentence-transformers package is not "
                f"installed ({exc}); install the 'embed' extra: {_INSTALL}"
            ) from exc
        loader = getattr(module, "SentenceTransformer", None)
        if loader is None:
            raise EmbedderLoadError(self.model_name, "sentence_transformers has no SentenceTransformer class")
        return loader

    def load(self) -> SentenceTransformerEncoder:
        """Load the model now (otherwise the first ``encode`` does). Returns ``self``."""
        if self._model is not None:
            return self
        loader = self._import()
        try:
            model = loader(self.model_name, device=self.device, local_files_only=self.local_files_only)
        except MemoryError as exc:
            raise EmbedderLoadError(self.model_name, f"out of memory while loading ({exc})") from exc
        except Exception as exc:  # noqa: BLE001 - any failure inside the library is a load failure
            raise EmbedderLoadError(self.model_name, f"{type(exc).__name__}: {exc}") from exc
        if not callable(getattr(model, "encode", None)):
            raise EmbedderLoadError(self.model_name, "the loaded object has no encode() method")
        self._model = model
        return self

    def encode(self, texts: list[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise InvalidArgument("encode takes a list of texts, not a single string")
        model = self.load()._model
        if not texts:
            dimension = getattr(model, "get_sentence_embedding_dimension", lambda: 0)() or 0
            return np.zeros((0, int(dimension)))
        vectors = model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=self.normalize, convert_to_numpy=True
        )
        matrix = np.asarray(vectors, dtype=np.float64)
        if matrix.ndim != 2 or matrix.shape[0] != len(texts):
            raise InvalidArgument(f"model {self.model_name!r} returned shape {matrix.shape} for {len(texts)} texts")
        return matrix

    def __repr__(self) -> str:
        return f"SentenceTransformerEncoder({self.model_name!r}, loaded={self.loaded})"
