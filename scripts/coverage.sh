#!/usr/bin/env bash
# Line and branch coverage of tgl's C code (engine, backends, features, io,
# host) by the whole test suite: builds with gcov instrumentation
# (-DTGL_COVERAGE=ON) in its own build directory, runs ctest there, and
# writes a per-file table with gcovr (Debian package gcovr, installed here
# when missing).  Generated kernels (compiled at run time by cc/libtcc) are
# not instrumented; CUDA code counts only where the emulated GPU runs it.
#
# Usage: scripts/coverage.sh [BUILD_DIR] [ctest args...]
#   BUILD_DIR defaults to build-cov; extra arguments go to ctest
#   (e.g. -R 'lua.ops_spec' for one spec).
# Writes BUILD_DIR/coverage.md (the table, worst lines first),
# BUILD_DIR/coverage.json (gcovr's summary) and BUILD_DIR/coverage-html/.
# doc/coverage.md holds the summary of the last full run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
if ! command -v gcovr >/dev/null; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q \
    --no-install-recommends gcovr
fi
dir=${1:-build-cov}
shift || true
# -O1 warns where -O2 does not (maybe-uninitialized): warnings stay
# warnings here; the normal build keeps -Werror.
scripts/build.sh "$dir" -DTGL_TESTS=ON -DTGL_COVERAGE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTGL_WERROR=OFF
find "$dir" -name '*.gcda' -delete
export TGL_TEST_STRICT=1
# libgcov reports its own troubles (a counter file it cannot merge) on
# stderr, which specs that compare a child's stderr would take for tgl's.
export GCOV_ERROR_FILE="$PWD/$dir/gcov-errors.log"
rm -f "$GCOV_ERROR_FILE"
rc=0
ctest --test-dir "$dir" -j"$(nproc)" "$@" || rc=$?
# Counts are merged from every process the suite started (children
# included); a failed test still leaves its counts, and the exit status
# says it failed.
mkdir -p "$dir/coverage-html"
gcovr --root . --object-directory "$dir" --filter 'src/' --filter 'host/' \
      --gcov-ignore-parse-errors \
      --json-summary-pretty --json-summary "$dir/coverage.json" \
      --html-details "$dir/coverage-html/index.html"
python3 - "$dir/coverage.json" "$dir/coverage.md" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
rows = []
for f in d["files"]:
    rows.append((f["filename"], f["line_covered"], f["line_total"],
                 f["branch_covered"], f["branch_total"]))
def pct(c, t):
    return 100.0 * c / t if t else 100.0
rows.sort(key=lambda r: pct(r[1], r[2]))
out = ["| file | lines | lines % | branches % |", "|---|---:|---:|---:|"]
for name, lc, lt, bc, bt in rows:
    out.append("| %s | %d/%d | %.1f | %.1f |" % (name, lc, lt, pct(lc, lt), pct(bc, bt)))
lc = sum(r[1] for r in rows); lt = sum(r[2] for r in rows)
bc = sum(r[3] for r in rows); bt = sum(r[4] for r in rows)
under = [r for r in rows if pct(r[1], r[2]) < 80.0]
out.append("")
out.append("Total: lines %d/%d (%.1f%%), branches %d/%d (%.1f%%); %d of %d files under 80%% lines."
           % (lc, lt, pct(lc, lt), bc, bt, pct(bc, bt), len(under), len(rows)))
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print(out[-1])
EOF
[ ! -s "$GCOV_ERROR_FILE" ] || echo "coverage: libgcov reported problems, see $GCOV_ERROR_FILE"
echo "coverage: table in $dir/coverage.md, per-line report in $dir/coverage-html/index.html"
exit $rc
