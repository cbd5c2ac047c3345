"""``datasets.fingerprint.Hasher`` for machines without ``datasets``: outlines' ``TransformerTokenizer.__hash__``
(outlines 0.1.x, ``outlines/models/transformers.py``) imports it to key its caches by the tokenizer, on every regex
compile of SGLang's outlines grammar backend. Like the real one it hashes the object's dill pickle (``datasets`` runs
xxh64 over its own dill pickler's bytes; here sha256 over ``dill.dumps``): the same object hashes the same in every
process, which is all outlines asks of it (a cache key)."""

import hashlib

try:
    import dill as _pickle
except ImportError:  # pragma: no cover - dill is in the GPU bundle and the CPU environment
    import pickle as _pickle


class Hasher:
    @classmethod
    def hash_bytes(cls, value) -> str:
        m = hashlib.sha256()
        for x in [value] if isinstance(value, bytes) else value:
            m.update(x)
        return m.hexdigest()

    @classmethod
    def hash(cls, value) -> str:
        return cls.hash_bytes(_pickle.dumps(value))
