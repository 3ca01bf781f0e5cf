#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# check-gpu-bundle.sh - make check-gpu-bundle: make check-gpu's programs, the backend modules and the libraries they need, in one folder that runs where nothing is built.
#
# Usage: check-gpu-bundle.sh BUILDDIR SRCDIR OUT
#
# A machine with a GPU often has the vendor's driver and little else: no
# compiler, no json-c or cmocka.  OUT holds the build tree's layout as
# tests/check-gpu.sh reads it (tools/devcache, tests/gpu-check,
# tests/test-conformance, bench/loadbench, backends/NAME/.libs/NAME.so, the
# fakes for a self-test), the programs themselves rather than libtool's
# wrappers, and in lib/ libdevcache and every library they link but the C
# library's own, which the machine has.  Copy OUT there, or lend it to a
# command that runs there, and run `sh OUT/run.sh`: it is make check-gpu,
# with the same CHECK_GPU_* variables.  The machine needs a C library as
# new as this one's (glibc 2.36 on Debian 12) and the same processor.
set -e
top=$1 src=$2 out=$3
test -n "$top" && test -n "$src" && test -n "$out" || {
	echo "usage: check-gpu-bundle.sh BUILDDIR SRCDIR OUT" >&2
	exit 2
}
rm -rf "$out"
mkdir -p "$out/lib" "$out/tools" "$out/tests" "$out/bench"

# The program libtool built: .libs/NAME behind a wrapper script, or the
# file itself.
program() {
	d=$(dirname "$1") b=$(basename "$1")
	if test -f "$d/.libs/$b"; then
		echo "$d/.libs/$b"
	elif test -f "$d/.libs/lt-$b"; then
		echo "$d/.libs/lt-$b"
	else
		echo "$1"
	fi
}
for p in tools/devcache tests/gpu-check tests/test-conformance bench/loadbench; do
	if ! test -x "$top/$p"; then
		echo "check-gpu-bundle: $top/$p is not built" >&2
		exit 2
	fi
	cp "$(program "$top/$p")" "$out/$p"
done
mkdir -p "$out/backends"
cp "$src/backends/modules" "$out/backends/"
for b in `sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$src/backends/modules"`; do
	if test -f "$top/backends/$b/.libs/$b.so"; then
		mkdir -p "$out/backends/$b/.libs"
		cp "$top/backends/$b/.libs/$b.so" "$out/backends/$b/.libs/"
	fi
done
for f in "$top"/tests/fakes/.libs/libfake-*.so; do
	test -f "$f" || continue
	mkdir -p "$out/tests/fakes/.libs"
	cp "$f" "$out/tests/fakes/.libs/"
done
cp -L "$top/.libs/libdevcache.so.0" "$out/lib/"
cp "$src/tests/check-gpu.sh" "$src/tests/run-tap.sh" "$out/tests/"

# Every library the programs and modules link, but the C library's own.
find "$out" -type f \( -name '*.so' -o -perm -u+x \) ! -name '*.sh' | while read -r f; do
	LD_LIBRARY_PATH=$out/lib ldd "$f" 2>/dev/null || true
done | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
	while read -r name path; do
		case $name in
		libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux* | \
			libresolv.so.* | libutil.so.*) ;;
		*) test -f "$out/lib/$name" || cp -L "$path" "$out/lib/$name" ;;
		esac
	done

cat >"$out/run.sh" <<'RUN'
#!/bin/sh
# run.sh - make check-gpu from this bundle (check-gpu-bundle.sh): sh run.sh, with the CHECK_GPU_* variables of make check-gpu.
here=$(cd "$(dirname "$0")" && pwd)
LD_LIBRARY_PATH=$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
CHECK_GPU_BUILDDIR=$here
CHECK_GPU_SRCDIR=$here
export LD_LIBRARY_PATH CHECK_GPU_BUILDDIR CHECK_GPU_SRCDIR
exec ${SHELL:-/bin/sh} "$here/tests/check-gpu.sh" "$@"
RUN
chmod +x "$out/run.sh"
echo "check-gpu-bundle: $out, $(du -sh "$out" | cut -f1): run sh $out/run.sh where the GPU is"
