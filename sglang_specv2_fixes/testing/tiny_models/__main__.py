"""``python -m sglang_specv2_fixes.testing.tiny_models OUT_DIR [--check]``: the Llama target and its drafts."""
from . import cli
from .llama import build_all
from .llama_ref import check

cli(build_all, check)
