# Sourced by the GPU benchmark scripts: environment, versions, and the tokenized corpus.
# Usage on the GPU machine (from the repo root, .carry built by ../shared/gpu/pack.sh):
#   source .carry/setup.sh; source benchmarks/gpu_common.sh
set -o pipefail
OUT=${OUT:-out/bench}; mkdir -p "$OUT"
export TOKENIZERS_PARALLELISM=false
source benchmarks/gpu_omegaconf.sh || exit 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$OUT/notes.txt"
python3 -c "import torch,transformers,accelerate,datasets; import importlib.util as u; print('torch',torch.__version__,'transformers',transformers.__version__,'accelerate',accelerate.__version__,'datasets',datasets.__version__,'liger',bool(u.find_spec('liger_kernel')),'flash_attn',bool(u.find_spec('flash_attn')),'deepspeed',bool(u.find_spec('deepspeed')))" | tee -a "$OUT/notes.txt"
DATA=${DATA:-out/mix_qwen3_2048}
CORPUS_TOK=${CORPUS_TOK:-$DATA_ROOT/tokenizers/qwen3}
MIX=${MIX:-.carry/data/pretrain/mix}  # the shards' folder (another where a study's call stashed them)
tokenize_corpus() {  # all train shards of $MIX (or CORPUS_SHARDS) at CORPUS_SEQ_LEN (2048), validation = first VAL_DOCS (10,000)
  python3 scripts/tokenize_pile.py --input ${CORPUS_SHARDS:-$MIX/train-*.jsonl.zst} \
    --val-input "$MIX"/val.jsonl.zst --val-docs ${VAL_DOCS:-10000} \
    --tokenizer "$CORPUS_TOK" --seq-len ${CORPUS_SEQ_LEN:-2048} --out "$DATA" --num-proc 16 -q 2>&1 | tail -3
  python3 -c "import json;m=json.load(open('$DATA/manifest.json'));print('tokens train',m['train']['tokens'],'blocks',m['train']['blocks'],'val blocks',m['validation']['blocks'],'tok/s',m['tokens_per_s'])" | tee -a "$OUT/notes.txt"
}
N="$OUT/notes.txt"
# All ten train shards do not fit one carry beside the kit: each of two calls stashes the shards it carried in
# STASH_DIR on the warm machine (STASH=1: only that, then exit 0); then MIX and CORPUS_SHARDS name the ten.
# cp --update=none needs coreutils >= 9.3 (the GPU image has 9.4, whose cp -n warns that its meaning will change).
STASH_DIR=${STASH_DIR:-/root/vocab2_data}
stash_ten_shards() {
  mkdir -p "$STASH_DIR/pretrain/mix"
  cp --update=none "$DATA_ROOT"/pretrain/mix/train-*.jsonl.zst "$STASH_DIR/pretrain/mix/"
  [ -f "$DATA_ROOT/pretrain/mix/val.jsonl.zst" ] && cp --update=none "$DATA_ROOT/pretrain/mix/val.jsonl.zst" "$STASH_DIR/pretrain/mix/"
  local shards; shards=$(ls "$STASH_DIR"/pretrain/mix/train-0000[0-9].jsonl.zst | wc -l)
  echo "== $shards shards in $STASH_DIR" | tee -a "$N"
  [ "${STASH:-0}" = 1 ] && exit 0
  [ "$shards" -eq 10 ] || { echo "== $shards of 10 shards: carry the others with STASH=1 first" | tee -a "$N"; exit 2; }
  MIX="$STASH_DIR/pretrain/mix" CORPUS_SHARDS="$STASH_DIR/pretrain/mix/train-0000[0-9].jsonl.zst"
}
# Time-boxed runs: a device call ends hard at 600 s, so every run gets the time left (BUDGET_S in all)
# as its limit and writes its log tail under $OUT, where it survives a kill.
BUDGET_S=${BUDGET_S:-570}
left() { echo $((BUDGET_S - SECONDS)); }
timed() {  # name, command...: skipped with under 90 s left; rc and errors to notes.txt, log tail to runs.log
  local name=$1 t=$(( $(left) - 5 )); shift
  if [ $t -lt 90 ]; then echo "== $name skipped: ${t}s left" | tee -a "$N"; return 1; fi
  timeout -s KILL $t "$@" > /tmp/$name.log 2>&1; local rc=$?
  { echo "== $name rc $rc ($(date +%T), ${SECONDS}s)"; grep -E "resuming|Error|error:|does not fit" /tmp/$name.log | tail -3 | cut -c1-300; } | tee -a "$N"
  { echo "#### $name"; grep -v -i warn /tmp/$name.log | tail -30; } >> "$OUT/runs.log"
  return $rc
}
study_call() {  # SPEC STUDY NAME [study.py options]: train the study's runs until BUDGET_S (SIGTERM: runs in progress
  # checkpoint), pack their files as $OUT/NAME_runs.tgz (copy it to .carry/ for the next call), set $todo to the runs left.
  # --foreground: the signal goes to study.py alone, which passes it to its workers; -k: a hung study cannot eat the call
  timeout --foreground -k 30 -s TERM $(( $(left) - 90 )) python3 scripts/study.py $1 "${@:4}" > "$OUT/study.log" 2>&1
  echo "== study rc $? (${SECONDS}s)" | tee -a "$N"
  grep -hE ": (training|done)|Error|error" "$2"/logs/worker*.log | cut -c1-200 | tail -60 >> "$OUT/runs.log"
  bash benchmarks/pack_study_runs.sh "$2" "$OUT/$3_runs.tgz" > /dev/null
  todo=$(python3 scripts/study.py $1 --list | grep -c ^todo)
  echo "== runs left: $todo" | tee -a "$N"
}
