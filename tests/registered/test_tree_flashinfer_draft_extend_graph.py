"""Tree drafting on flashinfer with flashinfer's spec-v2 draft-extend CUDA graph at tree width
(flashinfer-draft-extend-graph, upstream #28782; the graph is the default
on 0.5.11 / 0.5.12.x since it met there, and on 0.5.13.x since it met there too):
EAGLE3 3 steps / topk 8 / 16 draft tokens on flashinfer (Hopper's backend for trees), overlap on, page_size 1, forced
retraction, strict busy leak checks, greedy equal to target-only, decode logprobs equal to prefill, 32 concurrent
requests (batch size > 1 and padded graph batches are where a wrong query layout reads another request's rows), a
concurrent abort (checks in ``testing.rows.TreeRow``), and the plugin's own report that flashinfer's draft-extend graph
was captured at tree width. Stock: on 0.5.11 / 0.5.12.x spec v1 for explicit topk > 1 (and no such variable); on
0.5.13.x upstream's spec-v2 tree with an eager draft extend, so only the report test fails there. The chain on
0.5.13.x: test_flashinfer_draft_extend_graph_chain.py.

Two servers, one class each:

* ``TestTreeFlashinferDraftExtendGraph``: the default, each replay planned from host-known indptrs (0.5.14's
  fast_prefill_plan layout): the decision must name that plan and every replay of the load must be counted sync-free
  (``serving.draft_extend_plans``). It passed with the plan opt-in (the class set =1) on 0.5.11, 0.5.12.post1 and
  0.5.13.post1, the plan is the trees' default since.
* ``TestTreeFlashinferDraftExtendGraphFlashinferPlan``: the same graph with flashinfer's own plan at replay
  (SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN=0; the trees' default before the sync-free plan met)."""

import unittest

from sglang_specv2_fixes.selection import ENV_FLASHINFER_FAST_PLAN
from sglang_specv2_fixes.testing.client import server_info, specv2_state
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import TreeRow
from sglang.test.test_utils import CustomTestCase

# two servers (the sync-free plan, flashinfer's own plan) in one file: one class alone was estimated at 240 s
register_specv2_ci(est_time=480, suite="specv2-gpu", releases="fix:flashinfer-draft-extend-graph",
                   bug_in="fix:flashinfer-draft-extend-graph")


class FlashinferTreeRow(TreeRow):
    """One server of the row, mixed in before CustomTestCase: ``ENV`` added to the server's environment, ``PLAN`` the
    replay plan's part of the graph decision the plugin must report (none with FAST_PLAN=0)."""

    STEPS, TOPK, TOKENS, MIN_ACCEPT = 3, 8, 16, 1.5
    BACKEND_ARGS = ("--attention-backend", "flashinfer")
    ENV = {}
    PLAN = ""

    def test_6_flashinfer_draft_extend_graph_at_tree_width(self):
        serving = specv2_state(server_info())["serving"]
        self.assertEqual(serving["spec_path"], "v2 tree")
        self.assertEqual(serving["draft_extend_graph"],
                         f"cuda graph (flashinfer), {self.TOKENS} tokens per request{self.PLAN}")


class TestTreeFlashinferDraftExtendGraph(FlashinferTreeRow, CustomTestCase):
    PLAN = ", sync-free plan (host-known indptrs)"

    def test_7_every_replay_planned_sync_free(self):
        """The replays of the checks above: greedy, logprobs, 32 concurrent with padded batches, the abort, forced
        retraction."""
        self.check_replays_planned_sync_free()


class TestTreeFlashinferDraftExtendGraphFlashinferPlan(FlashinferTreeRow, CustomTestCase):
    ENV = {ENV_FLASHINFER_FAST_PLAN: "0"}


if __name__ == "__main__":
    unittest.main()
