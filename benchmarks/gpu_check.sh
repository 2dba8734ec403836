#!/usr/bin/env bash
# The GPU check, one command for a lent GPU box (benchmarks/README.md "GPU check"). Run from the repository root:
#   bash benchmarks/gpu_check.sh           the throughput window: at most 8 minutes on an H100/H200, 3 files
#   bash benchmarks/gpu_check.sh --long    then the long correctness sections (25-35 minutes), packed in one archive
#   bash benchmarks/gpu_check.sh --tiny    the CPU twin: the same window on tiny models (tests/test_benchmarks.py)
# Nothing is fetched: what the box lacks (diffusers, on a stock CUDA image with torch, transformers, accelerate and
# peft) is installed from the wheels in benchmarks/wheels/, downloaded beforehand with the README's `pip download`.
# Writes under $OUT (default benchmarks/results/gpu; --tiny: benchmarks/results): gpu_check.log (gpu_check_tiny.log),
# throughput_<card>.json with the card, the versions and every setting, throughput_<card>.md, and with --long
# long_sections.tar.gz.
# The throughput window (benchmarks/throughput.py, one process): today's sd35 shape and the release's recipe as
# baselines first, each switch alone, the best combination, regional compile last; a variant that would end after
# BUDGET_S (default 400 s; the process is stopped 30 s after it) is skipped and recorded as such.
# The long sections (SECTIONS="tests smoke sd3tiny trainer info resume nb07" by default):
#   tests: pytest -m gpu; smoke: gpu_smoke.py at SD3.5-Medium size (batch 8; batch 24 with recompute); sd3tiny: the
#   trainer on the tiny SD3 pipeline in bf16, both backends; trainer/info: bench_trainer.py and
#   profile_informativeness.py on the digit world's gpu preset; resume: resume_check.py; nb07: notebook 07 on cuda
#   (needs papermill, which a stock image lacks: carry its wheels too or leave it out of SECTIONS).
set -o pipefail
TINY=0 LONG=0
for arg in "$@"; do
    case $arg in
        --tiny) TINY=1 ;;
        --long) LONG=1 ;;
        *) echo "gpu_check: unknown option $arg (use --tiny or --long)" >&2; exit 2 ;;
    esac
done
PY=${PYTHON:-python3}
if [ "$TINY" = 1 ]; then OUT=${OUT:-benchmarks/results}; LOG_NAME=gpu_check_tiny.log; else
    OUT=${OUT:-benchmarks/results/gpu}; LOG_NAME=gpu_check.log; fi
mkdir -p "$OUT"
LOG=$OUT/$LOG_NAME
: >"$LOG"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
fail=0
START=$(date +%s)
# step NAME CMD...: runs CMD, its output to the terminal and appended to $LOG; a failure is noted, the rest still runs
step() {
    local name=$1; shift; echo "== $name (+$(($(date +%s) - START)) s)" | tee -a "$LOG"
    "$@" 2>&1 | grep --line-buffered -v "truncated because" | tee -a "$LOG"
    local rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || { echo "!! $name failed (exit $rc)" | tee -a "$LOG"; fail=1; }
}

# 1. what the box lacks, from the carried wheels (one version of each; --no-deps: the image has their needs)
if ! $PY -c "import diffusers" 2>/dev/null; then
    if compgen -G "benchmarks/wheels/*.whl" >/dev/null; then
        SITE=${TMPDIR:-/tmp}/gpu_check_site
        step "install $(cd benchmarks/wheels && echo *.whl)" $PY -m pip install -q --no-index --no-deps --no-compile \
            --no-cache-dir --upgrade --target "$SITE" benchmarks/wheels/*.whl
        export PYTHONPATH=$SITE:$PYTHONPATH
    else
        echo "gpu_check: diffusers is not installed and benchmarks/wheels/ holds no wheel; download it first" \
             "(benchmarks/README.md, GPU check)" | tee -a "$LOG" >&2
        exit 2
    fi
fi
if ! $PY -c "import torch, diffusers, transformers, peft, accelerate, recast.credit, recast.trainer.speed" \
        >>"$LOG" 2>&1; then
    echo "gpu_check: an import failed (see $LOG); the window needs torch, diffusers, transformers, peft, accelerate" \
        | tee -a "$LOG" >&2
    exit 2
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee -a "$LOG"

# 2. the throughput window
if [ "$TINY" = 1 ]; then
    step "throughput window (tiny, cpu)" $PY benchmarks/throughput.py --tiny --device cpu --out "$OUT" \
        --budget-s "${BUDGET_S:-600}"
else
    step "throughput window" timeout "$(( ${BUDGET_S:-400} + 30 ))" $PY benchmarks/throughput.py --out "$OUT" \
        --budget-s "${BUDGET_S:-400}"
fi
echo "== window done (+$(($(date +%s) - START)) s)" | tee -a "$LOG"
[ "$LONG" = 1 ] || exit $fail

# 3. the long correctness sections, their files packed into one archive
L=$(mktemp -d)
SECTIONS=${SECTIONS:-tests smoke sd3tiny trainer info resume nb07}
on() { [[ " $SECTIONS " == *" $1 "* ]]; }
sets() { local a=(); for kv in $1; do a+=(--set "$kv"); done; echo "${a[@]}"; }
if on tests; then
    step "pytest -m gpu" timeout 180 $PY -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu_smoke.py \
        tests/test_sd3_world.py tests/test_speed_switches.py
fi
if on smoke; then
    step "gpu_smoke b8" timeout 120 $PY benchmarks/gpu_smoke.py --batch 8 --steps 10 --out "$L/smoke_b8.json"
    step "gpu_smoke b24 ckpt" timeout 120 $PY benchmarks/gpu_smoke.py --batch 24 --steps 5 --grad-ckpt \
        --out "$L/smoke_b24_ckpt.json"
fi
if on sd3tiny; then
    for backend in nft grpo; do
        step "sd3-tiny $backend cuda bf16" timeout 60 $PY -m recast train --preset ci --world sd3-tiny \
            --rewards jpeg,rank:jpeg --lam 2,1 --backend $backend --iterations 3 --device cuda \
            --set mixed_precision=bf16 --out "$L/sd3tiny_$backend" --overwrite
    done
fi
if on trainer; then
    for v in "" "recast_every=4 informativeness_subset=32"; do
        # shellcheck disable=SC2046
        step "bench_trainer gpu [$v]" timeout 150 $PY benchmarks/bench_trainer.py --preset gpu --iterations 20 \
            $(sets "$v") --out "$L/trainer_gpu${v:+_cheap}.json"
    done
fi
if on info; then
    for v in "" "recast_every=4" "informativeness_subset=32" "recast_every=4 informativeness_subset=32"; do
        # shellcheck disable=SC2046
        step "informativeness parts [$v]" timeout 90 $PY benchmarks/profile_informativeness.py --preset gpu \
            --iterations 14 $(sets "$v")
    done
fi
if on resume; then
    step "resume check gpu" timeout 240 $PY benchmarks/resume_check.py --preset gpu --iterations 6 \
        --out "$L/resume_gpu.json"
fi
if on nb07; then
    step "notebook 07 on cuda" timeout 240 $PY -m papermill notebooks/07_sd35_train.ipynb "$L/07_cuda.ipynb" \
        -p device cuda -p iterations 2 -p out_dir "$L/07_cuda_run" -y "overrides: {mixed_precision: bf16}"
fi
tar czf "$OUT/long_sections.tar.gz" -C "$L" . && rm -rf "$L"
echo "== long sections done (+$(($(date +%s) - START)) s)" | tee -a "$LOG"
exit $fail
