"""Registration marker for GPU tests, read from each file's AST by ci/run_registered.py (like upstream's
``register_cuda_ci``): the call does nothing at run time.

    register_specv2_ci(est_time=120, suite="specv2-gpu", releases=["0.5.11", "0.5.12.post1"],
                       bug_in=["0.5.11"])

``releases``: where the file runs; ``bug_in``: releases whose stock build must FAIL the file (A/B:
the runner runs every file with SGLANG_SPECV2_FIXES=off and =auto and checks both outcomes).
"""


def register_specv2_ci(est_time: float, suite: str, releases, bug_in=(), disabled: str = None):
    return None
