#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# run-fuzz.sh - make fuzz: run each libFuzzer target for a while on its corpus; print every finding's input, so that the log alone reproduces it.
# Usage: run-fuzz.sh SECONDS CORPUS_DIR 'LIBFUZZER FLAGS' TARGET...
# Run from the build tree.  New inputs go to fuzz/work/TARGET (kept for the
# next run), the seeds are read from CORPUS_DIR/TARGET; a crash, leak,
# timeout or out-of-memory leaves its input in fuzz/artifacts/.  Exit
# status 1 when any target found something.
seconds=$1 corpus=$2 flags=$3
shift 3
mkdir -p fuzz/work fuzz/artifacts || exit 1
failed=
for t in "$@"; do
	prog=fuzz/fuzz-$t
	log=fuzz/$t.log
	if [ ! -x "$prog" ]; then
		echo "run-fuzz: no $prog (targets: model-file model-set model-load options config trace)" >&2
		exit 2
	fi
	mkdir -p "fuzz/work/$t"
	rm -f "fuzz/artifacts/$t-"*
	echo "=== fuzz $t: ${seconds}s"
	# -timeout: an input that takes 10 s is a hang; -rss_limit_mb: one
	# that needs 2 GiB is a finding too (a header must not cost that).
	# shellcheck disable=SC2086
	ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
	UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
		"$prog" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="fuzz/artifacts/$t-" $flags \
		"fuzz/work/$t" "$corpus/$t" >"$log" 2>&1
	rc=$?
	found=$(ls "fuzz/artifacts/$t-"* 2>/dev/null)
	if [ $rc -eq 0 ] && [ -z "$found" ]; then
		grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "$log"
		echo "=== fuzz $t: no finding"
		continue
	fi
	failed="$failed $t"
	echo "=== fuzz $t: FINDING (exit status $rc); the end of $log:"
	tail -n 80 "$log"
	for a in $found; do
		echo "--- reproducer $a ($(wc -c <"$a") bytes), hexdump:"
		od -A x -t x1z -v "$a" | head -n 64
		echo "--- base64 (to reproduce: base64 -d >crash <<'EOF', these lines, EOF;"
		echo "--- then $prog crash, or fuzz/replay-$t crash in any build):"
		base64 "$a"
		echo "--- end of $a"
	done
done
if [ -n "$failed" ]; then
	echo "run-fuzz: findings in:$failed (inputs in fuzz/artifacts/)"
	exit 1
fi
echo "run-fuzz: no finding in $# targets, ${seconds}s each"
