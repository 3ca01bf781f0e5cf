#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# test-check-gpu.sh - make check-gpu's script where no runtime is found (SKIP, exit 0), on the fake runtimes (every step, PASS), and with a fault injected (FAIL, exit 1).
top=$(dirname "$(dirname "${TEST_TOOL:?run this test through make check}")")
src=${TEST_SRCDIR:?run this test through make check}
out=$(mktemp -d "${TMPDIR:-/tmp}/test-check-gpu-XXXXXX") || exit 99
trap 'rm -rf "$out"' EXIT
n=0 failed=0
check() {  # description, then a command that succeeds when it holds
	n=$((n + 1)) what=$1; shift
	if "$@"; then echo "ok $n - $what"; else echo "not ok $n - $what"; failed=1; fi
}
has() { grep -F -q -- "$2" "$out/$1" || { echo "# $1 lacks: $2"; return 1; }; }
run() {  # name, then environment assignments: the script's output in $out/name, its status in $out/name.rc
	name=$1; shift
	env CHECK_GPU_BUILDDIR="$top" CHECK_GPU_SRCDIR="$src/.." "$@" \
		${SHELL:-/bin/sh} "$src/check-gpu.sh" >"$out/$name" 2>&1
	echo $? >"$out/$name.rc"
	sed "s/^/# $name: /" "$out/$name"
}
rc() { test "$(cat "$out/$1.rc")" = "$2" || { echo "# $1: exit status $(cat "$out/$1.rc"), not $2"; return 1; }; }

echo 1..8
# The modules this build has: a module's X_library tunable exists only
# where the module is built.
libs=
for b in cuda hip ze; do
	test -f "$top/backends/$b/.libs/$b.so" || continue
	case $b in
	cuda) libs="$libs,cuda_library:/nonexistent/libcuda.so.1" ;;
	hip) libs="$libs,hip_library:/nonexistent/libamdhip64.so" ;;
	ze) libs="$libs,ze_library:/nonexistent/libze_loader.so.1" ;;
	esac
done

# A build with no module (no vendor headers): the script says so and
# exits 0; nothing else can be run.
if test -z "$libs"; then
	run none
	check "no module: exit status 0" rc none 0
	check "no module: one SKIP line saying so" \
		sh -c "grep -q '^check-gpu: SKIP: no backend module was built' '$out/none' && \
			! grep -q 'PASS\|FAIL' '$out/none'"
	for k in 3 4 5 6 7 8; do
		echo "ok $k # SKIP no backend module is built (configure found no vendor headers)"
	done
	exit 0
fi

# (a) The vendors' runtimes named where there are none: SKIP, each built
# backend's reason, status 0.
run none CHECK_GPU_OPTIONS="${libs#,}"
check "no runtime: exit status 0" rc none 0
check "no runtime: one SKIP line with each backend's reason" \
	sh -c "grep -q '^check-gpu: SKIP: .*/nonexistent/' '$out/none' && \
		! grep -q 'PASS\|FAIL' '$out/none'"

# (b) The fake runtimes: every step runs, on every fake device.
run fakes CHECK_GPU_FAKES=1
check "fakes: exit status 0" rc fakes 0
ok=:
for b in cuda hip ze; do
	test -f "$top/tests/fakes/.libs/libfake-$b.so" || continue
	for c in "models of every format | PASS" "model over 4 GiB | SKIP | " \
		 "staging sweep | PASS | staging_buffer_size:"; do
		has fakes "$b:0 $c" || ok=false
	done
	has fakes "device: $b:0, Fake" || ok=false
done
if test -f "$top/tests/fakes/.libs/libfake-cuda.so"; then
	for c in "cuda:0 record_stream held by the driver | PASS" "cuda:0 expandable segments | PASS" \
		 "cuda:1 models of every format | PASS"; do
		has fakes "$c" || ok=false
	done
fi
check "fakes: each device's checks in the summary" $ok
check "fakes: the conformance suite on the fakes, the sweep's table, and no failure" \
	sh -c "grep -q '| conformance suite (fake runtimes) | PASS | [1-9][0-9]* passed' '$out/fakes' && \
		grep -q '^| 64 MiB' '$out/fakes' && grep -q '^pinned host-to-device copy: ' '$out/fakes' && \
		grep -q '^cat FILE > /dev/null: ' '$out/fakes' && ! grep -q '| FAIL |' '$out/fakes'"

# A driver fault in the record_stream check: it fails, and so does the
# script.  The CUDA devices alone: the others' checks ran in (b).
if test -f "$top/tests/fakes/.libs/libfake-cuda.so"; then
	run fault CHECK_GPU_FAKES=1 CHECK_GPU_OPTIONS=backends:cuda FAKE_CUDA_FAIL=cuStreamWaitValue32_v2:1:1
	check "a failing check: exit status 1, and the summary names it" \
		sh -c "test \"\$(cat '$out/fault.rc')\" = 1 && \
			grep -q '| cuda:0 record_stream held by the driver | FAIL |' '$out/fault'"
else
	echo "ok 6 # SKIP the cuda backend or its fake is not built"
	n=6
fi

# A step that does not end (here: every copy of the fake CUDA driver takes
# 5 s) is killed after CHECK_GPU_TIMEOUT, fails, and the summary still comes.
if test -f "$top/tests/fakes/.libs/libfake-cuda.so"; then
	run hang CHECK_GPU_FAKES=1 CHECK_GPU_TIMEOUT=2 CHECK_GPU_OPTIONS=backends:cuda FAKE_CUDA_COPY_MS=5000
	check "a step that hangs: killed, named in the summary, exit status 1" \
		sh -c "test \"\$(cat '$out/hang.rc')\" = 1 && \
			grep -q '| cuda:0 models of every format | FAIL | killed after 2 s (CHECK_GPU_TIMEOUT)' '$out/hang' && \
			grep -q '| conformance suite (fake runtimes) | FAIL | killed after 2 s' '$out/hang' && \
			grep -q '^- cuda: 2 devices: ' '$out/hang'"
else
	echo "ok 7 # SKIP the cuda backend or its fake is not built"
	n=7
fi

# (c) The bundle (make check-gpu-bundle), moved elsewhere and run with
# nothing of the build tree's environment: the same checks on the fakes.
# (QEMU_LD_PREFIX is kept: it is how qemu-user runs a cross build's tests.)
sh "$src/check-gpu-bundle.sh" "$top" "$src/.." "$out/bundle" >"$out/bundle.log" 2>&1 &&
	mv "$out/bundle" "$out/moved" &&
	env -i PATH=/usr/bin:/bin HOME="$out" TMPDIR="$out" CHECK_GPU_FAKES=1 \
		${QEMU_LD_PREFIX:+QEMU_LD_PREFIX="$QEMU_LD_PREFIX"} \
		sh "$out/moved/run.sh" >"$out/moved.txt" 2>&1
echo $? >"$out/moved.txt.rc"
sed "s/^/# bundle: /" "$out/bundle.log" "$out/moved.txt"
check "the bundle, moved: every step on the fakes, no failure, nothing of the build tree" \
	sh -c "test \"\$(cat '$out/moved.txt.rc')\" = 0 && \
		grep -q '| conformance suite (fake runtimes) | PASS |' '$out/moved.txt' && \
		! grep -q '| FAIL |' '$out/moved.txt' && ! grep -q -F '$(cd "$top" && pwd)/' '$out/moved.txt'"
exit 0
