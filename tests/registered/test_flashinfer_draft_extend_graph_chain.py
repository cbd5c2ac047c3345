"""flashinfer's spec-v2 draft-extend CUDA graph for a chain on 0.5.11 - 0.5.13.post1 (flashinfer-draft-extend-graph,
upstream #28782 in 0.5.14; 0.5.11 / 0.5.12.x: the 0.5.11 patch's metadata, captured by tree-drafting's
init_cuda_graphs; 0.5.13.x: the 0.5.13 patch; on by default since this row met, with the tree row on 0.5.13.x):
EAGLE3 chain 3 steps / topk 1 / 4 tokens on **flashinfer**,
overlap on, page size 1, the plugin's default selection, forced retraction, strict busy
leak checks. With the graph on, greedy output must equal the same target served without speculation, decode logprobs
must equal the prefill's, 32 concurrent requests must end at their lengths (padded graph batches: a wrong query layout
reads another request's rows), the walk model's draft must keep its acceptance (a draft-extend graph replayed with
wrong metadata writes wrong draft KV: acceptance drops while the text stays right), and the plugin must report the
graph captured (``serving.draft_extend_graph``). Stock runs that draft extend eagerly and reports no such graph.

Two servers, one class each, the same checks (``FlashinferChainRow``):

* ``TestFlashinferDraftExtendGraphChain``: the default, each replay planned from host-known indptrs (0.5.14's
  fast_prefill_plan layout, built from seq_lens_cpu; flashinfer's plan makes no device-to-host copy). On top of the
  checks above (a wrong host kv_indptr reads the wrong keys: greedy identity and the acceptance would drop) the plugin
  must report that plan in the decision and count every replay of the load as planned sync-free, none refused
  (``serving.draft_extend_plans``). Stock fails its last two tests.
* ``TestFlashinferDraftExtendGraphChainFlashinferPlan``: the same graph with flashinfer's own plan at replay
  (SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN=0). Stock fails its last test.

Met A/B with flashinfer's own plan on 0.5.11, 0.5.12, 0.5.12.post1, 0.5.13 and 0.5.13.post1; the sync-free plan
(then opt-in: the class set =1) passed on 0.5.11, 0.5.12.post1 and 0.5.13.post1 and is the default for chains since."""

import unittest

from sglang_specv2_fixes.selection import ENV_FLASHINFER_FAST_PLAN
from sglang_specv2_fixes.testing.client import server_info, specv2_state
from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.rows import ChainChecks, ServerRow
from sglang_specv2_fixes.testing.server import eagle3_args
from sglang.test.test_utils import CustomTestCase

# two servers (the sync-free plan, flashinfer's own plan) in one file: one class alone was estimated at 240 s
register_specv2_ci(est_time=480, suite="specv2-gpu", releases="fix:flashinfer-draft-extend-graph",
                   bug_in="fix:flashinfer-draft-extend-graph")

STEPS, TOPK, TOKENS = 3, 1, 4
DECISION = f"cuda graph (flashinfer), {TOKENS} tokens per request"


class FlashinferChainRow(ChainChecks, ServerRow):
    """One server of the row, mixed in before CustomTestCase (its setUpClass wins): the chain on flashinfer with its
    draft-extend graph, ``ENV`` added to the server's environment, ``PLAN`` the replay plan's part of the graph
    decision the plugin must report (none with SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN=0)."""

    BACKEND_ARGS = ("--attention-backend", "flashinfer")
    ENV = {}
    PLAN = ""
    MIN_ACCEPT = 2.0

    @classmethod
    def launch_args(cls):
        return eagle3_args(STEPS, TOPK, TOKENS) + ["--page-size", "1"] + list(cls.BACKEND_ARGS)

    def test_6_draft_extend_graph_on_flashinfer(self):
        serving = specv2_state(server_info())["serving"]
        self.assertEqual(serving.get("draft_extend_graph"), DECISION + self.PLAN)


class TestFlashinferDraftExtendGraphChain(FlashinferChainRow, CustomTestCase):
    PLAN = ", sync-free plan (host-known indptrs)"

    def test_7_every_replay_planned_sync_free(self):
        """The replays of the checks above: greedy, logprobs, 32 concurrent with padded batches, forced retraction."""
        self.check_replays_planned_sync_free()


class TestFlashinferDraftExtendGraphChainFlashinferPlan(FlashinferChainRow, CustomTestCase):
    ENV = {ENV_FLASHINFER_FAST_PLAN: "0"}


if __name__ == "__main__":
    unittest.main()
