#!/usr/bin/env bash
# One GPU (issue 19): the Qwen3 1.8B recipe in bf16 and in fp8 (tensorwise, then rowwise) in the same call, same
# data and seed; STEPS steps (>= 300 for the loss comparison), windows of 10 (docs/benchmarks.md § FP8).
# PROFILE=1: each variant also records a profiler window (steps 20-22) and returns its kernel table; the profiled
# steps fall in a timed window, so a profiled call's tokens/s are not speed figures.
#   source .carry/setup.sh && STEPS=300 bash benchmarks/gpu_1gpu_fp8.sh
source benchmarks/gpu_common.sh
tokenize_corpus
for v in ${VARIANTS:-bf16 fp8 fp8_rowwise}; do
  rm -rf /tmp/fp8_$v
  base=${v%.[0-9]}  # a suffix .N repeats a variant (alternating A/B runs in one call)
  case $base in
    # fast accumulation (model.fp8_fast_accum): the forward's matmuls only (torchao's recipes), + the input
    # gradients', all (the default since the ninth session, named for runs before it)
    fp8_fwdacc) precision="fp8 model.fp8_fast_accum=forward" ;;
    fp8_fastacc_in) precision="fp8 model.fp8_fast_accum=input_grad" ;;
    fp8_fastacc) precision="fp8 model.fp8_fast_accum=all" ;;
    bf16_nofused|fp8_nofused) precision="${base%_nofused} kernels.fused_head=false" ;;  # the compiled head + loss
    bf16_f32|fp8_f32) precision="${base%_f32} model.residual_dtype=float32" ;;  # the fp32 residual stream
    bf16_recipe|fp8_recipe) precision="${base%_recipe} batch.micro_batch=recipe" ;;  # the recipe's split, not folded
    bf16_cdt|fp8_cdt) precision="${base%_cdt} model.inductor_options.coordinate_descent_tuning=true" ;;  # tuned blocks
    bf16_nd|fp8_nd) precision="${base%_nd} model.inductor_options.triton.prefer_nd_tiling=true" ;;  # 2-D tiled casts
    *) precision=$base ;;
  esac
  timed fp8_$v python3 benchmarks/benchmark.py ours ${RECIPE:-recipes/qwen3_1p8b_1gpu.yaml} data.path=$DATA \
    model.precision=$precision training.max_steps=${STEPS:-60} training.logging_steps=10 training.eval_strategy=no \
    training.save_strategy=no training.report_to=none training.disable_tqdm=true \
    training.resume_from_checkpoint=none training.output_dir=/tmp/fp8_$v ${PROFILE:+'logging.profile_steps=[20,22]'} \
    "$@" --out "$OUT/fp8_$v.json"
  [ -n "${PROFILE:-}" ] && for f in /tmp/fp8_$v/profile/kernels-*.txt; do cp "$f" "$OUT/kernels_fp8_${v}.txt"
    python3 benchmarks/trace_gaps.py /tmp/fp8_$v/profile/trace-*.json | tee "$OUT/gaps_fp8_${v}.txt"; done
done
for v in fp8 fp8_rowwise fp8_fwdacc fp8_fastacc_in fp8_fastacc; do
  [ -f /tmp/fp8_$v/log.jsonl ] && python3 benchmarks/compare_losses.py /tmp/fp8_$v/log.jsonl /tmp/fp8_bf16/log.jsonl \
    | tee "$OUT/loss_$v.txt"
done
python3 - <<'PY' | tee -a "$N"
import glob, json, os
from hfpretrain.models.hardware import detect_peak_flops
fp8_peak = detect_peak_flops("fp8") or float("nan")  # this GPU's dense fp8 peak (models/hardware.py)
for f in sorted(glob.glob(os.environ["OUT"] + "/fp8_*.json")):
    r = json.load(open(f))
    print(f"{os.path.basename(f)[4:-5]:12s} {r.get('tokens_per_s', 0):>8,.0f} tok/s  MFU(bf16 peak) {r.get('mfu', 0):.1%}  "
          f"MFU(fp8 peak) {r.get('tflops_per_gpu', 0) * 1e12 / fp8_peak:.1%}  peak {r.get('mem_peak_gib') or 0:.1f} GiB  "
          f"loss {r.get('last_loss')}  val loss {(r.get('final_eval') or {}).get('eval_loss')}")
PY
