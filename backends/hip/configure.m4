dnl SPDX-License-Identifier: LGPL-2.1-or-later
dnl configure.m4 - configure's check for the hip backend module: HIP's hip/hip_runtime_api.h (Debian: libamdhip64-dev).
DC_BACKEND([hip], [HIP],
  [the HIP headers are in DIR/include (default: the system's)],
[HIP_CPPFLAGS="-D__HIP_PLATFORM_AMD__"
AS_IF([test -n "$with_hip" && test "x$with_hip" != xyes && test "x$with_hip" != xno],
  [HIP_CPPFLAGS="$HIP_CPPFLAGS -I$with_hip/include"])
AC_SUBST([HIP_CPPFLAGS])],
[save_CPPFLAGS=$CPPFLAGS
  CPPFLAGS="$CPPFLAGS $HIP_CPPFLAGS"
  AC_CHECK_HEADER([hip/hip_runtime_api.h], [dc_hip=yes],
    [dc_hip="no (hip/hip_runtime_api.h not found: install libamdhip64-dev, or --with-hip=DIR)"])
  CPPFLAGS=$save_CPPFLAGS
  dc_hip_detail="HIP headers: ${with_hip:-the system's}"])
