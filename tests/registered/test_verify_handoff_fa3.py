"""verify-handoff on **fa3** (on by default since this row met on 0.5.11, 0.5.12 and 0.5.12.post1;
SGLANG_SPECV2_FIXES_VERIFY_HANDOFF_FA3=0 turns it off): the spec-v2 decode preparation without the host wait on the
previous verify, with fa3's replay and eager draft-extend metadata bounded by the page tables' static width where the
host mirror is absent (as upstream 0.5.17). The checks of test_verify_handoff.py (``testing.rows.HandoffRow``: greedy
equal to an fa3 target-only server, decode logprobs equal to the prefill's, 32 concurrent requests, aborts, the walk
model's acceptance, strict idle / busy memory checks, no host wait on a verify in the probe's count), two servers:

* ``TestVerifyHandoffFa3``: an EAGLE3 chain, 3 steps / topk 1 / 4 tokens, its draft extend eager: fa3 has no
  draft-extend graph before 0.5.23, and fa3-draft-extend-graph (the default for chains) is switched
  off here (SGLANG_SPECV2_FIXES_FA3_DRAFT_GRAPH=0), so this class keeps the eager metadata's path;
* ``TestVerifyHandoffFa3Tree``: an EAGLE3 tree, 3 steps / topk 4 / 8 tokens on tree-drafting's spec-v2 path (fa3
  trees, the default), its draft extend eager (asserted first from /server_info);
* ``TestVerifyHandoffFa3Graph``: the chain with SGLANG_SPECV2_FIXES_FA3_DRAFT_GRAPH=1, its draft extend in
  fa3-draft-extend-graph's CUDA graph (asserted first), whose replay then runs without the host mirror (before,
  such a server kept the host wait; met on 0.5.11, 0.5.12, 0.5.12.post1).

Stock waits on the host at every steady decode step: it fails the chain classes' test 7; it routes an explicit fa3 tree
to spec v1 (the tree class's test 0, and test 7, which needs spec-v2 steps to count) and has no fa3 draft-extend graph
(the graph class's test 0). The plugin with the switch off
(fa3 trees, no handoff) should fail test 7 in both classes (not run on a GPU). Why: without
the handoff the plugin's scheduler on fa3 blocks in ``maybe_wait_verify_done`` at every decode step, where upstream
0.5.17 does not, and the default invocation falls behind 0.5.17's throughput. fa3 is not in the device bundle:
carry it in parts (``ci/gpu/lease.sh fa3-parts``, then ``add`` / ``inst``). Hopper only.

Not on 0.5.13 / 0.5.13.post1: fa3's backend asks for the host mirror there, and the fix leaves it (0.5.17 drops it)."""

import unittest

from sglang_specv2_fixes.selection import ENV_FA3_GRAPH
from sglang_specv2_fixes.testing.client import server_info, specv2_state
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import HandoffRow
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=600, suite="specv2-gpu", releases="fix:verify-handoff&gpu&up-to:0.5.12.post1",
                   bug_in="fix:verify-handoff&gpu&up-to:0.5.12.post1")


class TestVerifyHandoffFa3(HandoffRow, CustomTestCase):
    STEPS, TOPK, TOKENS = 3, 1, 4
    BACKEND_ARGS = ("--attention-backend", "fa3")
    ENV = {ENV_FA3_GRAPH: "0"}  # the eager draft extend's metadata (the graph class below has the graph's)

    def test_0_spec_v2_chain_on_fa3(self):
        info = server_info()
        self.assertEqual(info["attention_backend"], "fa3")  # the launch's common args say triton; the row's fa3 wins
        serving = specv2_state(info)["serving"]
        self.assertEqual(serving["spec_path"], "v2")
        graph = serving.get("draft_extend_graph")  # stock records no decision; the plugin's says eager (switched off)
        self.assertFalse(str(graph).startswith("cuda graph"), graph)


class TestVerifyHandoffFa3Tree(HandoffRow, CustomTestCase):
    STEPS, TOPK, TOKENS = 3, 4, 8
    BACKEND_ARGS = ("--attention-backend", "fa3")
    LAUNCH_ARGS = ("--page-size", "1")  # tree-drafting's spec-v2 route needs it (as TreeRow passes it)

    def test_0_spec_v2_tree_on_fa3(self):
        info = server_info()
        serving = specv2_state(info)["serving"]
        self.assertEqual(info["attention_backend"], "fa3")
        self.assertEqual(serving["spec_path"], "v2 tree")
        self.assertTrue(str(serving["draft_extend_graph"]).startswith("eager"), serving["draft_extend_graph"])


class TestVerifyHandoffFa3Graph(HandoffRow, CustomTestCase):
    STEPS, TOPK, TOKENS = 3, 1, 4
    BACKEND_ARGS = ("--attention-backend", "fa3")
    ENV = {ENV_FA3_GRAPH: "1"}

    def test_0_draft_extend_graph_on_fa3(self):
        serving = specv2_state(server_info())["serving"]
        self.assertEqual(serving["spec_path"], "v2")
        self.assertEqual(serving["draft_extend_graph"], f"cuda graph (fa3), {self.TOKENS} tokens per request")


if __name__ == "__main__":
    unittest.main()
