"""Tree drafting on fa3 at topk 8 (fa3 trees: on by default, SGLANG_SPECV2_FIXES_FA3_TREES=0 turns them off): EAGLE3
4 steps / topk 8 / 16 draft tokens on an explicit ``--attention-backend fa3``, the checks of
``test_tree_fa3_topk4.py`` (``testing.rows.TreeRow``) at the wider tree: fa3's cascade target verify with a 16-token
mask and its topk-8 draft decode. Stock falls back to spec v1 for explicit topk > 1. Met on 0.5.11, 0.5.12 and 0.5.12.post1
(2026-11-29, with the switch set to 1 while fa3 trees were opt-in; docs/gpu-runs/2026-11-29-s35/). fa3 is not in the device bundle: carry it in parts (``ci/gpu/lease.sh fa3-parts``,
then ``add`` / ``inst``). Hopper only."""

import unittest

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import TreeRow
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=240, suite="specv2-gpu", releases="fix:tree-drafting", bug_in="fix:tree-drafting")


class TestTreeFa3Topk8(TreeRow, CustomTestCase):
    STEPS, TOPK, TOKENS, MIN_ACCEPT = 4, 8, 16, 1.5
    BACKEND_ARGS = ("--attention-backend", "fa3")


if __name__ == "__main__":
    unittest.main()
