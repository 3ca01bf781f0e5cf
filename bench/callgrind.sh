#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# callgrind.sh - `make bench`: instructions per event of the warm trace replays (bench/replay -W) under valgrind's callgrind, per allocator.
#
# Usage: callgrind.sh BUILDDIR [TRACE...]   (default: the bench/torch-*.trace.gz
# beside this script)
# A figure of instructions does not move with the machine's load as the
# ns/event of bench/replay -W do.  Each allocator runs in a process of its
# own (-a), one warm-up pass then one counted pass: --toggle-collect counts
# the instructions of warm_timed_run() (bench/replay-warm.c) and what it
# calls, nothing else.  Without valgrind it says so and measures nothing.
# A target line per trace (run.sh gathers them): devcache's instructions
# per event at most $target; SKIP where valgrind is missing.
# Exit status 0, or 2 when a replay failed.
set -u
top=${1:?usage: callgrind.sh BUILDDIR [TRACE...]}
shift
test $# -gt 0 || set -- "`dirname "$0"`"/torch-*.trace.gz
target=150

# target_line TRACE STATUS FIGURES: the trace's target line.
target_line() {
	id=callgrind/`basename "$1" | sed 's/\.gz$//; s/\.trace$//'`/instructions
	printf 'TARGET %-44s %s  %s (target: at most %d instructions per event)\n' "$id" "$2" "$3" $target
}

echo "== Instructions per event under callgrind (bench/replay -W, one counted pass after one warm-up pass)"
if ! command -v valgrind >/dev/null 2>&1; then
	echo "not measured: valgrind is not installed (Debian: apt-get install valgrind)"
	for trace; do
		target_line "$trace" SKIP "valgrind is not installed"
	done
	exit 0
fi
echo "`valgrind --version`; each allocator in a process of its own"
tmp=`mktemp -d "${TMPDIR:-/tmp}/devcache-callgrind.XXXXXX"` || exit 2
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/targets"
allocators="devcache glibc jemalloc mimalloc tcmalloc"
printf '%-28s' "trace"
for a in $allocators; do printf ' %9s' $a; done
echo
status=0
for trace; do
	printf '%-28s' "`basename "$trace"`"
	for a in $allocators; do
		# The static TLS that jemalloc and tcmalloc need is reserved here:
		# bench/replay would otherwise run itself again (bench/mallocs.c),
		# which valgrind would not follow.
		GLIBC_TUNABLES=${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.rtld.optional_static_tls=16384 \
		DEVCACHE_BENCH_REEXEC=1 \
		"$top/libtool" --mode=execute valgrind --tool=callgrind \
			--toggle-collect=warm_timed_run --callgrind-out-file="$tmp/cg" \
			"$top/bench/replay" -W -M -r 1 -s 0 -a $a "$trace" > "$tmp/out" 2> "$tmp/err"
		rc=$?
		events=`sed -n 's/.*(\([0-9]*\) events a pass)$/\1/p' "$tmp/out"`
		ir=`sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$tmp/cg" 2>/dev/null`
		# Status 1: a target of bench/replay's own was missed, which
		# one counted pass does not measure.
		if grep -q 'not measured' "$tmp/out"; then
			printf ' %9s' -
		elif test $rc -gt 1 || test -z "$events" || test -z "$ir"; then
			printf ' %9s' FAILED
			sed "s|^|  $a: |" "$tmp/err" "$tmp/out" >&2
			status=2
			test $a = devcache && target_line "$trace" SKIP "the replay failed" >> "$tmp/targets"
		else
			per=`awk -v ir="$ir" -v ev="$events" 'BEGIN { printf "%.0f", ir / ev }'`
			printf ' %9s' $per
			test $a = devcache && { test $per -le $target && st=PASS || st=MISS
				target_line "$trace" $st "devcache $per instructions per event" >> "$tmp/targets"; }
		fi
		rm -f "$tmp/cg"
	done
	echo
done
echo "(instructions per event: allocations and frees; -: that malloc was not found)"
cat "$tmp/targets"
exit $status
