#!/usr/bin/env bash
# Decode speed of tensor parallelism on this machine: 1 rank x 2 threads,
# 2 ranks x 1 thread (--tp 2) and 1 rank x 1 thread, alternated ROUNDS times
# (a noisy machine: compare the medians).  docs/parallel.md.  The ranks
# yield while they wait (mpi_yield_when_idle 1) unless TK_MPI_YIELD=0.
#   tools/bench_tp.sh MODEL [TOKENS] [ROUNDS]      (needs build-mpi, -DTK_MPI=ON)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: tools/bench_tp.sh MODEL [TOKENS] [ROUNDS]}
n=${2:-32}
rounds=${3:-5}
bin=build-mpi/tokamak
mpi=(--mca mpi_yield_when_idle "${TK_MPI_YIELD:-1}") # TK_MPI_YIELD=0: Open MPI's polling wait
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
tg() { awk '/^tg/{print $3}'; }
for i in $(seq "$rounds"); do
  a=$($bin bench -m "$model" -p 0 -n "$n" -r 5 -t 2 --no-bandwidth 2>&1 | tg)
  b=$(mpirun "${mpi[@]}" -np 2 $bin bench -m "$model" -p 0 -n "$n" -r 5 -t 1 --no-bandwidth --tp 2 2>&1 | tg)
  c=$($bin bench -m "$model" -p 0 -n "$n" -r 5 -t 1 --no-bandwidth 2>&1 | tg)
  echo "round $i: 1 rank x 2 threads $a  2 ranks x 1 thread $b  1 rank x 1 thread $c  (load $(cut -d' ' -f1 /proc/loadavg))"
done
