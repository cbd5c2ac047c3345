"""Registration marker of the registered GPU tests, read from each file's AST by ci/run_registered.py (like
upstream's ``register_cuda_ci``): the call does nothing at run time.

    register_specv2_ci(est_time=200, suite="specv2-gpu", releases="fix:tree-drafting", bug_in="fix:tree-drafting")

``gpus``: GPUs one run of the file needs (``--tp-size`` / ``--dp-size`` rows: 2; the runner gives it that many
and reports it "not run" on a machine with fewer); ``releases``: where the file runs; ``bug_in``: releases whose stock build must FAIL the file (A/B: the runner runs
every file with SGLANG_SPECV2_FIXES=off and =auto and checks both outcomes). Each is a release set
(``sglang_specv2_fixes.releases.release_set``: "all", "patched", "gpu", "report-only", "fix:<fix-name>" = where
the plugin patches that fix, "up-to:<v>" / "from:<v>" = releases up to / from v, "a&b" = both) or a literal list of
versions.
"""

import ast

REQUIRED = ("est_time", "suite", "releases")


def register_specv2_ci(est_time: float, suite: str, releases, bug_in=(), disabled: str = None, gpus: int = 1):
    return None


def resolve(releases):
    """A release set spec (str) -> its versions (``release_set``); a literal list or tuple -> a list of it."""
    if isinstance(releases, str):
        from ..releases import release_set

        return release_set(releases)
    return list(releases)


def registration(path):
    """The ``register_specv2_ci(...)`` keywords of a registered file, read from its AST (literals only; nothing is
    imported), with ``releases`` and ``bug_in`` resolved to version lists. A file without the call, or without
    ``if __name__ == "__main__":``, is an error."""
    tree = ast.parse(open(path).read(), path)
    reg = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register_specv2_ci":
            reg = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
    has_main = any(
        isinstance(n, ast.If) and isinstance(n.test, ast.Compare) and getattr(n.test.left, "id", "") == "__name__"
        for n in tree.body
    )
    if reg is None or not has_main:
        raise ValueError(f"{path}: needs register_specv2_ci(...) and if __name__ == '__main__':")
    for key in REQUIRED:
        if key not in reg:
            raise ValueError(f"{path}: register_specv2_ci lacks {key}=")
    reg.setdefault("bug_in", [])
    reg.setdefault("gpus", 1)
    if not isinstance(reg["gpus"], int) or reg["gpus"] < 1:
        raise ValueError(f"{path}: register_specv2_ci gpus={reg['gpus']!r}: a positive int")
    for key in ("releases", "bug_in"):
        try:
            reg[key] = resolve(reg[key])
        except ValueError as e:
            raise ValueError(f"{path}: register_specv2_ci {key}={reg[key]!r}: {e}") from None
    return reg
