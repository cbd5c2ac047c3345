#!/usr/bin/env bash
# Serving benchmark on the tiny real-weight models for several releases in one device call, each release (or with
# --split each part) on GPUs of its own: bench/gpu_real_size.sh --tiny (its header says what it writes).
#   bash bench/gpu_bench_all.sh "0.5.11 0.5.12.post1" [--split "nospec,eagle3-topk1 tree-topk8,tree-topk16"] [serving.py args]
RELEASES=${1:?usage: gpu_bench_all.sh "REL ..." [--split "A,B C,D"] [serving.py args]}; shift
exec bash bench/gpu_real_size.sh "$RELEASES" --tiny "$@"
