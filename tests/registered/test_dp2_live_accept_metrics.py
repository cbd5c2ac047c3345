"""Data parallelism (``--dp-size 2``, no DP attention) on 2 GPUs: two schedulers, each loading the plugin. Every
scheduler's ``/server_info`` view reports the plugin's fixes (live-accept-metrics applied on each), and the acceptance
counters summed over the DP ranks equal the sums over the requests' meta_info (each request is served by one rank;
``test_live_accept_metrics.TestLiveAcceptMetrics``'s load with forced retraction)."""

import unittest

import test_live_accept_metrics as base

from sglang_specv2_fixes.testing.registry import register_specv2_ci

register_specv2_ci(est_time=240, suite="specv2-gpu", releases="fix:live-accept-metrics&up-to:0.5.12.post1",
                   bug_in="fix:live-accept-metrics&up-to:0.5.12.post1", gpus=2)


class TestDp2LiveAcceptMetrics(base.TestLiveAcceptMetrics):
    LAUNCH_ARGS = ("--dp-size", "2")
    SCHEDULERS = 2


if __name__ == "__main__":
    unittest.main()
