"""sglang-specv2-fixes: spec-v2 (EAGLE/EAGLE3 + overlap scheduler) correctness fixes for SGLang releases
that shipped without them, activated through SGLang's plugin entry point (``sglang.srt.plugins``).

See README.md, ``python -m sglang_specv2_fixes status`` and ``sglang_specv2_fixes/fixes/__init__.py``.
"""

__version__ = "0.2.0"
