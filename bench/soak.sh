#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# soak.sh - `make bench` and `make bench-soak`: bench/soak on the host, on each vendor backend's fake runtime, and on the vendors' runtimes where there is a device.
#
# Usage: soak.sh BUILDDIR [SRCDIR]   (SRCDIR, default BUILDDIR, has
# backends/modules, the list of vendor modules; the program is BUILDDIR/bench/soak, the backend
# modules BUILDDIR/backends/*/.libs, the fakes BUILDDIR/tests/fakes/.libs;
# a backend or fake that is not built is skipped, saying so)
# SOAK_SECONDS: the time on each device (default 10); SOAK_FLAGS: more
# options for bench/soak ("-t 8 -S 7").  Exit status: 0, or 2 when the soak
# failed on a device.
set -u
top=`cd "${1:?usage: soak.sh BUILDDIR}" && pwd` || exit 2
src=`cd "${2:-$top}" && pwd` || exit 2
# The vendor modules: every name in backends/modules.
modules=`sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$src/backends/modules"` || exit 2
backends=
devices=host
for b in $modules; do
	backends=$backends${backends:+:}$top/backends/$b/.libs
	devices="$devices $b"
done
for b in $modules; do devices="$devices \"$b -r\""; done
rc=0
echo "== Soak: loads, evictions and allocations under tight budgets (bench/soak)"
# The host, each backend on its fake runtime, then each on the vendor's
# own runtime where the machine has a device for it.
eval "set -- $devices"
for dev; do
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
