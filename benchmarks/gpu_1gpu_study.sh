#!/usr/bin/env bash
# One GPU: the pilot scaling study (src/hfpretrain/study/specs/gpu_pilot.yaml, 9 runs) in one
# time-boxed device call. At the time box the study gets SIGTERM (the run in progress saves a
# checkpoint, the study stops); the report then covers the finished runs, and the same command on
# the same (warm) machine continues the study. $OUT/study.tgz holds report.md, results.csv/json,
# fits.json, loss_vs_flops.png and each run's log.jsonl and summary.json; $OUT/study.log the console.
#   source .carry/setup.sh && bash benchmarks/gpu_1gpu_study.sh
source benchmarks/gpu_common.sh
tokenize_corpus
SPEC=${SPEC:-src/hfpretrain/study/specs/gpu_pilot.yaml}; STUDY=${STUDY:-/tmp/study}
# extra overrides for every run: those the study started with (a continued study keeps them), else
# $EXTRA, else the fastest loss of gpu_1gpu_small_loss.sh if it ran before in this call
mkdir -p $STUDY; [ -f $STUDY/extra_overrides ] || echo "${EXTRA:-$(cat "$OUT/best_loss" 2>/dev/null)}" > $STUDY/extra_overrides
EXTRA=$(cat $STUDY/extra_overrides); echo "study extra overrides: $EXTRA" | tee -a "$N"
# SIGTERM early enough for the run in progress to reach its next step (a new shape compiles first: ~30 s)
timeout -s TERM -k 60 $(( $(left) - 80 )) python3 scripts/study.py $SPEC --out $STUDY data.path=$DATA $EXTRA \
  >> "$OUT/study.log" 2>&1
echo "== study rc $? ($(date +%T), ${SECONDS}s)" | tee -a "$N"
grep -E "training \(|stopped|Error|error" "$OUT/study.log" | cut -c1-220 | tee -a "$N"
python3 scripts/study.py $SPEC --out $STUDY --report-only data.path=$DATA $EXTRA 2>&1 | tail -1 | tee -a "$N"
# one archive: the device tool brings back at most 8 files, none with '+' in its name
(cd $STUDY && tar czf "$OUT/study.tgz" report.md results.csv results.json fits.json loss_vs_flops.png \
  extra_overrides runs/*/*/log.jsonl runs/*/*/summary.json)
python3 - "$STUDY" <<'PY' | tee -a "$N"
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("runs/*/*/summary.json")):
    s = json.loads(path.read_text())
    logs = [json.loads(l) for l in (path.parent / "log.jsonl").read_text().splitlines()]
    mfu = sorted(e["mfu"] for e in logs if e["event"] == "log" and "mfu" in e)
    print(f"{path.parent.name:24s} steps {s['global_step']:5d}  val {s['final_eval'].get('eval_loss', float('nan')):.4f}"
          f"  median MFU {mfu[len(mfu) // 2] if mfu else float('nan'):.3f}  train {s['train'].get('train_runtime', 0):.0f}s"
          f"  end-to-end {s['end_to_end'].get('wall_s', 0):.0f}s  peak {max((e.get('mem_peak_gib', 0) for e in logs), default=0):.1f} GiB")
PY
