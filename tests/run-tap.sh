#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# run-tap.sh - run one cmocka test program for tap-driver.sh.  cmocka 1.1
# writes a skipped test as "not ok N # SKIP name", which TAP reads as a
# failure: rewrite it as "ok N # SKIP reason", taking the reason from the
# "# skip-reason: ..." line that skip_because() in tap.h prints before it.
status_file=$(mktemp) || exit 99
{
	"$@"
	echo $? >"$status_file"
} | ${AWK:-awk} '
	/^# skip-reason: / { reason = substr($0, 16); next }
	/^not ok [0-9]+ # SKIP/ {
		if (reason == "") reason = substr($0, index($0, "# SKIP") + 7)
		print "ok " $3 " # SKIP " reason
		reason = ""
		fflush()
		next
	}
	{ print; fflush() }'
status=$(cat "$status_file")
rm -f "$status_file"
exit "${status:-99}"
