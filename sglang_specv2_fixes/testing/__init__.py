"""What the registered GPU tests (tests/registered), the CPU tests (tests/cpu) and the benchmarks (bench/) share,
beside the plugin like SGLang's own ``sglang.test``, but only in a checkout or an editable install: the wheel leaves
it out (pyproject.toml). The plugin itself never imports it, and importing this package imports nothing: each
module is imported on its own.

    config      server flags (COMMON), models dir, nccl_args, prompts: no SGLang import (bench/serving.py reads them)
    server      ports / URL / A-B mode from the environment, tiny models, eagle3_args, launch / stop
    client      HTTP: generate, concurrent_generate, server_info, sessions, stream, abort, flush
    reference   the target-only reference outputs (prefetch + on-disk cache per release)
    rows        SpecChecks, ServerRow (one server per class), ChainChecks and the row mixins (Tree, Retract, Handoff, ...)
    dsv3_rows   Dsv3MtpStrict: the DeepSeek-V3 MTP strict rows' server and checks (one file per backend)
    sessions    SessionChecks and the SessionRow / SpecSessionRow test mixins
    registry    register_specv2_ci (the registration marker) and how ci/run_registered.py reads it
    scenarios   CPU scenarios on the release's real scheduler objects (CPU tests, bench/hot_path_overhead.py)
    standins    import-only stand-ins: sgl_kernel (stubs/, CPU) and datasets (shims/, GPU bundle)
    tiny_models offline tiny real-weight models (python -m sglang_specv2_fixes.testing.tiny_models OUT_DIR)
    evidence    docs/evidence.tsv (one line per run result: load / problems / append) and docs/evidence.md (markdown)
"""
