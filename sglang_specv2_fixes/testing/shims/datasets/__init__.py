"""Import-only stand-in for Hugging Face ``datasets`` on machines that lack it (the GPU bundle does):
``sglang.test.test_utils`` imports ``sglang.bench_serving``, which imports ``datasets`` at module level.
The registered tests never load a dataset; calling this one raises. ``fingerprint.Hasher`` is the one part that
works: outlines hashes its tokenizer with it (ci/gpu/env.sh puts this folder last on the servers' PYTHONPATH when
the outlines overlay is carried)."""


def load_dataset(*args, **kwargs):
    raise RuntimeError("the 'datasets' package is not installed; registered tests do not load datasets")


class Dataset:  # referenced in annotations only
    pass
