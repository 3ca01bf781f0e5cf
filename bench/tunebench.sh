#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# tunebench.sh - `make bench`: devcache tune on a 700,000-event decoding trace, 24 settings, 2 at a time, against its 60 s target.
#
# Usage: tunebench.sh BUILDDIR   (BUILDDIR/bench/gentrace makes the trace,
# BUILDDIR/tools/devcache tunes it).  The device tuned for is 97% of the
# peak that the defaults reserve, so that they run out of memory and the
# search has work to do.  Prints the time and a TARGET line.
set -u
top=${1:?usage: tunebench.sh BUILDDIR}
tool=$top/tools/devcache
trace=$top/bench/tune.trace
echo "== devcache tune: 24 settings of a decoding trace, --jobs 2"
"$top/bench/gentrace" -s 9 decode "$trace" || exit 2
events=`grep -vc '^#' "$trace"`
reserved=`"$tool" replay --json "$trace" | sed -n 's/.*"peak_reserved_bytes":\([0-9]*\).*/\1/p'`
test -n "$reserved" || exit 2
memory=$((reserved / 100 * 97))
# The grid, then settings of one's own up to 24.
tries="max_split_size_mb:64 max_split_size_mb:128 max_split_size_mb:256
roundup_power2_divisions:2 roundup_power2_divisions:32 garbage_collection_threshold:0.7,memory_fraction:1
expandable_segments:true,max_split_size_mb:128 roundup_power2_divisions:[128:1,>:4]
expandable_segments:true,roundup_power2_divisions:8 max_split_size_mb:512"
set --
for t in $tries; do set -- "$@" --try "$t"; done
start=`date +%s.%N`
"$tool" tune --json --jobs 2 --memory "$memory" "$@" "$trace" >"$top/bench/tune.json"
rc=$?
end=`date +%s.%N`
test $rc -le 3 || exit 2
settings=`grep -o '"options":' "$top/bench/tune.json" | wc -l`
seconds=`echo "$end - $start" | bc`
replays=`grep -o '"replays":[0-9]*' "$top/bench/tune.json" | cut -d: -f2 | paste -sd+ | bc`
printf '%s events, %s settings, %s replays, device of %s bytes: %.1f s (%s CPUs online)\n' \
	"$events" "$settings" "$replays" "$memory" "$seconds" "`nproc`"
verdict=`echo "$seconds < 60 && $events >= 700000 && $settings >= 24" | bc`
test "$verdict" = 1 && v=PASS || v=MISS
printf 'TARGET %-28s %s  %.1f s for %s events x %s settings, 2 jobs; target < 60 s\n' \
	tune/700k-events-24-settings "$v" "$seconds" "$events" "$settings"
