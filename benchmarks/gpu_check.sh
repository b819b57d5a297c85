#!/usr/bin/env bash
# Everything a session with a GPU checks, in one command with a deadline (docs/gpu.md, "On a GPU").
#
#   OUT=results/ BUDGET=540 bash benchmarks/gpu_check.sh
#
# Runs from the repository root with `python` the interpreter that has distsdfg's dependencies
# (and CuPy, for the device-resident figures) and `mpiexec`/`mpicc` on PATH. In order, each step
# given what is left of BUDGET seconds:
#   1. the acceptance figures: 8192^3 matmul on one rank, CuPy then distsdfg (host in/out and
#      device-resident), with every step's time ($DISTSDFG_STEP_TIMES) -> cupy.json, distsdfg.json,
#      bench_stderr.txt;
#   2. concurrently: the Core cases on 1 and 2 ranks sharing the GPU (tests/test_gpu.py's GPU_RUNS,
#      one line of JSON per case) -> tier.txt; the loop and placement cases on 2 ranks
#      (tests/test_gpu_loops.py) -> loops.txt; CuPy arguments on 1 and 2 ranks
#      (distsdfg.testing.gpu_args: the device-argument variant, no host copy) -> gpu_args.txt.
# At most 7 files, so that a lent machine's result folder holds all of them. A case that fails
# prints its error in tier.txt and the others go on.
set -u
rm -rf /tmp/gpu_check
OUT=${OUT:?set OUT to the folder for the results}
mkdir -p "$OUT"
T0=$(date +%s)
DEADLINE=$((T0 + ${BUDGET:-540}))
left() { echo $((DEADLINE - $(date +%s))); }
rest() { local t=$(( $(left) - 5 )); echo $(( t > 1 ? t : 1 )); }   # never 0: `timeout 0` waits forever
export OMP_NUM_THREADS=1 PYTHONHASHSEED=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
log="$OUT/log.txt"
say() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a "$log"; }

say "start $(date -u)"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nvcc --version | tail -1
  python -c "import numpy, dace, mpi4py; print('numpy', numpy.__version__, 'dace', dace.__version__, 'mpi4py', mpi4py.__version__)"
  python -c "from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0])"
  python -c "from distsdfg.lowering.gpu import gpu_available; print('gpu_available', gpu_available())"
} >> "$log" 2>&1
if python -c "import cupy; assert float(cupy.ones(8).sum()) == 8" >> "$log" 2>&1; then ARGS=both; else ARGS=host; fi

# 1. the acceptance figures
timeout 90 python -m benchmarks.gpu_matmul cupy --n 8192 --out "$OUT/cupy.json" >> "$log" 2>&1
DISTSDFG_STEP_TIMES=1 timeout $(( $(rest) * 2 / 5 + 1 )) mpiexec -n 1 python -m mpi4py -m benchmarks.gpu_matmul distsdfg \
    --n 8192 --repeats 5 --args $ARGS --out "$OUT/distsdfg.json" >> "$log" 2> "$OUT/bench_stderr.txt"
say "figures done"

# 2. the tests, concurrently, until the deadline
R=$(rest)
pids=()
core() {  # tag nprocs case...
    local tag=$1 n=$2; shift 2
    mkdir -p "/tmp/gpu_check/$tag"
    ( cd "/tmp/gpu_check/$tag" && timeout $R mpiexec -n "$n" python -m mpi4py -m distsdfg.testing.mpirun --target gpu \
          out.json "$@" 2>&1 | sed -u "s/^/[$tag] /" >> "$OUT/tier.txt"
      echo "[$tag] exit ${PIPESTATUS[0]}" >> "$OUT/tier.txt" ) &
    pids+=($!)
}
CORE="add3d add_scalar reduce_sum reduce_max matmul softmax projection spmv add_odd"
core 2a 2 "matmul:gemm_map=1,1,2" "softmax:*=1,1,1,2" "matmul:gemm_map=2,1,1" "softmax:*=2,1,1,1" \
    "reduce_sum:reduce_output=1,2" "reduce_max:reduce_output=2,1"
core 2b 2 "add3d:_Add__map=2,1,1" "add3d:_Add__map=1,1,2" "add_scalar:_Add__map=2" "matmul:gemm_map=1,2,1" \
    "projection:einsum_map=1,1,1,2,1" "spmv:spmv=2" "add_odd:_Mult__map=1,1;_Add__map=2,1"
core 2c 2 $(for p in $CORE; do echo "$p:auto"; done)
core 1a 1 $(for p in $CORE; do echo "$p:auto"; done)
timeout $R python -m pytest -q -rA -p no:cacheprovider tests/test_gpu_loops.py -k on_the_gpu > "$OUT/loops.txt" 2>&1 &
pids+=($!)
( for n in 1 2; do
      mkdir -p "/tmp/gpu_check/args$n" && cd "/tmp/gpu_check/args$n" && echo "-- $n rank(s)"
      timeout $(rest) mpiexec -n $n python -m mpi4py -m distsdfg.testing.gpu_args args.json 2>&1 | grep -v Warning
  done > "$OUT/gpu_args.txt" ) &
pids+=($!)
wait "${pids[@]}"      # not a bare `wait`: it would also wait for any process substitution of the caller
say "tests done"
python - /tmp/gpu_check >> "$log" <<'EOF'
import glob, json, os, sys
ok, bad = 0, []
for tag in sorted(os.listdir(sys.argv[1])):
    path = os.path.join(sys.argv[1], tag, "out.json")
    if tag.startswith("args"):
        continue
    if not os.path.exists(path):
        bad.append(f"[{tag}] no out.json (the job failed or ran out of time: tier.txt)")
        continue
    for r in json.load(open(path)):
        tol = 0 if r.get("dtype", "").startswith("int") else 1e-5 if r.get("dtype") == "float32" else 1e-10
        if "error" in r or not r.get("shape_ok") or r.get("rel_err", 1) > tol:
            bad.append(f"[{tag}] {r['case']}: {r.get('error', r.get('rel_err'))}")
        else:
            ok += 1
print(f"Core cases on the GPU: {ok} passed, {len(bad)} failed", *bad, sep="\n")
EOF
tail -1 "$OUT/loops.txt" >> "$log"
grep -c '"variant": true' "$OUT/gpu_args.txt" | sed 's/^/gpu_args records with the variant: /' >> "$log"
