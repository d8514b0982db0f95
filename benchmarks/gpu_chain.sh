#!/usr/bin/env bash
# Runbooks one after another in the background, so that a chain longer than one device call (10 minutes) runs
# without gaps on a machine kept warm by follow-up calls, and no runbook is cut at a call's edge.
#   source .carry/setup.sh && bash benchmarks/gpu_chain.sh start 'STAGE=speed bash benchmarks/gpu_1gpu_long_context.sh' ...
#   bash benchmarks/gpu_chain.sh wait 560   # every follow-up call: waits until the chain ends or 560 s pass
#   PACK=studies/gpu_vocab2 bash benchmarks/gpu_chain.sh wait 560   # also packs that study's runs ($OUT/study_runs.tgz)
# A study step writes its runs in the tree, not under $CHAIN, and packs them only when it ends: PACK packs them at
# every call (benchmarks/pack_study_runs.sh), so that a chain cut by the device budget loses only the runs in progress.
# Each step runs in its own session (setsid: it outlives the call that started it) with OUT=$CHAIN/<n> and an
# unbounded BUDGET_S; `wait` packs every step's output so far into $OUT/chain.tgz and prints the notes.
set -o pipefail
CHAIN=${CHAIN:-/root/chain}
mode=${1:-}; shift
case "$mode" in
  start)
    rm -rf "$CHAIN"; mkdir -p "$CHAIN"
    { printf 'set -o pipefail; cd %q\n' "$PWD"; n=0
      for step in "$@"; do n=$((n + 1)); echo "step $n: $step" >> "$CHAIN/steps.txt"
        printf 'mkdir -p %s/%d; echo "== step %d ($(date +%%T))" >> %s/chain.txt\n' "$CHAIN" $n $n "$CHAIN"
        printf '(export OUT=%s/%d BUDGET_S=100000; %s) > %s/%d/stdout.txt 2>&1\n' "$CHAIN" $n "$step" "$CHAIN" $n
        printf 'echo "== step %d rc $? ($(date +%%T))" >> %s/chain.txt\n' $n "$CHAIN"
      done
      printf 'touch %s/DONE\n' "$CHAIN"; } > "$CHAIN/chain.sh"
    setsid nohup bash "$CHAIN/chain.sh" > "$CHAIN/chain.log" 2>&1 < /dev/null &
    echo "chain started: $# steps" ;;
  wait)
    end=$((SECONDS + ${1:-560}))
    while [ ! -f "$CHAIN/DONE" ] && [ $SECONDS -lt $end ]; do sleep 5; done ;;
  *) echo "usage: gpu_chain.sh start 'step' ... | wait SECONDS" >&2; exit 2 ;;
esac
[ "$mode" = start ] && exit 0
cat "$CHAIN/steps.txt" "$CHAIN/chain.txt"; for d in "$CHAIN"/[0-9]*; do echo "#### $d"; cat "$d/notes.txt" 2>/dev/null | tail -40; done
tail -5 "$CHAIN/chain.log"
[ -n "${OUT:-}" ] && tar -czf "$OUT/chain.tgz" -C "$CHAIN" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.bin' .
[ -n "${PACK:-}" ] && [ -n "${OUT:-}" ] && [ -d "$PACK/runs" ] && bash benchmarks/pack_study_runs.sh "$PACK" "$OUT/study_runs.tgz"
[ -f "$CHAIN/DONE" ] && echo "chain done" || echo "chain running"
