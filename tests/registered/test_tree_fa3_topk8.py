"""Tree drafting on fa3 at topk 8 (SGLANG_SPECV2_FIXES_FA3_TREES=1, opt-in until the fa3 tree rows have met): EAGLE3
4 steps / topk 8 / 16 draft tokens on an explicit ``--attention-backend fa3``, the checks of
``test_tree_fa3_topk4.py`` (``testing.rows.TreeRow``) at the wider tree: fa3's cascade target verify with a 16-token
mask and its topk-8 draft decode. Stock falls back to spec v1 for explicit topk > 1. Written 2026-11-29, not run on a
GPU yet (docs/proof.md). fa3 is not in the device bundle: carry it in parts (``ci/make_fa3_parts.sh``,
``ci/gpu_fa3.sh``). Hopper only."""

import unittest

from sglang_specv2_fixes.selection import ENV_FA3_TREES
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import TreeRow
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=240, suite="specv2-gpu", releases="fix:tree-drafting", bug_in="fix:tree-drafting")


class TestTreeFa3Topk8(TreeRow, CustomTestCase):
    STEPS, TOPK, TOKENS, MIN_ACCEPT = 4, 8, 16, 1.5
    BACKEND_ARGS = ("--attention-backend", "fa3")
    ENV = {ENV_FA3_TREES: "1"}


if __name__ == "__main__":
    unittest.main()
