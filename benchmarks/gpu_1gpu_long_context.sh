#!/usr/bin/env bash
# Issue 38 on one GPU: the context extension of recipes/best_small.yaml (1,024 -> 16,384 tokens,
# recipes/best_small_16k.yaml) and its goals, in device calls on one machine that stays warm between them (runs/
# and out/ stay there; only $OUT comes back; benchmarks/gpu_chain.sh runs stages back to back):
#   STAGE=speed   tokens/s, MFU (attention FLOPs counted) and peak memory against the plan's estimate, best_small's
#                 shape from random weights, at 2,048 and 16,384 tokens per block with the same tokens per micro-batch
#                 (65,536) and the document mask, + 16k with activation checkpointing and 16k without the mask.
#                 Goal: 16k >= 80% of 2k's tokens/s; estimate within 10% of the measured peak at 16k.
#   STAGE=flex    the same-call A/B of the document mask's backends at 2k and 16k: SDPA (a dense mask) and flex
#                 attention (a block mask that skips whole blocks across documents), + 2k without the mask.
#   STAGE=large   the 1.8B shape (recipes/qwen3_1p8b_1gpu.yaml) at 2k and 16k, document mask, flex attention: the
#                 issue's throughput row for a model whose attention is a smaller share of its FLOPs. An A/B in one
#                 call: run it again with NAME=at EXTRA='model.compile_mode=max-autotune-no-cudagraphs' (overrides
#                 split at spaces; NAME prefixes the runs' names, default l). With flash-attention 4 installed
#                 (results/long_context_2026-11-27/fa4/README.md says how it travels):
#                 NAME=fa4 EXTRA='model.attn_implementation=flex_attention_fa4' STAGE=large.
#   STAGE=small   the same at best_small's shape (65,536 tokens per micro-batch, as STAGE=speed; NAME, EXTRA and
#                 LENGTHS as there).
#   STAGE=largedata the CPU work of STAGE=large and STAGE=small (their blocks at LENGTHS), beside STAGE=base.
#   STAGE=flexdiag where flex attention's time goes: benchmarks/bench_doc_attention.py (the attention alone, fwd+bwd,
#                 SDPA causal / SDPA + dense mask / flex + block mask, on real 16k and 2k blocks), then the 16k flex run
#                 logging every step, with dynamo's recompiles and graph breaks in $OUT/flex_dynamo.log.
#   STAGE=kernels flex attention's kernel options against its defaults (the attention alone, fwd+bwd), at the 1.8B
#                 shape's heads (16 query, 8 key/value) on the first 4 blocks of the 16k data, and on the same cut
#                 into 32 rows of 2k.
#   STAGE=maskloss the document mask's effect on the loss, same call: recipes/best_small.yaml on the 2k data (--pack
#                 whole) at a quarter of its budget (MASK_FLOPS, default 3.36e16: ~80 s of training), with and
#                 without model.document_mask; the final bits per byte of both on the same validation blocks,
#                 then both final models evaluated both ways (with and without the mask) on 256 of them.
#   STAGE=base    recipes/best_small.yaml itself (benchmarks/gpu_1gpu_best_small.sh, REPORT=0: ~480 s).
#   STAGE=data    STAGE=extend's data alone (RDOCS and RETRIEVAL_ARGS as there), then 8 untimed steps at the
#                 extension's shape that compile flex attention into this machine's cache: run beside STAGE=base,
#                 its work done while the base trains, so that the first extension starts warm.
#   STAGE=extend  the 16k data (--pack whole) and the recipe's retrieval documents (RETRIEVAL_DOCS, default 2,500),
#                 the extension phase from runs/best_small/final (the recipe's context.tokens, 6e7; EXT_TOKENS
#                 overrides it), then `hfpretrain long-context` on the model before and
#                 after: loss by position on 16k validation documents, passkey at 1k-16k, retrieval by distance
#                 on 60 held-out retrieval documents, the short-context bits per byte at 1,024; the run's report.
#                 Goals: loss at 8k-16k <= loss at 1k-2k, passkey >= 90% at 16k, short-context bits per byte
#                 within +2% of the base model's. A variant, on the machine that ran
#                 the first: NAME=ext_x EXTRA='training.learning_rate=1.5e-4' (recipe overrides), and/or
#                 RDOCS=retrieval_x RETRIEVAL_ARGS='--min-facts 1 --max-facts 4' (other retrieval documents).
# Carry: .carry (TOKENIZERS=gpt2 NO_DEEPSPEED=1 ../shared/gpu/pack.sh 45 --no-eval, >= 6 train shards, then
# benchmarks/pack_extra.sh) and out/tok_bpe8k, as for gpu_1gpu_best_small.sh.
#   source .carry/setup.sh && STAGE=speed bash benchmarks/gpu_1gpu_long_context.sh
# STAGE=large needs Qwen3's tokenizer and one shard instead: TOKENIZERS=qwen3 NO_DEEPSPEED=1 ../shared/gpu/pack.sh 6
# --no-eval, then benchmarks/pack_extra.sh; beside the 40 MB tree that is over 64 MiB: cut .carry's val.jsonl.zst to
# its first 1,000 documents (all the stage reads).
#   source .carry/setup.sh && STAGE=base bash benchmarks/gpu_1gpu_long_context.sh  # beside it: STAGE=data
#   source .carry/setup.sh && STAGE=extend bash benchmarks/gpu_1gpu_long_context.sh
set -o pipefail
case "${STAGE:-}" in speed|flex|large|small|largedata|flexdiag|kernels|maskloss|base|data|extend) ;;
  *) echo "STAGE=speed, flex, large, small, largedata, flexdiag, kernels, maskloss, base, data or extend (got '${STAGE:-}')" >&2
     exit 2 ;; esac
source benchmarks/gpu_omegaconf.sh || exit 2
OUT=${OUT:-out/bench}; mkdir -p "$OUT"; N="$OUT/notes.txt"
export TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$N"
BUDGET_S=${BUDGET_S:-570}
MIX=${MIX:-.carry/data/pretrain/mix}  # the shards' folder (another where a study's call stashed them)
tok() {  # seq_len, out folder, extra arguments: the first 6 train shards with the 8k BPE (kept while warm)
  [ -f "$2/manifest.json" ] || python3 scripts/tokenize_pile.py --input "$MIX"/train-0000[0-5].jsonl.zst \
    --val-input "$MIX"/val.jsonl.zst --val-docs 10000 --tokenizer out/tok_bpe8k --seq-len "$1" \
    --out "$2" --num-proc 16 -q "${@:3}" 2>&1 | tail -2
  python3 -c "import json;m=json.load(open('$2/manifest.json'));d=m['train']['document_lengths'];print('$2', m['pack'], 'blocks',m['train']['blocks'],{k:d[k] for k in ('documents','p50','p90','p99','max','longer_than_block','split_short')})" | tee -a "$N"
}
row() {  # name: tokens/s, MFU, peak memory against the plan's estimate, from the run's log
  python3 - "$1" <<'PY' | tee -a "$N"
import json, sys
name = sys.argv[1]
events = [json.loads(l) for l in open(f"runs/lc_{name}/log.jsonl")]
plan = events[0]["plan"]
logs = [e for e in events if e["event"] == "log" and "tokens_per_s" in e][2:]  # past compilation
if not logs:
    sys.exit(print(f"{name}: no timed log"))
tps = sum(e["tokens_per_s"] for e in logs) / len(logs)
mfu = sum(e.get("mfu", 0) for e in logs) / len(logs)
peak = max(e.get("mem_peak_gib") or 0 for e in events if e["event"] == "log")
est = plan["memory_per_gpu_gib"]["total"]
print(f"| {name} | {plan['seq_len']} | {plan['micro_batch']}x{plan['gradient_accumulation_steps']} | {tps:,.0f} | "
      f"{mfu:.1%} | {peak:.1f} | {est:.1f} | {est / peak - 1:+.1%} | {plan['activation_checkpointing']} |")
PY
}
speed() {  # name, seq_len, data, overrides...: 30 steps of $RECIPE's shape (best_small's), random weights
  local t=$(( BUDGET_S - SECONDS - 10 )); [ $t -lt 60 ] && { echo "== $1 skipped (${t}s left)" | tee -a "$N"; return; }
  rm -rf runs/lc_$1
  timeout -k 10 -s TERM $t python3 scripts/pretrain.py ${RECIPE:-recipes/best_small.yaml} data.path=$3 training.output_dir=runs/lc_$1 \
    training_flops=null training.max_steps=30 training.logging_steps=5 training.eval_strategy=no training.save_strategy=no \
    training.gradient_accumulation_steps=2 training.warmup_steps=5 batch.micro_batch=recipe \
    model.attn_implementation=sdpa "${@:4}" > /tmp/lc_$1.log 2>&1
  echo "== $1 rc $? (${SECONDS}s)" | tee -a "$N"; grep -E "error:|Error" /tmp/lc_$1.log | tail -2 | tee -a "$N"
  row $1
}
if [ "$STAGE" = speed ]; then
  tok 2048 out/mix6_bpe8k_2k --pack whole
  tok 16384 out/mix6_bpe8k_16k --pack whole
  echo "| run | seq_len | micro x accum | tokens/s | MFU | peak GiB | plan GiB | plan vs peak | checkpointing |" | tee -a "$N"
  speed s2k 2048 out/mix6_bpe8k_2k training.per_device_train_batch_size=32 model.document_mask=true
  speed s16k 16384 out/mix6_bpe8k_16k training.per_device_train_batch_size=4 model.document_mask=true
  speed s16k_ckpt 16384 out/mix6_bpe8k_16k training.per_device_train_batch_size=4 model.document_mask=true \
    training.activation_checkpointing=true
  speed s16k_nomask 16384 out/mix6_bpe8k_16k training.per_device_train_batch_size=4 model.attn_implementation=sdpa_packed
  exit 0
fi
if [ "$STAGE" = flex ]; then  # same call: the document mask through SDPA's dense mask against flex attention's block mask
  tok 2048 out/mix6_bpe8k_2k --pack whole
  tok 16384 out/mix6_bpe8k_16k --pack whole
  echo "| run | seq_len | micro x accum | tokens/s | MFU | peak GiB | plan GiB | plan vs peak | checkpointing |" | tee -a "$N"
  speed s16k_flex 16384 out/mix6_bpe8k_16k training.per_device_train_batch_size=4 model.document_mask=true \
    model.attn_implementation=flex_attention
  speed s2k_flex 2048 out/mix6_bpe8k_2k training.per_device_train_batch_size=32 model.document_mask=true \
    model.attn_implementation=flex_attention
  speed s2k 2048 out/mix6_bpe8k_2k training.per_device_train_batch_size=32 model.document_mask=true
  speed s16k 16384 out/mix6_bpe8k_16k training.per_device_train_batch_size=4 model.document_mask=true
  speed s2k_nomask 2048 out/mix6_bpe8k_2k training.per_device_train_batch_size=32 model.attn_implementation=sdpa_packed
  exit 0
fi
large_data() {  # seq_len: the 1.8B shape's blocks (Qwen3's tokenizer); one shard is enough for 30 steps
  [ -f out/mix1_qwen3_$1/manifest.json ] || python3 scripts/tokenize_pile.py --input "$MIX"/train-00000.jsonl.zst \
    --val-input "$MIX"/val.jsonl.zst --val-docs 1000 --tokenizer "$DATA_ROOT/tokenizers/qwen3" --seq-len $1 \
    --out out/mix1_qwen3_$1 --num-proc 16 -q --pack whole 2>&1 | tail -1
}
small_data() { tok $1 out/mix6_bpe8k_$(($1 / 1024))k --pack whole; }  # seq_len: best_small's blocks
if [ "$STAGE" = largedata ]; then  # the CPU work of STAGE=large and STAGE=small, beside STAGE=base
  for L in ${LENGTHS:-2048 16384}; do large_data $L; small_data $L; done
  exit 0
fi
if [ "$STAGE" = large ] || [ "$STAGE" = small ]; then  # the throughput row: 2k and 16k with the document mask (flex
  # attention, auto's choice), the same tokens per micro-batch; large: the 1.8B shape (recipes/qwen3_1p8b_1gpu.yaml,
  # Qwen3's tokenizer, 16,384 tokens), small: best_small's (65,536 tokens, as STAGE=speed; runs named sm2k, sm16k)
  echo "| run | seq_len | micro x accum | tokens/s | MFU | peak GiB | plan GiB | plan vs peak | checkpointing |" | tee -a "$N"
  for L in ${LENGTHS:-2048 16384}; do  # LENGTHS="16384 2048": the other order, for drift
    if [ "$STAGE" = large ]; then
      large_data $L; recipe=recipes/qwen3_1p8b_1gpu.yaml d=out/mix1_qwen3_$L micro=16384 name=${NAME:-l}
    else
      small_data $L; recipe=recipes/best_small.yaml d=out/mix6_bpe8k_$((L / 1024))k micro=65536 name=${NAME:-sm}
    fi
    RECIPE=$recipe speed $name$((L / 1024))k $L $d \
      training.per_device_train_batch_size=$((micro / L)) model.document_mask=true model.attn_implementation=auto \
      ${EXTRA:-}
  done
  exit 0
fi
if [ "$STAGE" = flexdiag ]; then
  tok 2048 out/mix6_bpe8k_2k --pack whole
  tok 16384 out/mix6_bpe8k_16k --pack whole
  for d in 16k:4 2k:32; do
    timeout -k 5 240 python3 benchmarks/bench_doc_attention.py out/mix6_bpe8k_${d%:*} --batch ${d#*:} \
      --out "$OUT/attention_${d%:*}.json" > "$OUT/attention_${d%:*}.log" 2>&1
    echo "== attention ${d%:*} rc $? (${SECONDS}s)" | tee -a "$N"; tail -22 "$OUT/attention_${d%:*}.log" | tee -a "$N"
  done
  TORCH_LOGS=recompiles,graph_breaks speed s16k_flex 16384 out/mix6_bpe8k_16k training.per_device_train_batch_size=4 \
    model.document_mask=true model.attn_implementation=flex_attention training.max_steps=12 training.logging_steps=1
  grep -E "__recompiles|__graph_breaks" /tmp/lc_s16k_flex.log | cut -c1-400 > "$OUT/flex_dynamo.log"
  tail -60 /tmp/lc_s16k_flex.log > "$OUT/flex_tail.log"
  grep '"event": "log"' runs/lc_s16k_flex/log.jsonl | cut -c1-300 > "$OUT/flex_steps.log"
  exit 0
fi
if [ "$STAGE" = kernels ]; then  # Hopper's tensor memory accelerator, and two promises that a document mask seemed to
  # allow (each row attends to itself; a row's blocks run from its document's start to the diagonal), which gave NaN
  # with flex's block mask (docs/benchmarks.md § Long context)
  tok 16384 out/mix6_bpe8k_16k --pack whole
  opts=('{"USE_TMA": true}' '{"ROWS_GUARANTEED_SAFE": true, "BLOCKS_ARE_CONTIGUOUS": true}'
        '{"USE_TMA": true, "ROWS_GUARANTEED_SAFE": true, "BLOCKS_ARE_CONTIGUOUS": true}')
  for spec in "16k 4 16384" "2k 32 2048"; do set -- $spec
    timeout -k 5 300 python3 benchmarks/bench_doc_attention.py out/mix6_bpe8k_16k --batch $2 --row-len $3 \
      --heads 16 --kv-heads 8 --skip-dense --eager-mask --flex-options "${opts[@]}" --out "$OUT/attn_$1.json" \
      > "$OUT/attn_$1.log" 2>&1
    echo "== attention $1 rc $? (${SECONDS}s)" | tee -a "$N"; grep -E '"flex|_ms"|error' "$OUT/attn_$1.log" | tee -a "$N"
  done
  exit 0
fi
if [ "$STAGE" = maskloss ]; then
  tok 2048 out/mix6_bpe8k_2k --pack whole
  for arm in nomask mask; do
    extra=""; [ $arm = mask ] && extra=model.document_mask=true
    rm -rf runs/ml_$arm
    timeout -k 10 -s TERM $(( BUDGET_S - SECONDS - 10 )) python3 scripts/pretrain.py recipes/best_small.yaml \
      data.path=out/mix6_bpe8k_2k training_flops=${MASK_FLOPS:-3.36e16} training.output_dir=runs/ml_$arm \
      training.per_device_train_batch_size=32 training.gradient_accumulation_steps=2 batch.micro_batch=recipe \
      training.warmup_steps=25 training.eval_steps=100000 training.save_strategy=no $extra > /tmp/ml_$arm.log 2>&1
    echo "== $arm rc $? (${SECONDS}s)" | tee -a "$N"; grep -E "error:|Error" /tmp/ml_$arm.log | tail -2 | tee -a "$N"
    python3 -c "
import json; s = json.load(open('runs/ml_$arm/summary.json')); e = s['final_eval']; p = s['plan']
print('| $arm |', p['fast_path']['attn_implementation'], '|', s['global_step'], 'steps |', f\"{s['train']['train_runtime']:.1f} s | mean train loss {s['train']['train_loss']:.4f} |\",
      f\"{e['eval_loss']:.4f} nats | {e['eval_bpb']:.4f} bits per byte |\", e.get('eval_tokens'))" 2>&1 | tee -a "$N"
    cp runs/ml_$arm/summary.json "$OUT/maskloss_$arm.json" 2>/dev/null
  done
  # Each run's own evaluation scores the unmasked model with attention across documents, the masked one per
  # document: not the same task. Both models, both ways, on the same 256 validation blocks.
  for arm in nomask mask; do for how in on off; do
    python3 scripts/long_context.py runs/ml_$arm/final --short-data out/mix6_bpe8k_2k --short-blocks 256 \
      --lengths --document-mask $how --out "$OUT/cross_${arm}_mask_$how.json" > /dev/null 2>&1
    python3 -c "import json; s=json.load(open('$OUT/cross_${arm}_mask_$how.json'))['short_context']; print('| $arm model | evaluated with the mask $how |', {k: round(v, 4) if isinstance(v, float) else v for k, v in s.items()})" 2>&1 | tee -a "$N"
  done; done
  exit 0
fi
if [ "$STAGE" = base ]; then
  REPORT=0 OUT="$OUT" exec bash benchmarks/gpu_1gpu_best_small.sh
fi
[ "$STAGE" = data ] || [ -f runs/best_small/final/config.json ] || { echo "no runs/best_small/final: run STAGE=base first on this machine" | tee -a "$N"; exit 2; }
# a variant: another NAME, its recipe overrides in EXTRA (split at spaces: no space inside one), and other retrieval
# documents under their own RDOCS (a folder that exists is used as it is, whatever RETRIEVAL_ARGS say)
NAME=${NAME:-best_small_16k}
[ "$NAME" = best_small ] && { echo "NAME=best_small is the base model's run: name the variant otherwise" | tee -a "$N"; exit 2; }
[ -n "${RETRIEVAL_ARGS:-}" ] && [ -z "${RDOCS:-}" ] && { echo "RETRIEVAL_ARGS needs an RDOCS of its own" | tee -a "$N"; exit 2; }
RDOCS=${RDOCS:-retrieval_far_bpe8k}  # the recipe's, with its arguments:
RETRIEVAL_ARGS=${RETRIEVAL_ARGS:---min-tokens 8192 --min-facts 16 --max-facts 48 --repeat-share 0.25 \
  --statement-share 0.25}
[ "$STAGE" = data ] || tok 1024 out/mix6_bpe8k_1024  # STAGE=base makes it, beside STAGE=data
tok 16384 out/mix6_bpe8k_16k --pack whole
# the recipe's second source: synthetic retrieval documents from the first three shards' text (data/retrieval.py)
[ -f out/$RDOCS.jsonl.zst ] || python3 scripts/retrieval_docs.py --input "$MIX"/train-0000[0-2].jsonl.zst \
  --tokenizer out/tok_bpe8k --documents ${RETRIEVAL_DOCS:-2500} --max-tokens 16000 $RETRIEVAL_ARGS \
  --out out/$RDOCS.jsonl.zst 2>&1 | tail -1 | tee -a "$N"
[ -f out/${RDOCS}_16k/manifest.json ] || python3 scripts/tokenize_pile.py --input out/$RDOCS.jsonl.zst \
  --val-docs 100 --tokenizer out/tok_bpe8k --seq-len 16384 --pack whole --out out/${RDOCS}_16k --num-proc 16 -q \
  2>&1 | tail -2
# held out, the same for every variant: retrieval scored beside the passkey, on facts and text never trained on
[ -f out/retrieval_val.jsonl.zst ] || python3 scripts/retrieval_docs.py --input "$MIX"/val.jsonl.zst \
  --tokenizer out/tok_bpe8k --documents 60 --min-tokens 1024 --max-tokens 16000 --min-facts 4 --max-facts 8 \
  --repeat-share 0.5 --seed 1 --out out/retrieval_val.jsonl.zst 2>&1 | tail -1 | tee -a "$N"
# what made the file, not what RETRIEVAL_ARGS ask for (a file left on the machine is not made again)
made=$(python3 -c "import sys;from hfpretrain.data.retrieval import made_by;print(*made_by(sys.argv[1]) or '?')" \
  out/$RDOCS.jsonl.zst)
echo "== data (${SECONDS}s): $RDOCS (made by: $made), $NAME: ${EXTRA:-the recipe}" | tee -a "$N"
args="recipes/best_small_16k.yaml ${EXT_TOKENS:+context.tokens=$EXT_TOKENS} training.output_dir=runs/$NAME
  data.sources.retrieval=out/${RDOCS}_16k ${EXTRA:-}"
if [ "$STAGE" = data ]; then  # flex attention's first build of the block mask at 16k takes minutes: done here, the
  # first extension trained in 179 s (2026-11-27), against 362-461 s compiling cold in the eleven chains before
  micro=$(python3 scripts/pretrain.py $args --dry-run 2>/dev/null \
    | python3 -c "import json,sys;print(json.load(sys.stdin)['plan']['micro_batch'])")
  echo "== compiling the extension's shape (16,384 x ${micro:-?}), random weights, not timed" | tee -a "$N"
  [ -n "$micro" ] && speed compile16k 16384 out/mix6_bpe8k_16k training.per_device_train_batch_size=$micro \
    training.max_steps=8 model.document_mask=true model.attn_implementation=auto
  exit 0
fi
python3 scripts/pretrain.py $args --dry-run 2>/dev/null \
  | python3 -c "import json,sys;p=json.load(sys.stdin)['plan'];print('plan', p['max_steps'], 'steps', p['micro_batch'], 'x', p['gradient_accumulation_steps'], p['memory_per_gpu_gib']['total'], 'GiB', p['context']['fits'])" | tee -a "$N"
rm -rf runs/$NAME
# the time left for training: the evaluations after it take ~90 s (measured with 32 blocks of loss by position)
timeout --foreground -k 20 -s TERM $(( BUDGET_S - SECONDS - 150 )) python3 scripts/pretrain.py $args \
  training.eval_strategy=no "evaluation.long_context_lengths=[]" evaluation.long_context_blocks=0 \
  > "$OUT/extend.log" 2>&1  # measured below, for both models, uncompiled
rc=$?; echo "== extend $NAME rc $rc (${SECONDS}s)" | tee -a "$N"
grep -E "error:|Error" "$OUT/extend.log" | tail -2 | tee -a "$N"
models=$NAME; [ "$NAME" = best_small_16k ] && models="best_small $NAME"  # a variant: the base is measured already
for model in $models; do
  [ -f runs/$model/final/config.json ] || { echo "== $model: no final/" | tee -a "$N"; continue; }
  # 256 validation blocks: the loss by position over ~63 documents of >= 8,192 tokens (counted on the validation
  # file with out/tok_bpe8k: 147 in its 10,000 documents, in ~580 blocks), not the first 32 blocks' 7, on which
  # 8k-16k and 1k-2k swapped order between two sessions' runs of one recipe
  timeout -k 5 $(( (BUDGET_S - SECONDS) / 2 )) python3 scripts/long_context.py runs/$model/final --data out/mix6_bpe8k_16k \
    --blocks 256 --min-document-tokens 8192 --lengths 1024 2048 4096 8192 16384 --samples 50 \
    --short-data out/mix6_bpe8k_1024 --short-blocks 256 --retrieval-docs out/retrieval_val.jsonl.zst \
    --retrieval-samples 60 > "$OUT/long_context_$model.txt" 2>&1
  lc=$?; (( rc )) || rc=$lc; echo "== long-context $model rc $lc (${SECONDS}s)" | tee -a "$N"
  cat "$OUT/long_context_$model.txt" >> "$N"
  # the short context scored both ways for both models: auto scores each as its recipe trained it (the base model
  # on packed text, the masked extension on each document alone), two tasks ~1% apart (STAGE=maskloss)
  for mask in on off; do
    timeout -k 5 120 python3 scripts/long_context.py runs/$model/final --short-data out/mix6_bpe8k_1024 \
      --short-blocks 256 --lengths --document-mask $mask --out "$OUT/short_${model}_mask_$mask.json" > /dev/null 2>&1
    python3 -c "import json;print('$model mask $mask short bpb', json.load(open('$OUT/short_${model}_mask_$mask.json'))['short_context']['bpb'])" 2>&1 | tail -1 | tee -a "$N"
  done
done
[ -f runs/$NAME/final/long_context.json ] && timeout -k 5 $(( BUDGET_S - SECONDS )) python3 scripts/report.py \
  runs/$NAME --no-eval --no-generate > "$OUT/report.log" 2>&1
tar -czf "$OUT/$NAME.tgz" --exclude='checkpoint-*' --exclude='*.safetensors' --exclude='*.bin' --exclude='*.pt' \
  runs/$NAME $(ls runs/best_small/final/long_context.json 2>/dev/null)  # the base's: measured beside the recipe only
exit $rc  # the extension's status, else the first evaluation's
