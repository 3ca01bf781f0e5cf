#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# test-tool-completion.sh - the bash completion of devcache: commands, options, tunables, devices and model files.
#
# TAP, run by make check with TEST_TOOL and TEST_SRCDIR from tests/local.mk.
# Skips, saying why, where there is no bash.

script="${TEST_SRCDIR:-tests}/../tools/bash-completion/devcache"
: "${TEST_TOOL:=tools/devcache}"

if ! command -v bash >/dev/null 2>&1; then
	echo "1..0 # SKIP no bash to run the completion in"
	exit 0
fi
dir=$(mktemp -d /tmp/devcache-completion-XXXXXX) || exit 99
trap 'rm -rf "$dir"' EXIT
touch "$dir/a.safetensors" "$dir/b.gguf" "$dir/c.txt" "$dir/d.trace"
mkdir "$dir/sub"

# Each case: what is typed, tab, and the completions expected, in order.
cd "$dir" && TOOL=$TEST_TOOL SCRIPT=$script bash -c '
	. "$SCRIPT" || exit 1
	n=0
	# Complete the words given (COMP_WORDS), and compare what came back,
	# sorted, with want; name: the case in the TAP line.
	complete_and_compare() {
		local want=$1 name=$2
		shift 2
		COMP_WORDS=("$TOOL" "$@")
		COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
		COMPREPLY=()
		_devcache
		local got
		got=$(printf "%s\n" "${COMPREPLY[@]}" | sort | tr "\n" " ")
		n=$((n + 1))
		if [ "$got" = "$want" ]; then
			echo "ok $n - $name"
		else
			echo "not ok $n - $name"
			echo "# expected [$want], got [$got]"
		fi
	}
	check() {
		local want=$1
		shift
		complete_and_compare "$want" "devcache $*" "$@"
	}
	# As bash calls it at a prompt: the line and the cursor, the words
	# split at COMP_WORDBREAKS (":" among them).
	check_line() {
		local want=$1 line=$2
		shift 2
		COMP_LINE="$TOOL $line" COMP_POINT=$((${#TOOL} + 1 + ${#line}))
		complete_and_compare "$want" "at a prompt: devcache $line" "$@"
		unset COMP_LINE COMP_POINT
	}
	check "info inspect " in
	check "config " con
	check "--options --output " dump --o
	check "--json " info --j
	check "--verbose --version " --v
	check "max_split_size_mb: " -o max_split_s
	check "caching:false,max_split_size_mb: " -o caching:false,max_split_s
	check "replay " help rep
	check_line "max_split_size_mb: " "-o max_split_s" -o max_split_s
	check_line "false,max_split_size_mb: " "-o caching:false,max_split_s" \
		-o caching : false,max_split_s
	check_line "info inspect " "-o caching:false in" -o caching : false in
	check_line "host " "-o caching:false load --device h" \
		-o caching : false load --device h
	check "host " load --device h
	check "a.safetensors b.gguf sub/ " inspect ""
	check "d.trace sub/ " replay ""
	check "d.trace sub/ " tune ""
	check "tune " help tu
	[ "$(complete -p devcache)" = "complete -F _devcache devcache" ] &&
		echo "ok $((n + 1)) - registered for devcache" ||
		echo "not ok $((n + 1)) - registered for devcache"
	echo "1..$((n + 1))"
'
