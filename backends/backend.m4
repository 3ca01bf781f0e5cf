dnl SPDX-License-Identifier: LGPL-2.1-or-later
dnl backend.m4 - DC_BACKEND: configure's options, check, automake conditional and summary line for one vendor backend module.
dnl
dnl DC_BACKEND(NAME, TITLE, WITH-HELP, FLAGS, CHECK)
dnl
dnl Called by backends/NAME/configure.m4, which configure.ac includes for
dnl each name in backends/modules (through backends/modules.m4).
dnl   NAME       the module's name: cuda.so, --enable-cuda, BUILD_CUDA
dnl   TITLE      the vendor's name of it, for --help: "CUDA"
dnl   WITH-HELP  what --with-NAME=DIR means, for --help
dnl   FLAGS      shell code run always, after the options are read: sets
dnl              and AC_SUBSTs what the module's build needs (NAME_CPPFLAGS)
dnl              from $with_NAME
dnl   CHECK      shell code run unless --disable-NAME (or --without-NAME):
dnl              sets dc_NAME to yes, or to "no (the reason, and what to
dnl              install)"; on yes, dc_NAME_detail to what the summary says
dnl              of the module ("CUDA headers: /usr/local/cuda/include")
dnl --enable-NAME=yes fails with the reason where the module cannot be built;
dnl auto (the default) builds it where it can.
AC_DEFUN([DC_BACKEND], [
m4_pushdef([dc_NAME], m4_toupper([$1]))dnl
AC_ARG_ENABLE([$1],
  [AS_HELP_STRING([--enable-$1=yes|no|auto], [build the $2 backend module (default: auto)])],
  [], [enable_$1=auto])
AC_ARG_WITH([$1],
  [AS_HELP_STRING([--with-$1=DIR], [$3])],
  [], [with_$1=])
$4
dc_$1="no (--disable-$1)"
dc_$1_detail=
AS_IF([test "x$enable_$1" != xno && test "x$with_$1" != xno], [
  $5
  AS_IF([test "x$dc_$1" != xyes && test "x$enable_$1" = xyes],
    [AC_MSG_ERROR([--enable-$1: $dc_$1])])
])
AM_CONDITIONAL([BUILD_]dc_NAME, [test "x$dc_$1" = xyes])
AS_IF([test "x$dc_$1" = xyes], [dc_$1="module $1.so ($dc_$1_detail)"])
dc_backend_summary="$dc_backend_summary
    $1: $dc_$1"
m4_popdef([dc_NAME])dnl
])
