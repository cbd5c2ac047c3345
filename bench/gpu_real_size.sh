#!/usr/bin/env bash
# The serving benchmark (bench/serving.py) for several releases in one device call, from the repo root, with
# .device-bundle/<RELEASE> (one release) or .device-bundle/both (ci/gpu/make_combined_bundle.sh) carried:
#   bash bench/gpu_real_size.sh "RELEASE [RELEASE ...]" [--split "A,B C"] [--waves] [--tiny] [bench/serving.py args]
# (--split / --waves / --tiny may stand anywhere after the releases: they are taken out wherever they stand, so that
# serving.py, which refuses them, never sees them)
# Real size (bench/real_size.py; models written once under /tmp) unless --tiny (the tiny real-weight models; what
# bench/gpu_bench_all.sh runs). Each release gets GPUs of its own: one part per release, or with --split its
# configurations spread one part per GPU group (a configuration's pairs always on one group). A part takes TP GPUs
# (--real-size-tp, default 1): part o (release k, part j, o = k*P + j) gets GPUs o*TP .. o*TP+TP-1, base port
# ${REAL_SIZE_PORT0:-12500} + 400*o (a part's servers use base .. base + 299, and SGLang 0.5.17+ binds gRPC on each
# server's port + 10000: clear of ci/gpu/bg.py's rows and their gRPC images, below the ephemeral port range, where a
# connection's local port can take a fixed port first and the server's bind fails). A part without its
# GPUs is skipped, unless --waves: then parts run in waves of as many as the GPUs hold, each wave given an equal share
# of the time left. Into $OUT (default build/real-size; build with --tiny):
#   real-size-latest.{json,md,png}   bench/real_size_report.py over every release (not with --tiny)
#   RELEASE-real-size.md             the release's serving.py table (RELEASE-bench.md with --tiny)
#   real-size-out.tar.gz             everything (bench-out.tar.gz with --tiny): per part outputs and server.log,
#                                    merged bench-RELEASE/results.json (pass these to real_size_report.py to re-merge)
# Budget: REAL_SIZE_TOTAL_S (default 560, the call's limit is 600) covers everything; the parts get what is left
# after unpacking and writing the models, less 30 s for merging, the report and packing (per wave: that / waves).
# SPECV2_COMMIT=<hash> records the measured commit (the device copy has no .git). Host profiles
# (--host-profile-seconds) need py-spy: carry ".whl" (py_spy-*.whl) beside the bundle. The TP 2 point's command:
# bench/real_size.py's docstring.
set -uo pipefail
T0=$(date +%s)
RELEASES=${1:?usage: gpu_real_size.sh "REL ..." [--split "A,B C"] [--waves] [--tiny] [serving.py args]}; shift
SPLIT=""; WAVES=0; MODE=(--real-size); NAME=real-size; ARGS=(); CONFIGS=0
while [ $# -gt 0 ]; do  # this script's own options, wherever they stand; the rest goes to serving.py
  case "$1" in
    --split) SPLIT=${2:?--split needs a value}; shift 2 ;;
    --split=*) SPLIT=${1#*=}; shift ;;
    --waves) WAVES=1; shift ;;
    --tiny) MODE=(); NAME=bench; shift ;;
    --configs|--configs=*) CONFIGS=1; ARGS+=("$1"); shift ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
set -- ${ARGS[@]+"${ARGS[@]}"}
# --split names each part's configurations: a --configs after them would give every part all of them (every part
# would run every configuration and the merge would refuse the duplicates)
if [ -n "$SPLIT" ] && [ "$CONFIGS" = 1 ]; then
  echo "[gpu_real_size] --split \"$SPLIT\" names each part's configurations: leave out --configs" >&2; exit 2
fi
TP=1; MODEL=8b; prev=""
for x in "$@"; do  # the serving.py args that decide GPUs per part and which models to write
  case "$prev" in --real-size-tp) TP=$x ;; --real-size-model) MODEL=$x ;; esac
  case "$x" in --real-size-tp=*) TP=${x#*=} ;; --real-size-model=*) MODEL=${x#*=} ;; esac
  prev=$x
done
read -ra PARTS <<< "${SPLIT:-all}"; P=${#PARTS[@]}
read -ra RELS <<< "$RELEASES"
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
G=$((NGPU / TP))  # GPU groups of TP GPUs
if [ "$NAME" = bench ]; then OUTROOT=${OUT:-build}; else OUTROOT=${OUT:-build/real-size}; fi
mkdir -p "$OUTROOT"
export SPECV2_REAL_SIZE_MODELS=${SPECV2_REAL_SIZE_MODELS:-/tmp/specv2-real-size-models}
# the plan: one line per part (release, part, GPUs, wave, base port); parts without GPUs are reported and left out
PORT0=${REAL_SIZE_PORT0:-12500}
EPH=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
plan=(); WMAX=-1; o=0
for v in "${RELS[@]}"; do
  for j in $(seq 0 $((P - 1))); do
    if [ "$WAVES" = 1 ] && [ "$G" -gt 0 ]; then grp=$((o % G)); w=$((o / G)); else grp=$o; w=0; fi
    if [ "$grp" -ge "$G" ]; then
      echo "[gpu_real_size] no free GPUs for $v part $j (needs $TP of its own, $NGPU present): skipped (timings need GPUs of their own)"
    else
      gpus=$(seq -s, $((grp * TP)) $((grp * TP + TP - 1)))
      plan+=("$v $j $gpus $w $((PORT0 + 400 * o))"); [ "$w" -gt "$WMAX" ] && WMAX=$w
      echo "[gpu_real_size] plan: $v part$j (${PARTS[$j]}) -> GPUs $gpus, wave $w, base port $((PORT0 + 400 * o))"
    fi
    o=$((o + 1))
  done
done
TOP=$((PORT0 + 400 * (o - 1) + 300))  # the last part's highest port
if [ $((TOP + 10000)) -gt 65535 ]; then
  echo "[gpu_real_size] REAL_SIZE_PORT0=$PORT0: part ports up to $TOP, gRPC (+10000) past 65535: SGLang refuses" >&2; exit 2
fi
[ "$TOP" -lt "$EPH" ] || echo "[gpu_real_size] WARNING: ports up to $TOP reach the ephemeral range (from $EPH): a connection may hold one"
for v in "${RELS[@]}"; do  # unpack each bundle once, before the parts start side by side
  bash -c "source ci/gpu/prepare.sh $v" > /dev/null || echo "[gpu_real_size] preparing $v failed"
done
# the models once (serving.py would write them too, under a lock): tokenizers / torch from the first release's env
[ "$NAME" = bench ] || (source ci/gpu/prepare.sh "${RELS[0]}" > /dev/null && python3 bench/real_size_models.py --model "$MODEL") \
  || echo "[gpu_real_size] writing the models failed"
echo "[gpu_real_size] $NGPU GPU(s), TP $TP, model $MODEL; releases ${RELS[*]}; parts: ${PARTS[*]}; $((WMAX + 1)) wave(s);" \
     "preparation took $(( $(date +%s) - T0 ))s; commit ${SPECV2_COMMIT:-unrecorded}"
rc=0
for w in $(seq 0 "$WMAX"); do
  # this wave's share of what is left (30 s kept for the report); each part's budget (bench/gpu_bench.sh)
  export BENCH_TOTAL_S=$(( (${REAL_SIZE_TOTAL_S:-560} - ($(date +%s) - T0) - 30) / (WMAX + 1 - w) ))
  echo "[gpu_real_size] wave $w: each part gets ${BENCH_TOTAL_S}s"
  pids=()
  for p in "${plan[@]}"; do
    read -r v j gpus pw port <<< "$p"
    [ "$pw" = "$w" ] || continue
    cfg=(); [ "${PARTS[$j]}" = all ] || cfg=(--configs ${PARTS[$j]//,/ })
    (CUDA_VISIBLE_DEVICES=$gpus OUT=$OUTROOT/parts/$v-part$j bash bench/gpu_bench.sh "$v" "${MODE[@]}" \
       --base-port "$port" "${cfg[@]}" "$@" 2>&1 | sed -u "s/^/[$v part$j gpu$gpus] /") &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
done
merged=()
for v in "${RELS[@]}"; do
  ins=$(ls "$OUTROOT"/parts/"$v"-part*/bench-"$v"/results.json 2>/dev/null)
  [ -n "$ins" ] || { echo "[gpu_real_size] $v: no results"; rc=1; continue; }
  mkdir -p "$OUTROOT/bench-$v"
  if python3 bench/plot.py --merge "$OUTROOT/bench-$v/results.json" $ins \
     && python3 bench/plot.py "$OUTROOT/bench-$v/results.json" "$OUTROOT/bench-$v" \
     && cp "$OUTROOT/bench-$v/results.md" "$OUTROOT/$v-$NAME.md"; then
    merged+=("$OUTROOT/bench-$v/results.json")
  else
    echo "[gpu_real_size] $v: merging its parts failed (each part's results stay in $NAME-out.tar.gz)"; rc=1
  fi
done
if [ "$NAME" != bench ] && [ "${#merged[@]}" -gt 0 ]; then
  python3 bench/real_size_report.py --out-dir "$OUTROOT" "${merged[@]}" || rc=1
fi
(cd "$OUTROOT" && tar -czf "$NAME-out.tar.gz" bench-* parts 2>/dev/null && rm -rf parts bench-*/)
echo "[gpu_real_size] done in $(( $(date +%s) - T0 ))s (rc $rc): $(ls "$OUTROOT" | tr '\n' ' ')"
exit $rc
