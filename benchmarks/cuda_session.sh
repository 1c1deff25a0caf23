#!/usr/bin/env bash
# One CUDA session on a lent GPU machine (docs/perf.md, "CUDA"): the correctness pass, the launch
# counts, the W2/W3 step against PyTorch and JAX on the same GPU, the README's main job, and
# (optionally) DeepXDE rows at their own iterations, both libraries on the GPU.
#
#   bash benchmarks/cuda_session.sh [OUTDIR]                                  # checks, repeat, bench, main
#   STAGES="checks main" DEEPXDE_ROWS=kovasznay_flow bash benchmarks/cuda_session.sh OUTDIR
#   STAGES="repeat" ...     # ops, a step, a solve twice (tests/repeat_check.py): are GPU runs bitwise repeatable?
#
# Taichi is not on the device image: carry its wheel (`pip download taichi==1.7.4 dill` for the
# machine's Python into .whl/; for DEEPXDE_ROWS also deepxde==1.15.0 scikit-optimize pyaml) and this
# script installs them into /tmp/site. Each stage has its own time cap so one hang cannot eat the
# lease; the correctness stages run side by side (they time nothing); the W2/W3 bench runs alone.
# DeepXDE rows: DeepXDE (PyTorch on the GPU, its backend's default) and the sciml port (arch=cuda)
# from the same initial weights, run at the same time, KOV_CAP seconds each (default 470).
set -u
OUT=${1:-${OUT:-/tmp/cuda_out}}
STAGES=${STAGES-checks repeat bench main}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export TI_OFFLINE_CACHE_FILE_PATH=/tmp/ticache-cuda
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "wheel install failed"; exit 1; }
fi
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
has() { case " $STAGES " in *" $1 "*) return 0;; esac; return 1; }
{
    nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    python3 -c "import sys, taichi, numpy, torch; print(sys.version.split()[0], 'taichi', taichi.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__)"
    lscpu | grep -E "Model name|^CPU\(s\)"
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

pids=()
for row in ${DEEPXDE_ROWS:-}; do   # both libraries of a row at once, DeepXDE's weights first
    cap=${KOV_CAP:-470}
    stamp "DeepXDE row $row (own iterations, both on the GPU, ${cap} s cap each)"
    (DDE_BACKEND=pytorch OMP_NUM_THREADS=1 timeout $cap python3 -m benchmarks._same_init dump "$OUT/${row}_init.npz" \
        "examples/deepxde/dde/$row.py" > "$OUT/${row}_deepxde.log" 2>&1; echo "rc=$?" >> "$OUT/${row}_deepxde.log") &
    pids+=($!)
    for _ in $(seq 120); do [ -s "$OUT/${row}_init.npz" ] && break; sleep 1; done
    (SCIML_ARCH=cuda OMP_NUM_THREADS=1 timeout $cap python3 -m benchmarks._same_init load "$OUT/${row}_init.npz" \
        "examples/deepxde/$row.py" > "$OUT/${row}_sciml.log" 2>&1; echo "rc=$?" >> "$OUT/${row}_sciml.log") &
    pids+=($!)
done

if has checks; then
    stamp "correctness + counts (side by side)"
    SCIML_ARCH=cuda timeout 200 python3 tests/cuda_check.py f32 > "$OUT/check_f32.log" 2>&1 &
    a=$!
    SCIML_ARCH=cuda timeout 200 python3 tests/cuda_check.py f64 > "$OUT/check_f64.log" 2>&1 &
    b=$!
    SCIML_ARCH=cuda timeout 200 python3 tests/launch_budget_check.py w2_bench w2_bench_fused solve_adam lbfgs_iter \
        > "$OUT/budget.log" 2>&1 &
    c=$!
    wait $a $b $c
    # the NN kernel checks (tests/models/vulkan_nn*_check.py) with their arch lines set to CUDA (the fused one, run
    # from a copy in /tmp on 2026-11-28, could not import its neighbours and printed nothing behind a pipe)
    for nn in vulkan_nn_check vulkan_nn_fused_check; do
        sed 's/sm.init(arch="vulkan", dtype="float32", seed=0) == "vulkan"/sm.init(arch="cuda", dtype="float32", seed=0) == "cuda"/' \
            "tests/models/$nn.py" > "tests/models/_cuda_$nn.py"   # beside it: it imports its neighbours
        timeout 150 python3 "tests/models/_cuda_$nn.py" > "$OUT/$nn.log" 2>&1; echo "rc=$?" >> "$OUT/$nn.log"
        rm -f "tests/models/_cuda_$nn.py"
        stamp "$nn on CUDA: $(grep -E '^(OK|rc=)' "$OUT/$nn.log" | tr '\n' ' ')"; grep -iE "error|fail" "$OUT/$nn.log" | head -5
    done
    for f in check_f32 check_f64 budget; do stamp "$f: $(grep -E '^(OK|FAIL|COUNTS)' "$OUT/$f.log" | cut -c1-400 || true)"; tail -n 25 "$OUT/$f.log" | grep -iE "error|exception|Traceback" | head -5; done
fi

if has bench; then
    stamp "W2/W3 step: sciml (eager, jit) vs PyTorch eager and JAX jit on the GPU"
    timeout 200 python3 -m benchmarks.bench_w2_w3 --arch cuda --jit --no-cpu --rounds 2 --repeat 20 --warmup 3 \
        > "$OUT/w2w3.log" 2>&1; stamp "bench rc=$?"; tail -n 30 "$OUT/w2w3.log"
fi

if has main; then
    stamp "the README main job on CUDA"
    timeout 150 python3 -m sciml.cli solve burgers --arch cuda --plot "$OUT/burgers_cuda.png" > "$OUT/burgers.log" 2>&1
    stamp "main job rc=$?"; tail -n 3 "$OUT/burgers.log"
fi

if has repeat; then   # are two runs of the same command bitwise alike on the GPU? (on the CPU they are)
    stamp "repeatability: ops, a W2 step and a short solve, each twice in one process (tests/repeat_check.py)"
    for i in 1 2; do   # the first with a cold Taichi cache, the second loads the kernels the first compiled
        TI_OFFLINE_CACHE_FILE_PATH=/tmp/ticache-rep SCIML_ARCH=cuda timeout 150 python3 tests/repeat_check.py \
            --dump "$OUT/repeat_$i.npz" > "$OUT/repeat_check_$i.log" 2>&1
        stamp "repeat_check $i rc=$?"; tail -n 1 "$OUT/repeat_check_$i.log" | cut -c1-1500
    done
    stamp "across the two processes: $(python3 tests/repeat_check.py --compare "$OUT/repeat_1.npz" "$OUT/repeat_2.npz" 2>&1 | tail -n 1)"
    stamp "the same short solve in two processes (the first compiles, the second loads Taichi's cache)"
    for k in 1 2; do   # (before the ordered reductions: six such runs, six different errors)
        TI_OFFLINE_CACHE_FILE_PATH=/tmp/ticache-solve timeout 100 \
            python3 -m sciml.cli solve burgers --arch cuda --steps 300,50 --quiet > "$OUT/solve_$k.log" 2>&1
        stamp "solve run $k: $(tail -n 1 "$OUT/solve_$k.log" | cut -c1-120)"
    done
fi

for p in "${pids[@]}"; do wait "$p"; done
for row in ${DEEPXDE_ROWS:-}; do
    stamp "$row: DeepXDE $(grep -E '^RESULT|^rc=' "$OUT/${row}_deepxde.log" | tr '\n' ' ')"
    stamp "$row: sciml $(grep -E 'relative L2 error|^rc=' "$OUT/${row}_sciml.log" | tail -n 2 | tr '\n' ' ')"
done
