"""The spec-v2 decode preparation without the host wait on the previous verify (verify-handoff, #25879; upstream
0.5.13), on **triton** with CUDA graphs, overlap on, page size 1, the fix's default (on; it met A/B with
SGLANG_SPECV2_FIXES_VERIFY_HANDOFF=1 set, before it was), forced retraction (SGLANG_TEST_RETRACT), the probe on, the
harness's strict idle / busy memory checks. Two servers, one class each, the same checks (``HandoffRow``):

* ``TestVerifyHandoff``: an EAGLE3 chain, 3 steps / topk 1 / 4 tokens (launched as before the tree class);
* ``TestVerifyHandoffTree``: an EAGLE3 tree, 3 steps / topk 4 / 8 tokens (tree-drafting's spec-v2 path, its
  draft extend in the tree-width CUDA graph; asserted first from /server_info).

With the handoff, greedy output must equal the same target served without speculation, decode logprobs must equal
the prefill's (logprob batches take the synchronous path: the switch between the two paths is exercised), 32
concurrent requests must end at their lengths, aborts mid-decode must leave the server healthy and its memory clean,
the walk model's draft must keep its acceptance (wrong draft-extend positions write wrong draft KV: acceptance drops
while the text stays right), and the probe must count no host wait on a verify (``verify_host_waits``) during a
logprob-free load. Stock waits on the host at every steady decode step of a chain: it fails only the chain class's
last test. Met A/B on 0.5.11, 0.5.12 and 0.5.12.post1 for the chain class (stock waits on the host in the chain load,
the plugin never). The tree class was added after that and passed on 0.5.11, 0.5.12 and 0.5.12.post1 (with the switch
set to 1 as the class did then): trees take the handoff by default since. Stock (``--specv2-fixes off``) routes
explicit topk > 1 to spec v1, so it fails the tree class's first test; the tree with the host wait is the plugin side
with --specv2-fixes auto,-verify-handoff (tree-drafting without the handoff), which should fail only
``test_7_no_host_wait_on_verify``, in both classes. The checks are ``testing.rows.HandoffRow``; fa3's row is
test_verify_handoff_fa3.py.

On 0.5.13 / 0.5.13.post1 these servers (piecewise CUDA graphs off, as every row's shared flags) have no host wait on
stock either (#25879): that line's patch, and its row, are about piecewise graphs: test_verify_handoff_piecewise.py."""

import unittest

from sglang_specv2_fixes.testing.client import server_info, specv2_state
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import HandoffRow
from sglang.test.test_utils import CustomTestCase

# two servers (chain, tree) in one file: the chain class alone takes about 3 minutes on one GPU
register_specv2_ci(est_time=420, suite="specv2-gpu", releases="fix:verify-handoff&gpu&up-to:0.5.12.post1",
                   bug_in="fix:verify-handoff&gpu&up-to:0.5.12.post1")


class TestVerifyHandoff(HandoffRow, CustomTestCase):
    STEPS, TOPK, TOKENS = 3, 1, 4


class TestVerifyHandoffTree(HandoffRow, CustomTestCase):
    STEPS, TOPK, TOKENS = 3, 4, 8
    LAUNCH_ARGS = ("--page-size", "1")  # tree-drafting's spec-v2 route needs it (as TreeRow passes it)

    def test_0_spec_v2_tree_with_its_draft_extend_graph(self):
        serving = specv2_state(server_info())["serving"]
        self.assertEqual(serving["spec_path"], "v2 tree")
        self.assertEqual(serving["draft_extend_graph"], f"cuda graph, {self.TOKENS} tokens per request")


if __name__ == "__main__":
    unittest.main()
