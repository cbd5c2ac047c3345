"""Beyond upstream (live-accept-metrics): the scheduler-wide acceptance counters behind
``avg_spec_accept_length`` must count the same verify steps and accepted tokens as the per-request
``meta_info`` of the same requests.

EAGLE3 3/1/4 on spec v2 (overlap) with forced retraction and staggered finishes, so late overlap
results keep carrying finished and retracted requests. The counters are SGLang's own
(``spec_total_num_accepted_tokens`` / ``..._accept_tokens`` and ``spec_total_num_forward_ct`` plus the
current log interval), read inside the scheduler by the plugin's test-only probe, before and after the
load. Stock (both releases) adds every stale request's accept length and verify step, so the deltas
exceed the per-request sums; with the plugin they are equal. ``--decode-log-interval 1`` flushes the
interval counters into the lifetime ones each step, so ``/server_info``'s average is over the same
counters.
"""

import unittest

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.server import AB, eagle3_args, launch, stop
from sglang_specv2_fixes.testing.client import concurrent_generate, health_ok, server_info
from sglang.test.test_utils import CustomTestCase

# every release with torch 2.11 (GPU-runnable): on 0.5.13+ the counters live on scheduler.metrics_reporter (the probe
# reads them there) and the stock decode step counts stale requests the same way (CPU: test_fix_live_accept_metrics)
register_specv2_ci(est_time=150, suite="specv2-gpu", releases="fix:live-accept-metrics&gpu",
                   bug_in="fix:live-accept-metrics&gpu")


def counters():
    """Per scheduler (one per DP rank): SGLang's own acceptance counters read by the probe, the stale requests the
    probe saw, and /server_info's avg_spec_accept_length."""
    info = server_info()
    out = []
    for state in info["internal_states"]:
        v = state["specv2_fixes"]
        out.append(dict(counters=v["spec_counters"], probe=v["probe"], avg=state.get("avg_spec_accept_length"),
                        fixes={f: s["state"] for f, s in v["fixes"].items()}))
    return out


class TestLiveAcceptMetrics(CustomTestCase):
    LAUNCH_ARGS = ()  # e.g. ("--tp-size", "2") / ("--dp-size", "2"): the parallel variants of this row
    ENV = {}
    SCHEDULERS = 1  # internal states /server_info lists (one per DP rank)

    @classmethod
    def setUpClass(cls):
        cls.process = launch(
            eagle3_args(3, 1, 4) + ["--max-running-requests", "32", "--decode-log-interval", "1"] + list(cls.LAUNCH_ARGS),
            env={"SGLANG_TEST_RETRACT": "1", "SGLANG_SPECV2_FIXES_PROBE": "1", **cls.ENV},
        )

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_global_counters_equal_per_request_meta_info(self):
        before = counters()
        outs = concurrent_generate(96, lambda i: 8 + (i * 7) % 57, seed=1)
        after = counters()
        self.assertEqual(len(after), self.SCHEDULERS, "one specv2_fixes view per scheduler (DP rank)")
        verify = sum(o["meta_info"]["spec_verify_ct"] for o in outs)
        drafts = sum(o["meta_info"]["spec_accepted_drafts"] for o in outs)
        delta = [(a["counters"]["verify_steps"] - b["counters"]["verify_steps"],
                  a["counters"]["accepted_tokens"] - b["counters"]["accepted_tokens"]) for a, b in zip(after, before)]
        stale = sum(a["probe"]["stale_finished_seen"] + a["probe"]["stale_retracted_seen"] for a in after)
        print("per scheduler (verify steps, accepted tokens) deltas", delta, "| meta_info: verify", verify,
              "accepted drafts", drafts, "| stale seen", stale, "| avg", [a["avg"] for a in after])
        # the scenario happened: late results carried finished and retracted requests
        self.assertGreater(stale, 0)
        self.assertEqual(
            (sum(d[0] for d in delta), sum(d[1] for d in delta)), (verify, drafts + verify),
            "scheduler-wide spec counters (verify steps, accepted tokens) != sums of the requests' meta_info",
        )
        for a in after:  # every scheduler patched, and its /server_info average is its own lifetime counters' ratio
            self.assertEqual(a["fixes"]["live-accept-metrics"], "applied" if AB == "auto" else "disabled")
            if a["counters"]["verify_steps"]:
                self.assertAlmostEqual(a["avg"], a["counters"]["accepted_tokens"] / a["counters"]["verify_steps"], places=9)
        self.assertTrue(health_ok())
        self.assertIsNone(self.process.poll())


if __name__ == "__main__":
    unittest.main()
