#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# test-abidiff.sh - the built shared library's ABI (abidw, public headers only) against the stored baseline lib/libdevcache.abi.
#
# TAP, run by make check with these from tests/local.mk: ABIDW, ABIDIFF,
# ABIDW_FLAGS, ABIDIFF_FLAGS, ABI_HEADERS (the public headers' folders, blank-separated),
# ABI_BASELINE and ABI_LIBRARY (the built libdevcache.la).  Skips, saying
# why, where abigail-tools is not installed, where the library is not
# shared or has no debug information, and where the baseline describes
# another architecture.
#
# abidiff's exit status is a bit set: 1 error, 2 usage error, 4 an ABI
# change, 8 an incompatible one (a removed function or symbol, a soname).
# A changed parameter, return or struct type is only 4, as are additions;
# so 4 is looked at again with additions suppressed, and what is left
# fails: a change to an existing interface needs the baseline refreshed
# (make abi-baseline) in the commit that bumps the libtool version.
# Three self-checks on doctored copies of the baseline show that this
# classification still sees a removal, a change and an addition.

: "${ABIDW:=abidw}" "${ABIDIFF:=abidiff}"
: "${ABIDW_FLAGS:=--no-corpus-path --no-comp-dir-path --no-show-locs --drop-undefined-syms --no-elf-needed}"
: "${ABI_BASELINE:=${TEST_SRCDIR:-tests}/../lib/libdevcache.abi}"
: "${ABI_LIBRARY:=libdevcache.la}"
: "${ABIDIFF_FLAGS:=--suppressions ${TEST_SRCDIR:-tests}/../lib/libdevcache.abignore}"
: "${ABI_HEADERS:=${TEST_SRCDIR:-tests}/../include}"

skip_all() {
	echo "1..0 # SKIP $*"
	exit 0
}

for tool in "$ABIDW" "$ABIDIFF"; do
	command -v "$tool" >/dev/null 2>&1 ||
		skip_all "$tool not found: install abigail-tools (Debian) or libabigail (Fedora) to compare the ABI with lib/libdevcache.abi"
done
test -r "$ABI_BASELINE" || { echo "1..1"; echo "not ok 1 - no baseline $ABI_BASELINE"; exit 1; }
test -r "$ABI_LIBRARY" || { echo "1..1"; echo "not ok 1 - $ABI_LIBRARY not built"; exit 1; }

# The shared library's file name, as libtool recorded it (empty: static only).
dlname=$(sed -n "s/^dlname='\(.*\)'\$/\1/p" "$ABI_LIBRARY")
test -n "$dlname" || skip_all "libdevcache was not built as a shared library (configure --disable-shared)"
lib=$(dirname "$ABI_LIBRARY")/.libs/$dlname
test -r "$lib" || { echo "1..1"; echo "not ok 1 - $lib: no such file"; exit 1; }
if command -v readelf >/dev/null 2>&1; then
	LC_ALL=C readelf -S "$lib" 2>/dev/null | grep -q '\.debug_info' ||
		skip_all "$dlname has no debug information (built with CFLAGS without -g): abidiff sees no types"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-abidiff.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM

hdirs=
for d in $ABI_HEADERS; do hdirs="$hdirs --headers-dir $d"; done
# shellcheck disable=SC2086 # word splitting of the flags is meant
"$ABIDW" $ABIDW_FLAGS $hdirs --out-file "$tmp/current.abi" "$lib" >"$tmp/abidw.log" 2>&1
abidw_status=$?
arch_of() {
	sed -n "1s/.* architecture='\([^']*\)'.*/\1/p" "$1"
}
if [ "$abidw_status" -eq 0 ]; then
	base_arch=$(arch_of "$ABI_BASELINE")
	arch=$(arch_of "$tmp/current.abi")
	[ "$arch" = "$base_arch" ] ||
		skip_all "the baseline describes $base_arch, this build is ${arch:-of an unknown architecture}"
fi

echo "1..5"

diag() {
	sed 's/^/# /' "$@"
}

# The additions, suppressed for the second look at a status of 4.
cat >"$tmp/additions.suppr" <<'EOF'
[suppress_function]
  change_kind = added-function
  name_regexp = .*
[suppress_variable]
  change_kind = added-variable
  name_regexp = .*
EOF

# classify OLD NEW: prints same, added (additions only), changed (an
# existing interface changed), incompatible or error; abidiff's report is
# left in $tmp/report.
classify() {
	"$ABIDIFF" $ABIDIFF_FLAGS "$1" "$2" >"$tmp/report" 2>&1
	st=$?
	if [ $((st & 3)) -ne 0 ]; then
		echo "error (abidiff exit status $st)"
	elif [ $((st & 8)) -ne 0 ]; then
		echo incompatible
	elif [ $((st & 4)) -eq 0 ]; then
		echo same
	else
		"$ABIDIFF" $ABIDIFF_FLAGS --suppressions "$tmp/additions.suppr" "$1" "$2" \
			>/dev/null 2>&1
		st=$?
		if [ "$st" -eq 0 ]; then
			echo added
		elif [ $((st & 3)) -ne 0 ]; then
			echo "error (abidiff --suppressions exit status $st)"
		else
			echo changed
		fi
	fi
}

# 1. abidw reads the library and finds the public functions.
nfuncs=0
[ "$abidw_status" -eq 0 ] && nfuncs=$(grep -c '<function-decl ' "$tmp/current.abi")
if [ "$abidw_status" -eq 0 ] && [ "$nfuncs" -gt 0 ]; then
	echo "ok 1 - abidw reads $dlname ($arch, $nfuncs public functions)"
else
	echo "not ok 1 - abidw reads $dlname (exit status $abidw_status, $nfuncs public functions; are the headers in $ABI_HEADERS?)"
	diag "$tmp/abidw.log"
	exit 1
fi

# 2. The library against the baseline.
verdict=$(classify "$ABI_BASELINE" "$tmp/current.abi")
case $verdict in
same)
	echo "ok 2 - the ABI is the baseline's (lib/libdevcache.abi)"
	;;
added)
	echo "ok 2 - the ABI is the baseline's, with additions only"
	diag "$tmp/report"
	echo "# New functions go into a new version node of lib/libdevcache.map, the libtool"
	echo "# version gets CURRENT+1, REVISION 0, AGE+1 for the release, and 'make abi-baseline'"
	echo "# refreshes lib/libdevcache.abi: commit both with the change."
	;;
*)
	case $verdict in
	changed) what="an existing interface changed (abidiff: not additions only)" ;;
	incompatible) what="incompatible (abidiff: a function or symbol removed, or the soname changed)" ;;
	*) what=$verdict ;;
	esac
	echo "not ok 2 - the ABI against the baseline: $what"
	diag "$tmp/report"
	echo "# If that is not meant, undo it.  If it is, bump the libtool version in"
	echo "# configure.ac by README's rules ('The ABI'): a public struct grown into its"
	echo "# reserved room is CURRENT+1, REVISION 0, AGE+1; anything else breaks callers:"
	echo "# CURRENT+1, REVISION 0, AGE 0 (a new soname).  Then rebuild, run"
	echo "# 'make abi-baseline', and commit lib/libdevcache.abi with the change."
	;;
esac

# The self-checks doctor a copy of the baseline (the old side) and compare it
# with the baseline itself (the new side).
# selfcheck N EXPECTED DESCRIPTION DOCTORED
selfcheck() {
	if cmp -s "$4" "$ABI_BASELINE"; then
		echo "not ok $1 - self-check: $3: could not doctor the baseline (no devcache_version?)"
		return
	fi
	got=$(classify "$4" "$ABI_BASELINE")
	if [ "$got" = "$2" ]; then
		echo "ok $1 - self-check: $3 is seen as $2"
		grep -i 'summary' "$tmp/report" | diag
	else
		echo "not ok $1 - self-check: $3 is seen as $got, not $2"
		diag "$tmp/report"
	fi
}

# 3. The old side has a function the library lacks: removed, incompatible.
awk -v new=devcache_abi_selfcheck_gone '
	function renamed(s) {
		gsub(/'\''devcache_version'\''/, "'\''" new "'\''", s)
		gsub(/'\''devcache_version@/, "'\''" new "@", s)
		return s
	}
	/<elf-symbol name=.devcache_version. / { print; print renamed($0); next }
	/<function-decl name=.devcache_version. / { copy = 1; block = "" }
	copy { print; block = block renamed($0) "\n" }
	copy && /<\/function-decl>/ { copy = 0; printf "%s", block; next }
	!copy { print }
' "$ABI_BASELINE" >"$tmp/removed.abi"
selfcheck 3 incompatible "a function the library does not have" "$tmp/removed.abi"

# 4. The old side says devcache_version() returns what
# devcache_version_string() returns: a changed function.
awk '
	NR == FNR {
		if ($0 ~ /<function-decl name=.devcache_version_string. /) want = 1
		else if (want && $0 ~ /<return type-id=/) { ret = $0; want = 0 }
		next
	}
	/<function-decl name=.devcache_version. / { in_fn = 1 }
	in_fn && /<return type-id=/ && ret != "" { print ret; in_fn = 0; next }
	/<\/function-decl>/ { in_fn = 0 }
	{ print }
' "$ABI_BASELINE" "$ABI_BASELINE" >"$tmp/changed.abi"
selfcheck 4 changed "a function whose return type changed" "$tmp/changed.abi"

# 5. The old side lacks devcache_version(): the library adds it.
awk '
	/<elf-symbol name=.devcache_version. / { next }
	/<function-decl name=.devcache_version. / { skip = 1 }
	skip { if ($0 ~ /<\/function-decl>/) skip = 0; next }
	{ print }
' "$ABI_BASELINE" >"$tmp/added.abi"
selfcheck 5 added "a function added" "$tmp/added.abi"
