"""The spec-v2 draft-extend CUDA graph on fa3 (fa3-draft-extend-graph, #40762; upstream 0.5.23): EAGLE3 chain 3 steps /
topk 1 / 4 tokens on **fa3** (Hopper's default backend for a chain), overlap on, page size 1,
SGLANG_SPECV2_FIXES_FA3_DRAFT_GRAPH=1 on both sides (chains by default since this row met, trees opt-in), forced
retraction, strict busy leak checks. With the graph on, greedy output must equal the same target served without
speculation on fa3, decode logprobs must equal the prefill's, 32 concurrent requests must end at their lengths, the walk
model's draft must keep its acceptance (a draft-extend graph replayed with wrong metadata writes wrong draft KV:
acceptance drops while the text stays right), and the plugin must report the graph captured
(``serving.draft_extend_graph``). Stock runs that draft extend eagerly and reports no such graph: it fails only the last
test. ``TestFa3DraftExtendGraphTree``: the same at tree width (3 steps / topk 4 / 8 tokens; stock also fails its test 1
on 0.5.11 / 0.5.12.x, where an explicit tree is spec v1). Runs on every torch-2.11 release the fix patches (0.5.11 -
0.5.17: the release set below follows the table). The chain class met on all of them, the tree class on all but
0.5.14 / 0.5.15.post1, whose stock side has not run (docs/evidence.tsv has the rows). fa3 is not in the
device bundle: carry the release's own fa3 in parts first (``ci/gpu/lease.sh fa3-parts``, then ``add`` / ``inst``;
docs/design/device-bundles.md). Needs a Hopper GPU."""

import unittest

from sglang_specv2_fixes.selection import ENV_FA3_GRAPH
from sglang_specv2_fixes.testing.client import server_info, specv2_state
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import ChainChecks, ServerRow, TreeRow
from sglang_specv2_fixes.testing.server import eagle3_args
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=480, suite="specv2-gpu", releases="fix:fa3-draft-extend-graph&gpu",
                   bug_in="fix:fa3-draft-extend-graph&gpu")

STEPS, TOPK, TOKENS = 3, 1, 4


class TestFa3DraftExtendGraph(ChainChecks, ServerRow, CustomTestCase):
    BACKEND_ARGS = ("--attention-backend", "fa3")
    ENV = {ENV_FA3_GRAPH: "1"}
    MIN_ACCEPT = 2.0

    @classmethod
    def launch_args(cls):
        return eagle3_args(STEPS, TOPK, TOKENS) + list(cls.BACKEND_ARGS)

    def test_6_draft_extend_graph_on_fa3(self):
        serving = specv2_state(server_info())["serving"]
        self.assertEqual(serving.get("draft_extend_graph"), f"cuda graph (fa3), {TOKENS} tokens per request")


class TestFa3DraftExtendGraphTree(TreeRow, CustomTestCase):
    """The same at tree width: EAGLE3 3 steps / topk 4 / 8 tokens
    on fa3 with the switch on, ``testing.rows.TreeRow``'s checks (greedy = an fa3 target-only server, logprobs, 32
    concurrent requests with forced retraction, a concurrent abort) with the tree's draft extend in the graph. Stock:
    no such graph (0.5.13+ runs upstream's tree with an eager fa3 draft extend), spec v1 on 0.5.11 / 0.5.12.x."""

    STEPS, TOPK, TOKENS, MIN_ACCEPT = 3, 4, 8, 1.5
    BACKEND_ARGS = ("--attention-backend", "fa3")
    ENV = {ENV_FA3_GRAPH: "1"}

    def test_6_draft_extend_graph_on_fa3(self):
        serving = specv2_state(server_info())["serving"]
        self.assertEqual(serving.get("draft_extend_graph"), f"cuda graph (fa3), {self.TOKENS} tokens per request")


if __name__ == "__main__":
    unittest.main()
