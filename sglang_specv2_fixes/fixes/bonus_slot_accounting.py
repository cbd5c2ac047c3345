"""#22651 - streaming sessions under spec v2: pre-claim the bonus slot in prepare_for_decode.

Upstream in every supported release (0.5.11 and 0.5.12.x carry the pre-claim, the ``- 1`` in the
resolve step and the removal of the open_session gate), so nothing is patched. Listed so that
``status`` explains it and verifies the release source carries it. 0.5.15 and later replaced the
scheme (#28754: no pre-claim, resolve commits drafts + bonus; not-applicable there): this plugin must
never mix the two.
"""

from ..catalog import NOT_APPLICABLE, UPSTREAM, Fix, ReleaseNote

_T = ("sglang.srt.speculative.eagle_info_v2", "EagleDraftInputV2Mixin.prepare_for_decode")

FIX = Fix(
    name="bonus-slot-accounting",
    pr="#22651",
    title="spec v2 bonus-slot accounting for streaming sessions",
    what="nothing patched: upstream in all supported releases",
    why="a finished turn's cached KV was one token short, breaking streaming-session KV inheritance",
    removal="informational entry; keep while releases without it could be supported",
    lines={
        "0.5.11": ReleaseNote(UPSTREAM, "upstream in 0.5.11 (pre-claim in prepare_for_decode)", check=_T + ("479436d2ab730a31",)),
        "0.5.12": ReleaseNote(UPSTREAM, "upstream in 0.5.12 (pre-claim in prepare_for_decode)", check=_T + ("6ee69b3410f0a06c",)),
        "0.5.13.post1": ReleaseNote(UPSTREAM, "upstream in 0.5.13.post1 (pre-claim in prepare_for_decode)", check=_T + ("9017d8dab86d36c8",)),
        "0.5.14": ReleaseNote(UPSTREAM, "upstream in 0.5.14 (pre-claim in prepare_for_decode)", check=_T + ("f9901a957593abcb",)),
        **{
            line: ReleaseNote(
                NOT_APPLICABLE,
                "pre-claim scheme removed (#28754): eagle_info_v2 is gone, eagle_utils.eagle_prepare_for_decode "
                "claims no bonus slot and _resolve_spec_v2_tokens commits the full accepted run (drafts + "
                "bonus) of live requests",
                check=("sglang.srt.speculative.eagle_utils", "eagle_prepare_for_decode", fp),
            )
            for line, fp in (
                ("0.5.15", "71f4d923deb606d9"),
                ("0.5.16", "8889cbb3fc0f55cd"),
                ("0.5.17", "a838c68eae04cb10"),
            )
        },
    },
)
