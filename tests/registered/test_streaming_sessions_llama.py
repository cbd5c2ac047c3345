"""Streaming sessions on the tiny Llama target, no speculation, overlap scheduler (the default).

A regression guard (bug_in=[]): stock and plugin must both pass; the plugin must not change what a session
inherits. The checks (``testing.sessions.SessionChecks``) follow upstream's streaming-session kit
(sglang/test/kits/streaming_session_kit.py, shipped from 0.5.12; the session code is the same in 0.5.11:
session/session_controller.py and session/streaming_session.py differ only in two unrelated arguments).

Expected inheritance, from the release sources (0.5.11 line / 0.5.12.post1 line):
* prefill commits the prompt (managers/schedule_batch.py:1742 / 1779 ``req.kv_committed_len = seq_len``),
  every decode prepare commits one more (schedule_batch.py:2306 / 2346) before the step that writes the
  previous token's KV;
* the overlap loop prepares the next batch before it processes the previous result
  (managers/scheduler.py:1554 then 1573 / 1583 then 1602), so when the last token of a turn is seen the next
  decode was already prepared: committed = prompt + completion; the slot is capped at prompt + finished_len
  (session/streaming_session.py:513 / 514, _trim_overshoot);
* the next turn matches at most input_len - 1 tokens (schedule_batch.py:1002 / 1018) and takes
  min(slot committed, that) from the slot (streaming_session.py:238), reported as cached_tokens
  (schedule_batch.py:1779-1780 / 1816) = previous prompt_tokens + completion_tokens: KV_OFFSET 0 (the kit's
  default ``kv_inherit_offset = 0``);
* when a prefill is scheduled instead of that extra decode (other requests arriving), the last token's KV is
  not written and the turn inherits one token less: KV_SLACK 1 in the concurrent check only.
"""

import unittest

from sglang_specv2_fixes.testing.registry import register_specv2_ci
from sglang_specv2_fixes.testing.sessions import SessionRow
from sglang.test.test_utils import CustomTestCase

register_specv2_ci(est_time=120, suite="specv2-gpu", releases="patched&gpu&up-to:0.5.12.post1")


class TestStreamingSessionsLlama(SessionRow, CustomTestCase):
    KV_OFFSET, KV_SLACK = 0, 1


if __name__ == "__main__":
    unittest.main()
