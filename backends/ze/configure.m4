dnl SPDX-License-Identifier: LGPL-2.1-or-later
dnl configure.m4 - configure's check for the ze backend module: Level Zero's level_zero/ze_api.h (Debian: libze-dev).
DC_BACKEND([ze], [Level Zero],
  [the Level Zero headers are in DIR/include (default: the system's)],
[ZE_CPPFLAGS=
AS_IF([test -n "$with_ze" && test "x$with_ze" != xyes && test "x$with_ze" != xno],
  [ZE_CPPFLAGS="-I$with_ze/include"])
AC_SUBST([ZE_CPPFLAGS])],
[save_CPPFLAGS=$CPPFLAGS
  CPPFLAGS="$CPPFLAGS $ZE_CPPFLAGS"
  AC_CHECK_HEADER([level_zero/ze_api.h], [dc_ze=yes],
    [dc_ze="no (level_zero/ze_api.h not found: install libze-dev, or --with-ze=DIR)"])
  CPPFLAGS=$save_CPPFLAGS
  dc_ze_detail="Level Zero headers: ${with_ze:-the system's}"])
