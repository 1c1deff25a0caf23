#!/usr/bin/env bash
# One CUDA session on a lent GPU machine (docs/perf.md, "CUDA"): the correctness pass, the launch
# counts, the W2/W3 step against PyTorch and JAX on the same GPU, and the README's main job.
#
#   bash benchmarks/cuda_session.sh [OUTDIR]       # from the repository root; logs land in OUTDIR
#
# Taichi is not on the device image: carry its wheel (`pip download taichi==1.7.4 dill` for the
# machine's Python into .whl/) and this script installs it into /tmp/site. Each stage has its own
# time cap so one hang cannot eat the lease; the correctness stages run side by side (they time
# nothing), the benchmarks run alone.
set -u
OUT=${1:-${OUT:-/tmp/cuda_out}}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export TI_OFFLINE_CACHE_FILE_PATH=/tmp/ticache-cuda
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "wheel install failed"; exit 1; }
fi
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{
    nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    python3 -c "import sys, taichi, numpy, torch; print(sys.version.split()[0], 'taichi', taichi.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__)"
    lscpu | grep -E "Model name|^CPU\(s\)"
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

stamp "correctness + counts + main job (side by side)"
SCIML_ARCH=cuda timeout 200 python3 tests/cuda_check.py f32 > "$OUT/check_f32.log" 2>&1 &
SCIML_ARCH=cuda timeout 200 python3 tests/cuda_check.py f64 > "$OUT/check_f64.log" 2>&1 &
SCIML_ARCH=cuda timeout 200 python3 tests/launch_budget_check.py w2_bench w2_bench_fused solve_adam lbfgs_iter \
    > "$OUT/budget.log" 2>&1 &
wait
for f in check_f32 check_f64 budget; do stamp "$f: $(grep -E '^(OK|FAIL|COUNTS)' "$OUT/$f.log" | cut -c1-400 || true)"; tail -n 25 "$OUT/$f.log" | grep -iE "error|exception|Traceback" | head -5; done

stamp "W2/W3 step: sciml (eager, jit) vs PyTorch eager and JAX jit on the GPU"
timeout 200 python3 -m benchmarks.bench_w2_w3 --arch cuda --jit --no-cpu --rounds 2 --repeat 20 --warmup 3 \
    > "$OUT/w2w3.log" 2>&1; stamp "bench rc=$?"; tail -n 30 "$OUT/w2w3.log"

stamp "the README main job on CUDA"
timeout 150 python3 -m sciml.cli solve burgers --arch cuda --plot "$OUT/burgers_cuda.png" > "$OUT/burgers.log" 2>&1
stamp "main job rc=$?"; tail -n 8 "$OUT/burgers.log"
