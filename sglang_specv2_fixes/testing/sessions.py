"""Test mixins of the registered streaming-session rows (test_streaming_sessions_*.py): ``SessionChecks`` (the
scenarios of upstream's streaming-session kit), ``SessionRow`` (a session server checked by all of them) and
``SpecSessionRow`` (the same with a speculative draft, plus greedy output = target-only)."""

import concurrent.futures

from .client import (abort_request, close_session, flush_cache, generate, health_ok, open_session, post_generate,
                     server_info, session_payload, stream_generate)
from .rows import SpecChecks
from .server import launch, stop


class SessionChecks:
    """Streaming-session checks (mixin for CustomTestCase), the scenarios of upstream's
    ``StreamingSessionKitMixin`` (sglang/test/kits/streaming_session_kit.py, in the wheel from 0.5.12) with
    token-id prompts, exact counts and HTTP timeouts. The class sets

    * KV_OFFSET: a continued turn's ``cached_tokens`` = previous turn's prompt_tokens + completion_tokens +
      KV_OFFSET when the previous turn ended on an otherwise idle server;
    * KV_SLACK: how many tokens fewer a turn may inherit when other requests were scheduled while the previous
      turn finished (overlap scheduler: the extra step that writes the last token's KV may be a prefill).
    """

    KV_OFFSET = 0
    KV_SLACK = 0
    LOGPROB_TOL = 0.1  # session turn vs the same context as a plain request (decode vs decode)

    @staticmethod
    def _ids(rng, n):
        return [rng.randrange(16, 1000) for _ in range(n)]  # never BOS (1): a session strips a leading BOS

    def _turn_ok(self, r, prev_total, n_new, max_new, inherit=True, slack=0):
        """Checks one finished turn; returns (output, prompt_tokens + completion_tokens)."""
        self.assertEqual(r.status_code, 200, r.text[:500])
        out = r.json()
        meta = out["meta_info"]
        self.assertEqual(meta["finish_reason"]["type"], "length", meta["finish_reason"])
        self.assertEqual(meta["completion_tokens"], max_new)
        self.assertEqual(meta["prompt_tokens"], prev_total + n_new, "session context = previous turns + new ids")
        if inherit:
            want = prev_total + self.KV_OFFSET
            if slack == 0:
                self.assertEqual(meta["cached_tokens"], want, f"inherited KV (previous turn total {prev_total})")
            else:
                self.assertTrue(want - slack <= meta["cached_tokens"] <= want,
                                f"inherited KV {meta['cached_tokens']} not in [{want - slack}, {want}] "
                                f"(previous turn total {prev_total})")
        return out, meta["prompt_tokens"] + meta["completion_tokens"]

    def _matches_plain(self, full_ids, out, max_new):
        """The turn (requested with return_logprob) equals the same context sent as a plain request."""
        plain = generate(full_ids, max_new, return_logprob=True)
        self.assertEqual(out["output_ids"], plain["output_ids"], "session turn != the same context sent plain")
        a = [lp[0] for lp in out["meta_info"]["output_token_logprobs"]]
        b = [lp[0] for lp in plain["meta_info"]["output_token_logprobs"]]
        self.assertEqual((len(a), len(b)), (max_new, max_new))
        diff = max(abs(x - y) for x, y in zip(a, b))
        self.assertLess(diff, self.LOGPROB_TOL, f"session vs plain logprob max diff {diff}")
        return diff

    def _post_turn(self, payload):
        """A turn right after an abort: retried while the session still reports its aborted turn as active
        (as upstream's kit does); the scheduler clears that before it answers the aborted turn, so normally
        the first try succeeds."""
        import time

        for attempt in range(20):
            r = post_generate(payload)
            if r.status_code == 200 or "already has an active request" not in r.text:
                break
            time.sleep(0.25)
        if attempt:
            print(f"turn after abort: {attempt} retries")
        return r

    def check_server_config(self, algorithm, overlap):
        info = server_info()
        self.assertTrue(info["enable_streaming_session"])
        self.assertEqual(info["speculative_algorithm"], algorithm)
        self.assertEqual(not info["disable_overlap_schedule"], overlap, "scheduler kind (overlap on/off)")

    def check_kv_inheritance(self):
        """One session, sequential turns on an idle server: exact cached_tokens per turn (kit:
        test_kv_cache_inheritance); each turn equals its whole context sent as a plain request."""
        import random

        self.assertTrue(flush_cache(), "flush_cache failed")
        rng = random.Random(101)
        # (new ids, max_new_tokens): a 1-token append; with accept length ~4 spec v2 both overshoots
        # max_new_tokens (12, 2, 16: 1 + 4k > max) and lands on it exactly (9, 5)
        turns = [(23, 12), (1, 9), (9, 5), (14, 16), (6, 2)]
        sid = open_session()
        full, total, cached, diffs = [], 0, [], []
        try:
            for k, (n, max_new) in enumerate(turns):
                ids = self._ids(rng, n)
                r = post_generate(session_payload(sid, ids, max_new, return_logprob=True))
                out, new_total = self._turn_ok(r, total, n, max_new, inherit=k > 0)
                if k == 0:
                    self.assertEqual(out["meta_info"]["cached_tokens"], 0, "first turn after flush_cache")
                cached.append((out["meta_info"]["cached_tokens"], total))
                full += ids
                diffs.append(self._matches_plain(full, out, max_new))
                full += out["output_ids"]
                total = new_total
        finally:
            close_session(sid)
        print(f"kv inheritance (cached, previous total) per turn: {cached}; logprob diffs {diffs}")

    def check_concurrent_sessions(self, n_sessions=6, turns=4, rounds=2, n_plain=2):
        """Concurrent sessions, all turns of a round fired at once with plain requests in between, in the
        kit's three logprob modes (kit: test_leak_logprob_concurrent / test_stress_concurrent_sessions)."""
        import random

        rng = random.Random(202)
        modes = [{}, {"return_logprob": True}, {"return_logprob": True, "logprob_start_len": 0}]
        seen = []
        for kw in modes:
            for _ in range(rounds):
                sids = [open_session() for _ in range(n_sessions)]
                totals = [0] * n_sessions
                try:
                    for t in range(turns):
                        ids = [self._ids(rng, rng.randrange(1, 24)) for _ in range(n_sessions)]
                        max_new = [rng.randrange(2, 24) for _ in range(n_sessions)]
                        plain = [self._ids(rng, rng.randrange(8, 40)) for _ in range(n_plain)]
                        with concurrent.futures.ThreadPoolExecutor(n_sessions + n_plain) as ex:
                            fs = [ex.submit(post_generate, session_payload(sids[s], ids[s], max_new[s], **kw))
                                  for s in range(n_sessions)]
                            fp = [ex.submit(generate, p, 16) for p in plain]
                            rs = [f.result() for f in fs]
                            for f in fp:
                                self.assertEqual(f.result()["meta_info"]["completion_tokens"], 16)
                        for s, r in enumerate(rs):
                            out, new_total = self._turn_ok(r, totals[s], len(ids[s]), max_new[s], inherit=t > 0,
                                                           slack=self.KV_SLACK)
                            if kw.get("return_logprob"):
                                self.assertEqual(len(out["meta_info"]["output_token_logprobs"]), max_new[s])
                            if t > 0:
                                seen.append(totals[s] + self.KV_OFFSET - out["meta_info"]["cached_tokens"])
                            totals[s] = new_total
                finally:
                    for sid in sids:
                        close_session(sid)
        print(f"concurrent sessions: {len(seen)} continued turns, inherited short of the idle value by "
              f"{ {d: seen.count(d) for d in sorted(set(seen))} }")
        self.assertTrue(health_ok())

    def check_mid_stream_abort(self, first_turn):
        """Abort a turn while it streams (kit: test_nth_mid_abort_recovery / test_first_mid_abort_recovery):
        the session goes on from its last finished turn, and inherits exactly again afterwards."""
        import random
        import uuid

        rng = random.Random(303 + int(first_turn))
        sid = open_session()
        try:
            full, total = [], 0
            if not first_turn:
                ids = self._ids(rng, 20)
                out, total = self._turn_ok(post_generate(session_payload(sid, ids, 16)), 0, 20, 16, inherit=False)
                full = ids + out["output_ids"]
            rid = f"specv2-session-abort-{uuid.uuid4().hex}"
            state = {"aborted_at": None}

            def on_chunk(chunk):
                done = chunk.get("meta_info", {}).get("completion_tokens", 0)
                if state["aborted_at"] is None and done >= 8:
                    state["aborted_at"] = done
                    abort_request(rid)

            ids = self._ids(rng, 10)
            chunks = stream_generate(session_payload(sid, ids, 3000, rid=rid), on_chunk)
            self.assertIsNotNone(state["aborted_at"], f"the turn never streamed 8 tokens: {chunks[-1:]}")
            self.assertNotIn("error", chunks[-1], chunks[-1])
            meta = chunks[-1]["meta_info"]
            self.assertEqual(meta["finish_reason"]["type"], "abort", meta["finish_reason"])
            self.assertEqual(meta["prompt_tokens"], total + len(ids))
            self.assertLess(meta["completion_tokens"], 3000)
            print(f"aborted turn: abort sent at {state['aborted_at']} tokens, ended at {meta['completion_tokens']}")
            # recovery: the aborted turn is gone from the context; its KV was released, so no slot inheritance
            ids = self._ids(rng, 7)
            r = self._post_turn(session_payload(sid, ids, 8, return_logprob=True))
            out, total = self._turn_ok(r, total, 7, 8, inherit=False)
            meta = out["meta_info"]
            print(f"recovery turn: prompt {meta['prompt_tokens']}, cached {meta['cached_tokens']} (not slot-inherited)")
            full += ids
            self._matches_plain(full, out, 8)
            full += out["output_ids"]
            # and the session inherits exactly again
            ids = self._ids(rng, 5)
            out, _ = self._turn_ok(post_generate(session_payload(sid, ids, 12, return_logprob=True)), total, 5, 12)
            self._matches_plain(full + ids, out, 12)
        finally:
            close_session(sid)
        self.assertTrue(health_ok())

    def check_rejected_turns_keep_session(self):
        """Turns rejected before they start (kit: test_preabort_recovery; streaming sessions refuse offset,
        replace and drop_previous_output) leave the session's KV slot intact: the next turn inherits exactly."""
        import random

        rng = random.Random(404)
        sid = open_session()
        try:
            ids = self._ids(rng, 18)
            out, total = self._turn_ok(post_generate(session_payload(sid, ids, 16)), 0, 18, 16, inherit=False)
            full = ids + out["output_ids"]
            for bad in ({"offset": 1}, {"replace": True}, {"drop_previous_output": True}):
                r = post_generate(session_payload(sid, self._ids(rng, 6), 8, session=bad))
                if r.status_code == 200:
                    self.assertEqual(r.json()["meta_info"]["finish_reason"]["type"], "abort", (bad, r.text[:300]))
                else:
                    self.assertEqual(r.status_code, 400, (bad, r.text[:300]))
            ids = self._ids(rng, 7)
            out, total = self._turn_ok(post_generate(session_payload(sid, ids, 10, return_logprob=True)), total, 7, 10)
            self._matches_plain(full + ids, out, 10)
        finally:
            close_session(sid)
        self.assertTrue(health_ok())

    def check_healthy_after_sessions(self):
        import time

        time.sleep(3)  # every session is closed: idle iterations run the scheduler's pool leak checks (raise)
        self.assertTrue(health_ok(), "server unhealthy after the session checks")
        self.assertIsNone(self.process.poll(), "server process exited")


class SessionRow(SessionChecks):
    """A streaming-session row, mixed in before CustomTestCase like ``TreeRow``: the server of
    ``launch_args()`` with ``--enable-streaming-session``, serving ALGORITHM (None: no speculation) with
    the overlap scheduler on or off (OVERLAP), checked by every ``SessionChecks`` scenario."""

    ALGORITHM, OVERLAP = None, True

    @classmethod
    def launch_args(cls):
        return []

    @classmethod
    def setUpClass(cls):
        cls.process = launch(cls.launch_args() + ["--enable-streaming-session"])

    @classmethod
    def tearDownClass(cls):
        stop(cls.process)

    def test_0_server_config(self):
        self.check_server_config(algorithm=self.ALGORITHM, overlap=self.OVERLAP)

    def test_1_kv_inheritance_exact(self):
        self.check_kv_inheritance()

    def test_2_concurrent_sessions_logprob_modes(self):
        self.check_concurrent_sessions()

    def test_3_mid_stream_abort_nth_turn(self):
        self.check_mid_stream_abort(first_turn=False)

    def test_4_mid_stream_abort_first_turn(self):
        self.check_mid_stream_abort(first_turn=True)

    def test_5_rejected_turns_keep_session(self):
        self.check_rejected_turns_keep_session()

    def test_9_healthy_and_alive(self):
        self.check_healthy_after_sessions()


class SpecSessionRow(SessionRow, SpecChecks):
    """A streaming-session row with a speculative draft: also greedy output = target-only."""

    @classmethod
    def setUpClass(cls):
        cls.prefetch_target_only()
        super().setUpClass()

    def test_6_greedy_equals_target_only(self):
        self.check_greedy_equals_target_only()
