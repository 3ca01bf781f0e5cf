#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# run.sh - `make bench`: generates the traces, runs the benchmarks, and prints the report and its targets.
#
# Usage: run.sh BUILDDIR   (the programs are BUILDDIR/bench/{gentrace,hotpath,replay,loadbench,soak};
# callgrind.sh, beside this script, counts instructions with valgrind;
# loadbench generates its model files in BUILDDIR/bench; it and replay find
# their backend module in BUILDDIR/bench/modules/.libs; soak.sh, beside this
# script, runs bench/soak on the host and the fakes)
# The environment gives CC and CFLAGS (for the header), BENCH_FLAGS (passed
# to hotpath, e.g. "-r 9 -s 2"), and SOAK_SECONDS and SOAK_FLAGS (soak.sh).
# Exit status: 0 when everything ran, even if a target was missed
# (BENCH_STRICT=yes makes a miss fail); 2 when a program failed.
set -u
b=${1:?usage: run.sh BUILDDIR}/bench
report=$b/report.txt
log=$b/report.tmp
start=`date +%s`

header() {
	cpu=`sed -n 's/^model name[	 ]*: *//p' /proc/cpuinfo 2>/dev/null | sed 1q`
	echo "==== libdevcache benchmarks"
	echo "date:       `date -u '+%Y-%m-%d %H:%M UTC'`"
	os=`. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"`
	echo "machine:    ${cpu:-unknown CPU}, `nproc` CPUs online, `uname -sr`${os:+, $os}"
	echo "memory:     `sed -n 's/^MemTotal: *//p' /proc/meminfo`"
	echo "load:       `cut -d' ' -f1-3 /proc/loadavg` (1, 5, 15 min; above the CPU count, figures are noisy)"
	echo "compiler:   `${CC:-cc} --version 2>/dev/null | sed 1q`"
	echo "CFLAGS:     ${CFLAGS:-}"
	# jemalloc (MALLOC_CONF), mimalloc (MIMALLOC_*), tcmalloc (TCMALLOC_*,
	# HEAPCHECK, HEAPPROFILE), glibc (MALLOC_*, GLIBC_TUNABLES) and
	# libdevcache read these.
	env | grep -E '^(MALLOC_|MIMALLOC_|TCMALLOC_|HEAPCHECK=|HEAPPROFILE=|GLIBC_TUNABLES=|DEVCACHE_)' |
		sed 's/^/warning:    set, may change the figures: /'
}

# Runs a program, keeping its output in $log.out too for the targets.
run() {
	{ "$@"; echo $? > "$log.rc"; } 2>&1 | tee -a "$log.out"
	rc=`cat "$log.rc"`
	if test "$rc" -ge 2; then
		echo "bench: $* failed (exit status $rc)"
		echo 2 > "$log.fail"
	fi
}

rm -f "$log.fail" "$log.out" "$log.rc"
{
	header
	echo
	echo "== Generating the traces"
	for k in train-fixed train-var decode; do
		run "$b/gentrace" $k "$b/$k.trace"
		test -f "$b/$k.trace" &&
		printf '%-12s %9s events  %s\n' $k `grep -vc '^#' "$b/$k.trace"` \
			"`sed -n 2p "$b/$k.trace" | cut -c3-`"
	done
	echo
	run "$b/hotpath" ${BENCH_FLAGS:-}
	echo
	run "$b/replay" -m "$b/modules/.libs" "$b/train-fixed.trace" "$b/train-var.trace" "$b/decode.trace"
	echo
	# The traces recorded from PyTorch (bench/torch-*.trace.gz), warm in
	# one process, in one thread and in two, and their least memory; then
	# their instructions per event under callgrind.
	run "$b/replay" -W -T -r 7 -m "$b/modules/.libs" "`dirname "$0"`"/torch-*.trace.gz
	echo
	run sh "`dirname "$0"`/callgrind.sh" "$1"
	echo
	run "$b/loadbench" -d "$b"
	echo
	run "$b/headerbench" -d "$b"
	echo
	run sh "`dirname "$0"`/tunebench.sh" "$1"
	echo
	run sh "`dirname "$0"`/soak.sh" "$1" "`dirname "$0"`/.."
	echo
	echo "== Targets"
	grep '^TARGET' "$log.out" | sed 's/^TARGET /  /'
	pass=`grep -c '^TARGET .* PASS ' "$log.out"`
	miss=`grep -c '^TARGET .* MISS ' "$log.out"`
	skip=`grep -c '^TARGET .* SKIP ' "$log.out"`
	test "$skip" -gt 0 && skipped=", $skip skipped" || skipped=
	echo "$pass passed, $miss missed$skipped; `expr \`date +%s\` - $start` s; load at the end `cut -d' ' -f1-3 /proc/loadavg`"
} 2>&1 | tee "$log"
mv "$log" "$report"
rm -f "$log.out" "$log.rc"
echo "(this report is in $report)"
test -f "$log.fail" && { rm -f "$log.fail" "$log.out" "$log.rc"; exit 2; }
if test "${BENCH_STRICT:-no}" = yes && grep -q '^TARGET .* MISS ' "$report"; then
	exit 1
fi
exit 0
