#!/usr/bin/env bash
# The small files of a study's runs as a .tgz that the study runbooks restore on the next machine: summary, log,
# recipe and lineage of every run (finished or not: a run restarted from scratch counts its earlier attempts' time
# from its log) and the workers' logs. Used by gpu_common.sh's study_call and by `PACK=` in gpu_chain.sh.
#   bash benchmarks/pack_study_runs.sh STUDY_DIR OUT.tgz
set -euo pipefail
out=$(realpath -m "$2")
cd "$1"
{ ls -d runs/*/*/summary.json runs/*/*/log.jsonl runs/*/*/recipe.yaml runs/*/*/lineage.json logs 2>/dev/null || true; } \
  | tar -czf "$out" -T -
echo "packed $(tar -tzf "$out" | grep -c '/summary.json$' || true) finished runs of $1"
