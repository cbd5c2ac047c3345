"""Offline, deterministic tiny real-weight models for the registered GPU tests and the serving benchmark.

    python -m sglang_specv2_fixes.testing.tiny_models OUT_DIR [--check]       # Llama target + EAGLE3 + EAGLE (llama.py)
    python -m sglang_specv2_fixes.testing.tiny_models.moe OUT_DIR [--check]   # Qwen3-MoE target (moe.py)
    python -m sglang_specv2_fixes.testing.tiny_models.swa OUT_DIR [--check]   # GPT-OSS hybrid-SWA target (swa.py)
    python -m sglang_specv2_fixes.testing.tiny_models.deepseek_v3 OUT_DIR [--check]   # DeepSeek-V3 + MTP (deepseek_v3.py)

``llama.build_all(dir)``, ``moe.build(dir)`` and ``swa.build(dir)`` do the same from Python (once per stamp).
Importing this package imports nothing heavy; the modules need torch and safetensors.
"""
import argparse, json, os, sys, time


def cli(build_fn, check_fn):
    """``python -m sglang_specv2_fixes.testing.tiny_models[.moe|.swa] OUT_DIR [--check]`` of every tiny-model builder: build (``build_fn(out_dir)`` gives
    one model dir or a {name: dir} map), print what was written as JSON, optionally run ``check_fn`` on it."""
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    t0 = time.time()
    built = build_fn(args.out_dir)

    def size(path):
        return os.path.getsize(os.path.join(path, "model.safetensors"))

    if isinstance(built, dict):
        info = dict(built, bytes={n: size(p) for n, p in built.items()})
    else:
        info = dict(path=built, bytes=size(built))
    print(json.dumps(dict(info, seconds=round(time.time() - t0, 2))))
    if args.check:
        sys.exit(0 if check_fn(built) else 1)
