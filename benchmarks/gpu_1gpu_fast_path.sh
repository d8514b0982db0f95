#!/usr/bin/env bash
# One GPU: the GPT-2 124M shape (recipes/gpt2_124m.yaml: seq 1024, 32 x 4 x 1024 tokens per step), one
# speed change at a time, then the stock transformers.Trainer on the same shape and data (issue #14).
# Each variant: STEPS steps in windows of 5, no evaluation or checkpoint (the e2e variant has both).
#   source .carry/setup.sh && VARIANTS="old pad packed auto" bash benchmarks/gpu_1gpu_fast_path.sh
source benchmarks/gpu_common.sh
DATA=out/mix_gpt2_1024
if [ ! -f $DATA/manifest.json ]; then
  python3 scripts/tokenize_pile.py --input .carry/data/pretrain/mix/train-*.jsonl.zst \
    --val-input .carry/data/pretrain/mix/val.jsonl.zst --val-docs 10000 \
    --tokenizer "$DATA_ROOT/tokenizers/gpt2" --seq-len 1024 --out "$DATA" --num-proc 16 -q 2>&1 | tail -2
fi
STEPS=${STEPS:-40}
# Variants run the recipe's split (32 x 4) unless they are "the defaults" (auto*, s*, e2e, profile*),
# which fold it as batch.micro_batch=auto does (128 x 1 on an H200, 64 x 2 on an 80 GB GPU).
COMMON="data.path=$DATA training.report_to=none training.disable_tqdm=true training.logging_steps=5
  training.eval_strategy=no training.save_strategy=no training.max_steps=$STEPS batch.micro_batch=recipe"
AUTO=batch.micro_batch=auto
CDT='model.inductor_options={coordinate_descent_tuning: true}'
OLD="model.attn_implementation=sdpa model.compile=decoder loss.implementation=liger"
variant() {  # name, overrides...
  rm -rf /tmp/$1  # log.jsonl appends: a run left by an earlier call on a warm machine would mix in
  timed $1 python3 benchmarks/benchmark.py ours ${RECIPE:-recipes/gpt2_124m.yaml} $COMMON \
    training.output_dir=/tmp/$1 "${@:2}" --out "$OUT/fp_$1.json"
}
for v in ${VARIANTS:-old pad packed auto model autotune stock e2e}; do
  base=${v%.[0-9]}  # a suffix .N repeats a variant (alternating A/B runs in one call)
  case $base in
    old) variant $v $OLD model.overrides.pad_vocab_multiple=1 ;;  # the issue's baseline: 244k tokens/s on an H200
    pad) variant $v $OLD ;;                                        # + vocab 50,304
    packed) variant $v model.compile=decoder loss.implementation=liger ;;  # + SDPA causal without a mask
    auto) variant $v $AUTO ;;                                      # the defaults
    auto_tanh|auto_tanh2) variant $v $AUTO kernels.gelu_sigmoid=false kernels.bias_gelu=false ;;  # transformers' MLP
    auto_nobias) variant $v $AUTO kernels.bias_gelu=false ;;       # c_fc's bias gradient in a pass of its own
    auto_oldlse) variant $v $AUTO 'kernels.loss_tile=[4096,8]' ;;  # the loss kernel's tiling before
    auto_lse8k) variant $v $AUTO 'kernels.loss_tile=[8192,8]' ;;  # 8,192 columns per iteration
    auto2) variant $v $AUTO ;;                                     # the defaults again (as auto.2)
    pdl) variant $v $AUTO model.inductor_options.triton.enable_pdl=true ;;  # programmatic dependent launch (Hopper)
    bench_gelu) python3 benchmarks/bench_gelu.py | tee "$OUT/bench_gelu.txt" ;;  # GELU's kernels alone, the MLP
    bench_lse) python3 benchmarks/bench_loss_kernel.py | tee "$OUT/bench_loss.txt" ;;  # the loss kernel's tilings
    auto_f32) variant $v $AUTO model.residual_dtype=float32 ;;     # the defaults with the fp32 residual stream
    auto_nofused) variant $v $AUTO kernels.fused_head=false ;;     # the defaults with the compiled head + loss
    s146m_nofused) variant $v $AUTO model.config=scale_146m kernels.fused_head=false ;;
    s146m_f32) variant $v $AUTO model.config=scale_146m model.residual_dtype=float32 ;;
    lse) variant $v ;;                                             # the recipe's split, not folded
    model) variant $v $AUTO model.compile=model ;;
    autotune) variant $v model.compile_mode=max-autotune-no-cudagraphs ;;
    autotune_gemm)  # the defaults, inductor choosing each matmul among cuBLAS and Triton templates that fuse epilogues
      variant $v $AUTO 'model.inductor_options={max_autotune_gemm: true}'
      grep -A4 "^AUTOTUNE" /tmp/$v.log > "$OUT/autotune_gemm.txt" ;;
    mb64) variant $v training.per_device_train_batch_size=64 training.gradient_accumulation_steps=2 ;;
    mb128) variant $v training.per_device_train_batch_size=128 training.gradient_accumulation_steps=1 ;;
    s53m|s92m) variant $v $AUTO model.config=scale_${base#s} ;;
    s53m_mb128|s92m_mb128|s146m_mb128) m=${base#s}; variant $v model.config=scale_${m%_mb128} \
      training.per_device_train_batch_size=128 training.gradient_accumulation_steps=1 ;;
    tiled) variant $v $AUTO model.inductor_options.triton.prefer_nd_tiling=true \
             model.inductor_options.triton.tile_reductions=true ;;  # 2-D tiles: column sums fused with their producer
    nd) variant $v $AUTO model.inductor_options.triton.prefer_nd_tiling=true ;;
    cdt) variant $v "$CDT" ;;  # inductor tunes each Triton kernel's block sizes (slower compile)
    cdt_mb64) variant $v "$CDT" training.per_device_train_batch_size=64 training.gradient_accumulation_steps=2 ;;
    cdt_model) variant $v "$CDT" model.compile=model ;;
    s146m) variant $v $AUTO model.config=scale_146m ;;
    s146m_fp8) variant $v model.config=scale_146m model.precision=fp8 ;;
    s311m) variant $v $AUTO model.config=scale_311m ;;
    s311m_fp8) variant $v model.config=scale_311m model.precision=fp8 ;;
    no_online) variant $v 'model.inductor_options={online_softmax: false}' ;;
    profile_cdt) variant $v $AUTO "$CDT" 'logging.profile_steps=[20,22]' training.output_dir=/tmp/profile
             cp /tmp/profile/profile/kernels-*.txt "$OUT/" ;;
    flash) variant $v 'model.sdpa_backends=[flash]' ;;
    cudnn) variant $v 'model.sdpa_backends=[cudnn,flash]' ;;
    numerics)  # 200 steps of 8 x 1024 tokens: the fast path against the plain one (eager, HF's loss, sdpa)
      SMALL="training.max_steps=200 training.per_device_train_batch_size=8 training.gradient_accumulation_steps=1
        training.logging_steps=1"
      variant num_fast $SMALL
      variant num_plain $SMALL model.compile=none loss.implementation=none model.attn_implementation=sdpa \
        model.residual_dtype=float32
      python3 benchmarks/compare_losses.py /tmp/num_fast/log.jsonl /tmp/num_plain/log.jsonl | tee "$OUT/numerics.txt"
      if [ -n "${NUM_F32:-}" ]; then  # the fast path with the fp32 stream: how much of the difference the bf16 one is
        variant num_fast_f32 $SMALL model.residual_dtype=float32
        python3 benchmarks/compare_losses.py /tmp/num_fast_f32/log.jsonl /tmp/num_plain/log.jsonl \
          | tee "$OUT/numerics_f32.txt"
      fi ;;
    profile) variant $v $AUTO 'logging.profile_steps=[20,22]' training.output_dir=/tmp/profile
             cp /tmp/profile/profile/kernels-*.txt /tmp/profile/profile/syncs-*.txt "$OUT/" ;;
    profile_gaps)  # two steps between logging steps: where the GPU idles (benchmarks/trace_gaps.py), trace kept
      variant $v $AUTO 'logging.profile_steps=[22,24]' training.output_dir=/tmp/$v
      python3 benchmarks/trace_gaps.py /tmp/$v/profile/trace-*.json --top 25 | tee "$OUT/gaps_gpt2_124m.txt"
      gzip -c /tmp/$v/profile/trace-*.json > "$OUT/trace_gpt2_124m.json.gz" ;;
    stock) timed stock python3 benchmarks/benchmark.py stock ${RECIPE:-recipes/gpt2_124m.yaml} $COMMON \
             --micro-batch ${STOCK_MB:-32,16,8} --max-steps $STEPS --out "$OUT/fp_stock.json" ;;
    e2e) variant $v $AUTO training.max_steps=200 training.logging_steps=20 training.eval_strategy=steps \
           training.eval_steps=100 training.save_strategy=steps training.save_steps=100 ;;
  esac
done
python3 - <<'PY' | tee -a "$N"
import glob, json, os
for f in sorted(glob.glob(os.environ["OUT"] + "/fp_*.json"), key=os.path.getmtime):
    r, name = json.load(open(f)), os.path.basename(f)[3:-5]
    est = (r.get("memory_estimate_gib") or {}).get("total", 0)
    e2e = (r.get("end_to_end") or {}).get("tokens_per_s")
    print(f"{name:9s} {str(r.get('loss_impl')):9s} mb {r.get('micro_batch')} {r.get('tokens_per_s', 0):>9,.0f} tok/s  "
          f"MFU {r.get('mfu', 0):.1%}  peak {r.get('mem_peak_gib') or 0:.1f} GiB est {est:.1f}  "
          f"loss {r.get('last_loss')}" + (f"  end-to-end {e2e:,.0f} tok/s" if e2e else ""))
PY
(cd "$OUT" && tar -czf fast_path_runs.tgz fp_*.json && rm fp_*.json)  # the device tool returns 8 files at most
