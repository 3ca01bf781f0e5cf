dnl SPDX-License-Identifier: LGPL-2.1-or-later
dnl configure.m4 - configure's check for the cuda backend module: the CUDA Toolkit's cuda.h (the driver API), and its stub libcuda.so for the tests.
dnl
dnl The toolkit's stub libcuda.so, when it is there, lets the tests load a
dnl real NVIDIA library that has no device behind it.
DC_BACKEND([cuda], [CUDA],
  [the CUDA Toolkit is in DIR, with cuda.h in DIR/include (default: /usr/local/cuda)],
[AS_IF([test -z "$with_cuda" || test "x$with_cuda" = xyes], [dc_cuda_dir=/usr/local/cuda],
  [dc_cuda_dir=$with_cuda])
CUDA_CPPFLAGS="-I$dc_cuda_dir/include"
CUDA_STUB=
AC_SUBST([CUDA_CPPFLAGS])
AC_SUBST([CUDA_STUB])],
[save_CPPFLAGS=$CPPFLAGS
  CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS"
  dnl A cuda.h of CUDA 11 or later: the primary-context and virtual-memory
  dnl entry points the backend resolves are declared there.
  AC_CHECK_HEADER([cuda.h],
    [AC_MSG_CHECKING([whether cuda.h is of CUDA 11 or later])
     AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <cuda.h>
#if CUDA_VERSION < 11000
#error too old
#endif]], [[CUmemAllocationProp p; (void)p;]])],
       [AC_MSG_RESULT([yes]); dc_cuda=yes],
       [AC_MSG_RESULT([no]); dc_cuda="no ($dc_cuda_dir/include/cuda.h is older than CUDA 11)"])],
    [dc_cuda="no (cuda.h not found in $dc_cuda_dir/include: install the CUDA Toolkit, or --with-cuda=DIR)"])
  CPPFLAGS=$save_CPPFLAGS
  AS_IF([test "x$dc_cuda" = xyes], [
    dnl Only a stub the host can load: a cross build may find the build
    dnl machine's toolkit, whose stub is of another architecture.
    for f in "$dc_cuda_dir/lib64/stubs/libcuda.so" "$dc_cuda_dir/lib/stubs/libcuda.so" \
	     "$dc_cuda_dir/targets/x86_64-linux/lib/stubs/libcuda.so" \
	     "$dc_cuda_dir/targets/sbsa-linux/lib/stubs/libcuda.so"; do
      AS_IF([test -r "$f"], [
        AC_MSG_CHECKING([whether $f links for the host])
        save_LIBS=$LIBS
        LIBS="$f $LIBS"
        AC_LINK_IFELSE([AC_LANG_PROGRAM([[int cuInit(unsigned);]], [[return cuInit(0);]])],
          [AC_MSG_RESULT([yes]); CUDA_STUB=$f], [AC_MSG_RESULT([no])])
        LIBS=$save_LIBS])
      AS_IF([test -n "$CUDA_STUB"], [break])
    done
    dc_cuda_detail="CUDA headers: $dc_cuda_dir/include; stub driver for the tests: ${CUDA_STUB:-none}"])])
