"""Tree drafting with the spec-v2 draft-extend CUDA graph at tree width (the default since the tree rows met with it;
the row sets SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH=1 all the same, docs/design/tree-draft-extend-graph.md): EAGLE3 3
steps / topk 8 / 16 draft tokens on triton (the backend whose draft-extend graph these releases capture), overlap on,
page_size 1, forced retraction, strict busy leak checks, greedy equal to target-only, decode logprobs equal to prefill,
32 concurrent requests (batch size > 1 is where a wrong query stride, #27545, reads another request's rows), a
concurrent abort (checks in ``testing.rows.TreeRow``), and the plugin's own report that the draft-extend graph was
captured at tree width. Stock falls back to spec v1 for explicit topk > 1 (and knows no such variable)."""

import unittest

from sglang_specv2_fixes.selection import ENV_TREE_GRAPH
from sglang_specv2_fixes.testing.client import server_info, specv2_state
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import TreeRow
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=220, suite="specv2-gpu", releases="fix:tree-drafting&fix:draft-extend-kv-range",
                   bug_in="fix:tree-drafting")


class TestTreeDraftExtendGraph(TreeRow, CustomTestCase):
    STEPS, TOPK, TOKENS, MIN_ACCEPT = 3, 8, 16, 1.5
    ENV = {ENV_TREE_GRAPH: "1"}

    def test_6_draft_extend_graph_at_tree_width(self):
        serving = specv2_state(server_info())["serving"]
        self.assertEqual(serving["spec_path"], "v2 tree")
        self.assertEqual(serving["draft_extend_graph"], f"cuda graph, {self.TOKENS} tokens per request")


if __name__ == "__main__":
    unittest.main()
