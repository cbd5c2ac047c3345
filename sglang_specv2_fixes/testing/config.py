"""Server flags and test data of the registered GPU tests, shared with the serving benchmark (bench/serving.py).
Standard library only: importing this never imports SGLang."""

import os

MODELS_DIR = os.environ.get("SPECV2_MODELS", "/tmp/specv2-tiny-models")
COMMON = [
    "--attention-backend", "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none",
    "--mem-fraction-static", os.environ.get("SPECV2_MEM_FRACTION", "0.2"), "--log-level", "info",
    # many tiny-model servers share one GPU in a matrix run: the static fraction only has to leave slack for
    # other servers' allocations during profiling; the KV pool itself is capped (a few hundred MB) and the
    # piecewise CUDA graphs (~10 s and up to ~3 GB per server, no use for most tests) are off (on in the rows that
    # need the releases' default: common_with_piecewise_graphs)
    "--max-total-tokens", os.environ.get("SPECV2_MAX_TOTAL_TOKENS", "131072"), "--disable-piecewise-cuda-graph",
    # an idle scheduler otherwise spins a core at 100% (its own IdleSleeper docstring): with a dozen servers up
    # at once that starved every other process of the matrix run. It sleeps only when fully idle, after the
    # idle checks (strict memory check included) ran, and wakes on the next request: busy behaviour unchanged
    "--sleep-on-idle",
    # four graph sizes instead of eight (bs 3/5/6/7 pad to the next one): half the capture time per server
    "--cuda-graph-bs", "1", "2", "4", "8",
]


def common_without(flag):
    """COMMON without ``flag`` and its value."""
    i = COMMON.index(flag)
    return COMMON[:i] + COMMON[i + 2:]


def common_with_piecewise_graph():
    """COMMON without ``--disable-piecewise-cuda-graph`` (a flag without a value): the release's default, the
    piecewise prefill CUDA graph captured and replayed (the prefill-graph rows)."""
    return [a for a in COMMON if a != "--disable-piecewise-cuda-graph"]


def common_with_grammar(backend="xgrammar"):
    """COMMON with a real grammar backend instead of ``--grammar-backend none`` (the structured-output rows)."""
    return common_without("--grammar-backend") + ["--grammar-backend", backend]


def common_with_piecewise_graphs():
    """COMMON without ``--disable-piecewise-cuda-graph``: piecewise CUDA graphs as the releases default them (on)."""
    return [a for a in COMMON if a != "--disable-piecewise-cuda-graph"]


def common_without_backend():
    """COMMON with no --attention-backend: SGLang chooses (on Hopper: fa3 before the spec params are known)."""
    return common_without("--attention-backend")


def nccl_args(url, extra_args=()):
    """A fixed torch.distributed port per server (its HTTP port + 20, inside the runner's 40-port slot): left
    unset, SGLang takes ``get_free_port()``, which races with the other servers and clients of a matrix run
    (seen: EADDRINUSE in init_process_group with ~40 servers starting on one host).

    Not with ``--dp-size`` > 1 without DP attention (``extra_args``: the row's other flags): SGLang's DP controller
    (``DataParallelController.launch_dp_schedulers``) builds every DP rank's ``PortArgs`` from the one
    ``server_args.nccl_port``, so the second rank's ``init_process_group`` fails with EADDRINUSE on a fixed port
    (both sides, stock and plugin). Left unset, the controller binds a free port per rank."""
    args = list(extra_args)
    if "--dp-size" in args and int(args[args.index("--dp-size") + 1]) > 1 and "--enable-dp-attention" not in args:
        return []
    return ["--nccl-port", str(int(url.rsplit(":", 1)[1]) + 20)]


def prompts(n, seed=0, lo=8, hi=64, vocab=1000):
    import random

    rng = random.Random(seed)
    return [[rng.randrange(16, vocab) for _ in range(rng.randrange(lo, hi))] for _ in range(n)]
