"""#26980 (first half) - the draft model must not replace the routed-experts capturer.

``--enable-return-routed-experts`` keeps one process-wide capturer (``set_global_experts_capturer``),
sized from the *target's* MoE config. ``ModelRunner.initialize`` calls ``init_routed_experts_capturer``
for every runner, so with speculative decoding the draft's runner, initialised after the target's,
re-creates it from the draft's config: a dense EAGLE/EAGLE3 draft has no ``num_experts_per_tok`` and the
scheduler dies at startup (``AttributeError``), stock and plugin, spec v1 and v2 alike; a MoE draft
silently replaces the target's capturer with one of the wrong shape. Upstream #26980 returns early for
draft workers. Needed so that routed experts can be returned with speculative decoding at all, and the
precondition for tree-drafting's routed-experts compaction to matter.

Not backported: #26980's second guard (the draft runner's forward still calls the capturer's
``on_forward_end``). On spec v2 that output is dropped (the verify result carries the target forward's);
spec v1 copies device rows to the host after draft forwards too, so routed experts with spec v1 remain
unreliable in these releases.
"""

from __future__ import annotations

from ..catalog import NOT_BACKPORTED, UPSTREAM, Fix, Patch, ReleaseNote

RUNNER = "sglang.srt.model_executor.model_runner"


class v0_5_11:
    def init_routed_experts_capturer(self):
        if self.is_draft_worker:
            # specv2-fixes (#26980): the capturer is process-wide and sized from the target model;
            # the draft's runner must not re-create it from the draft's (dense) config.
            return
        if not self.server_args.disable_shared_experts_fusion and hasattr(
            self.model, "num_fused_shared_experts"
        ):
            num_fused_shared_experts = self.model.num_fused_shared_experts
        else:
            num_fused_shared_experts = 0

        set_global_experts_capturer(
            RoutedExpertsCapturer.create(
                enable=get_global_server_args().enable_return_routed_experts,
                model_config=self.model_config,
                num_fused_shared_experts=num_fused_shared_experts,
                num_tokens=self.max_total_num_tokens + self.page_size,
                max_running_requests=self.max_running_requests,
                device=self.device,
            )
        )


def _patch():
    return [
        Patch(
            module=RUNNER,
            qualname="ModelRunner.init_routed_experts_capturer",
            fingerprint="fb25d223da521613",
            body=(v0_5_11, "init_routed_experts_capturer"),
        )
    ]


FIX = Fix(
    name="routed-experts-draft-guard",
    pr="#26980",
    title="draft runner keeps the target's routed-experts capturer",
    what=(
        "ModelRunner.init_routed_experts_capturer replaced: returns early for the draft worker (the "
        "upstream function is the same in 0.5.11 and 0.5.12.x)"
    ),
    why=(
        "with --enable-return-routed-experts and an EAGLE/EAGLE3 draft the scheduler dies at startup "
        "(the draft re-creates the process-wide capturer from its dense config)"
    ),
    removal="delete per release once it ships #26980 (not in 0.5.13.post1 / 0.5.14; upstream from 0.5.15)",
    lines={
        "0.5.11": _patch(),
        "0.5.12": _patch(),
        "0.5.13.post1": ReleaseNote(
            NOT_BACKPORTED,
            "bug present (init_routed_experts_capturer has no draft-worker guard); 0.5.13.post1 is "
            "report-only in this plugin version",
            check=(RUNNER, "ModelRunner.init_routed_experts_capturer", "fb25d223da521613"),
        ),
        "0.5.14": ReleaseNote(
            NOT_BACKPORTED,
            "bug present (init_routed_experts_capturer has no draft-worker guard, unchanged since 0.5.11); "
            "0.5.14 is report-only in this plugin version",
            check=(RUNNER, "ModelRunner.init_routed_experts_capturer", "fb25d223da521613"),
        ),
        **{
            line: ReleaseNote(
                UPSTREAM,
                "upstream (#26980: init_routed_experts_capturer returns early for the draft worker, and the "
                "draft forward no longer calls the capturer's on_forward_end)",
                check=(RUNNER, "ModelRunner.init_routed_experts_capturer", fp),
            )
            for line, fp in (
                ("0.5.15", "6d11c7828eb1a3a0"),
                ("0.5.16", "60219fcde8db8058"),
                ("0.5.17", "60219fcde8db8058"),
            )
        },
    },
)
