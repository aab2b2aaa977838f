#!/usr/bin/env bash
# A/B of prepared branches in ONE device call: run the same command in this tree and in copies of it
# with each branch's diff applied, one after another on the same GPU (saves a machine start per branch
# and keeps the runs minutes apart, not calls apart).
#
# Here (with git), write the patches into .ab-patches/ (git-ignored: name it in the device call's carry,
# with .whl):
#   bash benchmarks/ab_branches.sh prepare prefill-ffma stream-one-body softmax-exp2
# On the device (no .git there), after installing lark as gpu_todo.sh's callers do:
#   bash benchmarks/ab_branches.sh run "python3 benchmarks/bench_attention.py --quick --no-sweep --only prefill"
# Each variant's output goes to ${OUT:-out}/ab_<name>.log, with its last lines printed under a header.
# AB_ONLY="name1 name2" runs only those patches (the base always runs).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
DIR=.ab-patches
case "${1:-}" in
  prepare)
    shift
    rm -rf "$DIR"; mkdir -p "$DIR"
    for b in "$@"; do
      git diff "$(git merge-base HEAD "$b")" "$b" -- . ':!benchmarks/gpu_todo.sh' > "$DIR/$b.patch" || exit 1
      echo "$DIR/$b.patch: $(grep -c '^diff --git' "$DIR/$b.patch") files"
    done ;;
  run)
    cmd=${2:?usage: $0 run COMMAND}
    OUT=${OUT:-out}; mkdir -p "$OUT"
    root=$PWD
    variant() {  # name, directory
      (cd "$2" && python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null 2>&1 \
         && TILEX_CACHE_DIR=$2/.tilex-cache timeout "${AB_TIMEOUT:-150}" bash -c "$cmd") > "$OUT/ab_$1.log" 2>&1
      echo "== $1 (rc=$?)"; tail -"${AB_TAIL:-6}" "$OUT/ab_$1.log"
    }
    variant base "$root"
    for p in "$DIR"/*.patch; do
      [ -e "$p" ] || continue
      name=$(basename "$p" .patch); copy=/tmp/ab_$name
      if [ -n "${AB_ONLY:-}" ] && ! [[ " $AB_ONLY " == *" $name "* ]]; then continue; fi
      rm -rf "$copy"; cp -r "$root" "$copy"; rm -rf "$copy/.tilex-cache"
      if (cd "$copy" && patch -p1 -s < "$root/$p"); then variant "$name" "$copy"; else echo "== $name: patch failed"; fi
    done
    (cd "$root" && python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null 2>&1) ;;
  *) echo "usage: $0 prepare BRANCH... | run COMMAND"; exit 2 ;;
esac
