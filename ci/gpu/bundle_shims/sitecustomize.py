"""Device-bundle import shim (on the GPU test machine, ci/gpu/prepare.sh puts this folder on PYTHONPATH).

From 0.5.15.post1, ``EagleDraftWorker._capture_cuda_graphs`` (spec v2) imports the DeepSeek sparse-attention and
DeepSeek-V4 attention backends on CUDA only to list graph-capable backend classes for an ``isinstance`` check.
Those modules import ``deep_gemm`` (sgl-deep-gemm) and ``cutlass`` (nvidia-cutlass-dsl, ~90 MB of libraries) at
module level, which the 64 MiB device bundle cannot carry, so every spec-v2 server of those releases would stop
while capturing its draft graphs. Here, when one of the modules in ``WRAPPED`` fails to import *only* because a
package in ``ABSENT`` is missing, the module is kept with what it defined so far, and every other name it is
asked for becomes a placeholder class that no object is an instance of (the Llama / Qwen3-MoE test models never
select these backends, so the check answers as it would with the real classes). 0.5.15.x's ``models/deepseek_v2``
imports the DSA indexer, whose ``jit_kernel.dsa`` package imports the CuTe DSL paged-MQA-logits runner (``cutlass``)
eagerly: the tiny DeepSeek-V3 target has no DSA indexer (no ``index_topk``) and never calls it. Any other import
error propagates unchanged, and nothing happens where the packages are installed. Each substitution prints one line
to stderr, so server logs show it. The image's own ``sitecustomize`` (if any) still runs after this one.
tests/cpu/test_tiny_deepseek_v3.py loads this file by path in its loader child, for the same 0.5.15.x import on CPU.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

WRAPPED = {"sglang.srt.layers.attention.dsa_backend", "sglang.srt.layers.attention.deepseek_v4_backend",
           "sglang.srt.layers.attention.flashmla_backend", "sglang.jit_kernel.dsa.cutedsl_paged_mqa_logits"}
ABSENT = {"deep_gemm", "cutlass"}


class _Loader(importlib.abc.Loader):
    def __init__(self, real):
        self.real = real

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module):
        try:
            self.real.exec_module(module)
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] not in ABSENT:
                raise
            placeholders, missing = {}, e.name

            def __getattr__(name, _mod=module.__name__, _cache=placeholders):
                if name.startswith("__"):
                    raise AttributeError(name)
                if name not in _cache:
                    _cache[name] = type(name, (), {"__module__": _mod, "__doc__": f"placeholder: {missing} absent"})
                return _cache[name]

            module.__getattr__ = __getattr__
            module.__specv2_placeholder__ = missing
            print(f"[specv2 bundle shim] {module.__name__}: {missing} is not in the device bundle; "
                  "its names are placeholder classes", file=sys.stderr, flush=True)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in WRAPPED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


if not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.insert(0, _Finder())

# chain to the next sitecustomize on the path (the image's own), which this module shadows
_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here])
if _spec is not None and _spec.loader is not None:
    _next = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_next)
