#!/usr/bin/env bash
# The GPU checks, as one script for a lent GPU machine (README "GPU check"). Writes gpu_check.log and JSON under $OUT
# (default benchmarks/results/gpu). Runs from the repository root with PYTHONPATH=. (no install needed beyond torch,
# diffusers, transformers, peft, accelerate, scikit-learn, matplotlib, seaborn, scipy, tqdm, pytest, hypothesis).
#   1. the CUDA-only tests (pytest -m gpu): the SD3.5-Medium-sized smoke and a bf16 NFT step on the tiny SD3 pipeline;
#   2. benchmarks/gpu_smoke.py at SD3.5-Medium size, 512 px, bf16: batch 8, then batch 24 with gradient checkpointing;
#   3. the trainer end to end on CUDA in bf16 over the tiny random SD3 pipeline, both backends (nft, grpo);
#   4. benchmarks/bench_trainer.py on the digit world's `gpu` preset: ReCAST vs uniform, interleaved in one process,
#      as the preset stands and with D re-estimated every 4th iteration from the x̂_0 of 32 samples;
#   5. benchmarks/profile_informativeness.py on the `gpu` preset: the informativeness phase's parts, under each
#      combination of those two settings;
#   6. benchmarks/resume_check.py on the `gpu` preset: is a run reproducible on the GPU, and is a resumed one exact?
#   7. benchmarks/bench_iteration.py at SD3.5-Medium size: the whole iteration today, then with each speed-up switch;
#   8. one papermill run of notebook 07 on CUDA over the tiny SD3 pipeline (configs/sd3_tiny.yaml).
# SECTIONS="tests smoke sd3tiny trainer info resume iteration nb07" (the default) picks which of them run.
set -o pipefail
OUT=${OUT:-benchmarks/results/gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
fail=0
SECTIONS=${SECTIONS:-tests smoke sd3tiny trainer info resume iteration nb07}
on() { [[ " $SECTIONS " == *" $1 "* ]]; }
LOG=$OUT/gpu_check.log
: >"$LOG"
# step NAME CMD...: runs CMD, its output to the terminal and appended to $LOG; a failure is noted, the rest still runs
step() {
    local name=$1; shift; echo "== $name ($(date -u +%H:%M:%S))" | tee -a "$LOG"
    "$@" 2>&1 | grep --line-buffered -v "truncated because" | tee -a "$LOG"
    local rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || { echo "!! $name failed (exit $rc)" | tee -a "$LOG"; fail=1; }
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee -a "$LOG"
python3 -c "import torch, diffusers, peft, transformers, accelerate; print('torch', torch.__version__, '| diffusers',
diffusers.__version__, '| peft', peft.__version__, '| transformers', transformers.__version__, '| accelerate',
accelerate.__version__)" | tee -a "$LOG"
if on tests; then
    step "pytest -m gpu" timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu \
        tests/test_gpu_smoke.py tests/test_sd3_world.py
fi
if on smoke; then
    step "gpu_smoke b8" timeout 120 python3 benchmarks/gpu_smoke.py --batch 8 --steps 10 --out "$OUT/smoke_b8.json"
    step "gpu_smoke b24 ckpt" timeout 120 python3 benchmarks/gpu_smoke.py --batch 24 --steps 5 --grad-ckpt \
        --out "$OUT/smoke_b24_ckpt.json"
fi
if on sd3tiny; then
    for backend in nft grpo; do
        step "sd3-tiny $backend cuda bf16" timeout 60 python3 -m recast train --preset ci --world sd3-tiny \
            --rewards jpeg,rank:jpeg --lam 2,1 --backend $backend --iterations 3 --device cuda \
            --set mixed_precision=bf16 --out "/tmp/sd3tiny_$backend" --overwrite
    done
fi
# the trainer ratio (ReCAST vs uniform) and the informativeness phase's parts, as configured and with cheaper settings
VARIANTS=("" "recast_every=4" "informativeness_subset=32" "recast_every=4 informativeness_subset=32")
sets() { local a=(); for kv in $1; do a+=(--set "$kv"); done; echo "${a[@]}"; }
if on trainer; then
    for v in "${VARIANTS[0]}" "${VARIANTS[3]}"; do
        # shellcheck disable=SC2046
        step "bench_trainer gpu [$v]" timeout 150 python3 benchmarks/bench_trainer.py --preset gpu --iterations 20 \
            $(sets "$v") --out "$OUT/trainer_gpu${v:+_cheap}.json"
    done
fi
if on info; then
    for v in "${VARIANTS[@]}"; do
        # shellcheck disable=SC2046
        step "informativeness parts [$v]" timeout 90 python3 benchmarks/profile_informativeness.py --preset gpu \
            --iterations 14 $(sets "$v")
    done
fi
if on resume; then
    step "resume check gpu" timeout 240 python3 benchmarks/resume_check.py --preset gpu --iterations 6 \
        --out "$OUT/resume_gpu.json"
fi
if on iteration; then
    for sw in "" "--set sdpa=flash" "--set merge=1" "--set compile=1" "--set checkpointing=1 --micro 24" \
              "--set sdpa=flash --set merge=1 --set compile=1"; do
        tag=$(echo "$sw" | tr -cs 'a-z0-9' '_'); tag=${tag:-base}
        # shellcheck disable=SC2086
        step "whole iteration [$sw]" timeout 300 python3 benchmarks/bench_iteration.py $sw --out "$OUT/iteration_$tag.json"
    done
fi
if on nb07; then
    step "notebook 07 on cuda" timeout 240 python3 -m papermill notebooks/07_sd35_train.ipynb "$OUT/07_cuda.ipynb" \
        -p device cuda -p iterations 2 -p out_dir "$OUT/07_cuda_run" -y "overrides: {mixed_precision: bf16}"
fi
exit $fail
