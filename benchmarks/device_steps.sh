# Sourced by the gpu_session*.sh device calls: OUT (what comes back), LOG (each step's log), and
#   t NAME SECONDS COMMAND...   one step under a time limit (SIGABRT: Python's faulthandler prints the stack),
#                               its output in $LOG/NAME.log with its exit status, every log tarred into $OUT/logs.tgz
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
LOG=${LOG:-$(mktemp -d)}; mkdir -p "$LOG"
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TILEX_CACHE_DIR=${TILEX_CACHE_DIR:-$PWD/.tilex-cache}
t() { local name=$1 secs=$2; shift 2; echo "== $name"; OUT="$LOG" timeout -s ABRT "$secs" "$@" > "$LOG/$name.log" 2>&1
      echo "rc=$?" >> "$LOG/$name.log"; tar czf "$OUT/logs.tgz" -C "$LOG" .; }
