#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# gen-modules.sh - backends/modules.m4, modules.mk and modules.h from the one list, backends/modules.
#
# Usage: gen-modules.sh [SRCDIR]  (default: the folder above this script's).
# Run by bootstrap, and by make when backends/modules changes.  A name that
# is not a lower-case C identifier, or whose folder lacks one of its files,
# is an error: the message names the line.
set -eu
top=${1:-$(dirname "$0")/..}
list=$top/backends/modules
names=
n=0
while IFS= read -r line || test -n "$line"; do
	n=$((n + 1))
	case $line in '#'* | '') continue ;; esac
	case $line in
	*[!a-z0-9_]* | [!a-z]*)
		echo "$list:$n: \"$line\" is not a backend name (lower-case letters, digits and _, a letter first)" >&2
		exit 1 ;;
	esac
	case " $names " in *" $line "*)
		echo "$list:$n: $line is listed twice" >&2
		exit 1 ;;
	esac
	for f in "$line.c" tunables.def configure.m4 local.mk "devcache-$line.7.in"; do
		test -f "$top/backends/$line/$f" || {
			echo "$list:$n: backends/$line/$f: no such file (see HACKING, \"Adding a backend\")" >&2
			exit 1
		}
	done
	names="$names $line"
done <"$list"
names=${names# }

header() {
	echo "$1 SPDX-License-Identifier: LGPL-2.1-or-later"
	echo "$1 $2 - made from backends/modules by backends/gen-modules.sh: do not edit."
}

tmp=$top/backends/modules.tmp.$$
trap 'rm -f "$tmp"' EXIT

{
	header dnl modules.m4
	for b in $names; do
		echo "m4_include([backends/$b/configure.m4])"
	done
} >"$tmp" && mv -f "$tmp" "$top/backends/modules.m4"

{
	header '##' modules.mk
	echo "backend_modules = $names"
	for b in $names; do
		echo "include \$(srcdir)/backends/$b/local.mk"
	done
} >"$tmp" && mv -f "$tmp" "$top/backends/modules.mk"

{
	echo "/* SPDX-License-Identifier: LGPL-2.1-or-later */"
	echo "/* modules.h - made from backends/modules by backends/gen-modules.sh: do not edit. */"
	echo "/* BACKEND_MODULES(X): X(name) for each, in the list's order. */"
	echo "#ifndef BACKEND_MODULES"
	printf '#define BACKEND_MODULES(X)'
	for b in $names; do printf ' X(%s)' "$b"; done
	echo
	echo "#endif"
	echo "/* Then, where the includer defines TUNABLE (and EXAMPLE, ENVIRONMENT as"
	echo " * it needs them), each module's tunables.def, with BACKEND_MODULE its name. */"
	echo "#ifdef TUNABLE"
	for b in $names; do
		echo "#define BACKEND_MODULE \"$b\""
		echo "#include \"$b/tunables.def\""
		echo "#undef BACKEND_MODULE"
	done
	echo "#endif"
} >"$tmp" && mv -f "$tmp" "$top/backends/modules.h"
