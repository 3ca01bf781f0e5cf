#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# check-gpu.sh - make check-gpu: every check that needs a real GPU, on every device the machine has, and one summary to paste into bench/README.
#
# Run by `make check-gpu` from the build tree (which sets CHECK_GPU_BUILDDIR).
# The devices are those `devcache info --json` lists with the build tree's
# cuda, hip and ze modules and the vendors' own runtimes, no fake.  On each:
# the conformance suite's rows for the real runtimes, tests/gpu-check (models
# of every format byte-exact, a model over 4 GiB where memory and disk allow,
# record_stream with the other stream held by the driver, expandable
# segments), and bench/loadbench -S (staged upload against cat and a pinned
# copy, for staging_buffer_size 1, 4, 16 and 64 MiB).
#
# Environment:
#   CHECK_GPU_FAKES=1    the fake runtimes of tests/fakes instead (how make
#                        check tests this script; implies CHECK_GPU_QUICK)
#   CHECK_GPU_QUICK=1    a small model for the sweep, one run a figure
#   CHECK_GPU_OPTIONS    more tunables for every context ("key:value,...")
#   CHECK_GPU_DIR        where the benchmark's 1 GiB model is kept
#                        (default: the build tree's bench/, as make bench)
#   CHECK_GPU_TIMEOUT    seconds each step may take (default 240): a step
#                        that hangs (a stream the driver never lets go) is
#                        killed and fails, and the summary is still printed
#
# Exit status: 0 when nothing failed, a machine without a GPU included (its
# summary says SKIP and why: it is safe to run anywhere); 1 when a check
# failed; 2 when the build tree is incomplete.

LC_ALL=C
export LC_ALL
top=${CHECK_GPU_BUILDDIR:-.}
tool=$top/tools/devcache
fakes=$top/tests/fakes/.libs
work=$(mktemp -d "${TMPDIR:-/tmp}/check-gpu-XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
quick=${CHECK_GPU_QUICK:-0}
limit=${CHECK_GPU_TIMEOUT:-240}
case $limit in ''|*[!0-9]*|0) echo "check-gpu: CHECK_GPU_TIMEOUT=$limit: not a number of seconds" >&2; exit 2 ;; esac
# Each step under timeout(1) where there is one (coreutils); its status 124
# says it ran out of time.
limited() {
	if command -v timeout >/dev/null 2>&1; then
		timeout -k 10 "$limit" "$@"
	else
		"$@"
	fi
}
timed_out() { test "$1" = 124 || test "$1" = 137; }

for f in "$tool" "$top/tests/gpu-check" "$top/tests/test-conformance" "$top/bench/loadbench"; do
	if test ! -x "$f"; then
		echo "check-gpu: $f is not built: run make check-gpu" >&2
		exit 2
	fi
done

# Only what this script sets reaches the library: no user or machine
# configuration, no DEVCACHE_* variable of the caller's.
unset DEVCACHE_CONF DEVCACHE_OPTIONS DEVCACHE_BACKEND_PATH
XDG_CONFIG_HOME=$work/no-xdg
export XDG_CONFIG_HOME

# The vendor modules: every name in backends/modules.
modules=`sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "${CHECK_GPU_SRCDIR:-$top}/backends/modules"` || exit 2
backend_path=
for b in $modules; do
	test -f "$top/backends/$b/.libs/$b.so" && backend_path=$backend_path${backend_path:+:}$top/backends/$b/.libs
done
opts="backend_path:${backend_path:-/nonexistent}"
what="the vendors' runtimes"
if test "${CHECK_GPU_FAKES:-0}" = 1; then
	quick=1
	what="the FAKE runtimes of tests/fakes (fake devices: every figure is meaningless)"
	for b in $modules; do
		test -f "$fakes/libfake-$b.so" && opts="$opts,${b}_library:$fakes/libfake-$b.so"
	done
fi
test -n "$CHECK_GPU_OPTIONS" && opts="$opts,$CHECK_GPU_OPTIONS"

results=$work/results   # lines: VERDICT<TAB>check<TAB>detail
: >"$results"
result() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$results"; echo "check-gpu: $1 $2${3:+: $3}"; }

# ---- the devices --------------------------------------------------------------------
if ! limited "$tool" -o "$opts" info --json >"$work/info.json" 2>"$work/info.err"; then
	echo "check-gpu: devcache info failed: $(cat "$work/info.err")" >&2
	exit 1
fi
# devcache info --json writes one key a line: the backends' name, devices
# and reason, then the devices' id and name.
awk -F'"' '
	/"backends":\[/ { sect = "b" } /"devices":\[/ { sect = "d" }
	sect == "b" && $2 == "name" { name = $4 }
	sect == "b" && $2 == "devices" { n = $3; gsub(/[^0-9]/, "", n) }
	sect == "b" && $2 == "reason" && name != "host" {
		r = $0; sub(/^[^:]*:"/, "", r); sub(/",?$/, "", r); print "B\t" name "\t" n "\t" r }
	sect == "d" && $2 == "id" { id = $4 }
	sect == "d" && $2 == "name" && id != "host" { print "D\t" id "\t" $4 }
' "$work/info.json" >"$work/devices"
grep '^D' "$work/devices" | cut -f2 >"$work/ids"

machine="$(uname -srm), $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo 2>/dev/null | head -1), \
$(awk '/^MemTotal:/ { printf "%.0f GiB RAM", $2 / 1048576 }' /proc/meminfo 2>/dev/null)"
driver=
if test -r /proc/driver/nvidia/version; then
	driver="NVIDIA: $(sed -n 's/.*Kernel Module *\([0-9.]*\).*/\1/p' /proc/driver/nvidia/version | head -1)"
fi
if command -v nvidia-smi >/dev/null 2>&1; then
	v=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
	c=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)
	test -n "$v" && driver="NVIDIA driver $v${c:+, CUDA $c}"
fi
if test -r /sys/module/amdgpu/version; then
	driver="$driver${driver:+; }amdgpu $(cat /sys/module/amdgpu/version)"
fi

summary() {
	echo
	echo "## make check-gpu, $(date -u +%Y-%m-%d), libdevcache $("$tool" --version 2>/dev/null | head -1 | awk '{ print $NF }')"
	echo
	echo "- machine: $machine"
	echo "- runtimes: $what${driver:+; $driver}"
	while IFS="	" read -r kind name n reason; do
		test "$kind" = B || continue
		if test "$n" -gt 0 2>/dev/null; then
			s=s; test "$n" = 1 && s=
			echo "- $name: $n device$s: $(awk -F'\t' -v b="$name:" 'index($2, b) == 1 { printf "%s%s (%s)", s, $2, $3; s = ", " }' "$work/devices")"
		else
			echo "- $name: no device: $reason"
		fi
	done <"$work/devices"
	echo
	if test -s "$results"; then
		echo "| check | verdict | detail |"
		echo "|---|---|---|"
		awk -F'\t' '{ printf "| %s | %s | %s |\n", $2, $1, $3 }' "$results"
	fi
	for s in "$work"/sweep-*.txt; do
		test -f "$s" || continue
		echo
		sed -n '/^== summary$/,$p' "$s" | sed 1d
	done
}

if ! test -s "$work/ids"; then
	why=$(awk -F'\t' '$1 == "B" { printf "%s%s: %s", s, $2, ($3 > 0 ? "devices" : ($4 == "" ? "no device" : $4)); s = "; " }' "$work/devices")
	echo "check-gpu: SKIP: ${why:-no backend module was built}"
	summary
	echo
	echo "check-gpu: SKIP (no GPU): nothing was checked"
	exit 0
fi

# ---- TAP programs ------------------------------------------------------------------------
# Runs a cmocka program (tests/run-tap.sh rewrites its skips), keeps its
# output in $log, and records one result a test: names[N] for test N.
run_tap() {  # check-label log names... -- command...
	label=$1 log=$2; shift 2
	names=
	while test "$1" != --; do names="$names|$1"; shift; done
	shift
	limited env AWK="${AWK:-awk}" "$@" >"$log" 2>&1
	rc=$?
	awk -v label="$label" -v names="$names" '
		BEGIN { n = split(substr(names, 2), nm, "|") }
		function name(i) { return (i <= n && nm[i] != "") ? nm[i] : "test " i }
		/^ok [0-9]+ # SKIP/ { r = $0; sub(/^ok [0-9]+ # SKIP ?/, "", r); print "SKIP\t" label " " name($2) "\t" r; next }
		/^ok [0-9]+/ { print "PASS\t" label " " name($2) "\t"; next }
		/^not ok [0-9]+/ { print "FAIL\t" label " " name($3) "\tsee " FILENAME; next }
	' "$log" | sed "s|see $log|see its log|" >"$log.results"
	cat "$log.results" >>"$results"
	if timed_out "$rc"; then
		# The test that was running: the one after the last reported.
		k=$(($(wc -l <"$log.results") + 1))
		running=$(echo "$names" | cut -d'|' -f$((k + 1)))
		result FAIL "$label${running:+ $running}" "killed after $limit s (CHECK_GPU_TIMEOUT), see its log"
	elif test "$rc" != 0 && ! grep -q '^FAIL' "$log.results"; then
		result FAIL "$label" "exit status $rc, see its log"
	fi
	if grep -q '^FAIL' "$log.results" || test "$rc" != 0; then
		echo "check-gpu: $label: FAILED; its output:" >&2
		sed 's/^/    /' "$log" >&2
	else
		echo "check-gpu: $label: $(grep -c '^PASS' "$log.results") passed, $(grep -c '^SKIP' "$log.results") skipped"
	fi
}

only=real
test "${CHECK_GPU_FAKES:-0}" = 1 && only=fake
echo "check-gpu: the conformance suite (TEST_CONFORMANCE_ONLY=$only)"
# One line for the suite, not one a row: its rows repeat each test's name.
run_tap conformance "$work/conformance.log" -- env TEST_CONFORMANCE_ONLY=$only \
	TEST_BACKENDS="$backend_path" TEST_FAKES="$fakes" TEST_MODULES="$top/tests/modules/.libs" \
	${SHELL:-/bin/sh} "${CHECK_GPU_SRCDIR:-$top}/tests/run-tap.sh" "$top/tests/test-conformance"
c_pass=$(grep -c '^PASS' "$work/conformance.log.results")
c_skip=$(grep -c '^SKIP' "$work/conformance.log.results")
c_fail=$(grep -c '^FAIL' "$work/conformance.log.results")
killed=$(grep "^FAIL	conformance	killed" "$results" | cut -f3 | sed 's/, see its log$//')
grep -v '^PASS' "$work/conformance.log.results" | grep -v '^SKIP' >"$work/c.keep"
grep -v "	conformance[ 	]" "$results" >"$work/r.keep"
cat "$work/r.keep" "$work/c.keep" >"$results"
if test "$c_fail" -gt 0 || test -n "$killed"; then v=FAIL; elif test "$c_pass" -gt 0; then v=PASS; else v=SKIP; fi
why=$(grep '^SKIP' "$work/conformance.log.results" | head -1 | cut -f3)
result "$v" "conformance suite ($only runtimes)" \
	"${killed:+$killed: }$c_pass passed, $c_skip skipped${why:+ (first: $why)}, $c_fail failed"

for id in $(cat "$work/ids"); do
	backend=${id%%:*}
	echo "check-gpu: $id"
	run_tap "$id" "$work/gpu-check-$id.log" \
		"models of every format" "model over 4 GiB" "record_stream held by the driver" \
		"expandable segments" -- \
		GPU_CHECK_DEVICE="$id" GPU_CHECK_OPTIONS="$opts,backends:$backend" \
		${SHELL:-/bin/sh} "${CHECK_GPU_SRCDIR:-$top}/tests/run-tap.sh" "$top/tests/gpu-check"
	sweep="$work/sweep-$id.txt"
	set -- -S "$id" -o "$opts,backends:$backend" -d "${CHECK_GPU_DIR:-$top/bench}"
	test "$quick" = 1 && set -- "$@" -q -d "$work"
	limited "$top/bench/loadbench" "$@" >"$sweep" 2>&1
	rc=$?
	if test "$rc" = 0; then
		result PASS "$id staging sweep" "$(sed -n 's/^recommended \(.*\) (.*/\1/p' "$sweep")"
	else
		if timed_out "$rc"; then
			result FAIL "$id staging sweep" "killed after $limit s (CHECK_GPU_TIMEOUT)"
		else
			result FAIL "$id staging sweep" "bench/loadbench -S failed"
		fi
		sed 's/^/    /' "$sweep" >&2
		sed -i '/^== summary$/,$d' "$sweep"
	fi
	test "$quick" = 1 && sed -i '/^== summary$/a (fake device or quick run: a small model, one run a figure; not figures to keep)' "$sweep"
done

summary
echo
if grep -q '^FAIL' "$results"; then
	echo "check-gpu: FAIL: $(grep -c '^FAIL' "$results") check(s) failed"
	exit 1
fi
echo "check-gpu: PASS ($(grep -c '^PASS' "$results") passed, $(grep -c '^SKIP' "$results") skipped)"
exit 0
