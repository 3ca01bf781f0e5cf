#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# soak.sh - `make bench` and `make bench-soak`: bench/soak on the host, on each vendor backend's fake runtime, and on the vendors' runtimes where there is a device.
#
# Usage: soak.sh BUILDDIR   (the program is BUILDDIR/bench/soak, the backend
# modules BUILDDIR/backends/*/.libs, the fakes BUILDDIR/tests/fakes/.libs;
# a backend or fake that is not built is skipped, saying so)
# SOAK_SECONDS: the time on each device (default 10); SOAK_FLAGS: more
# options for bench/soak ("-t 8 -S 7").  Exit status: 0, or 2 when the soak
# failed on a device.
set -u
top=`cd "${1:?usage: soak.sh BUILDDIR}" && pwd` || exit 2
backends=$top/backends/cuda/.libs:$top/backends/hip/.libs:$top/backends/ze/.libs
rc=0
echo "== Soak: loads, evictions and allocations under tight budgets (bench/soak)"
# The host, each backend on its fake runtime, then each on the vendor's
# own runtime where the machine has a device for it.
for dev in host cuda hip ze "cuda -r" "hip -r" "ze -r"; do
	echo
	"$top/bench/soak" -d $dev -s "${SOAK_SECONDS:-10}" -b "$backends" \
		-f "$top/tests/fakes/.libs" ${SOAK_FLAGS:-}
	r=$?
	if test $r -ne 0; then
		echo "bench: bench/soak -d $dev failed (exit status $r)"
		rc=2
	fi
done
exit $rc
