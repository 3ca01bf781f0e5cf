## SPDX-License-Identifier: LGPL-2.1-or-later
## local.mk - make rules of the ze (Level Zero) backend module: the module, when configure builds it, and its manual page.
ze_module_sources = backends/ze/ze.c backends/ze/ze-stream.c backends/ze/ze-vm.c backends/ze/ze.h
if BUILD_ZE
backendmod_LTLIBRARIES += backends/ze/ze.la
backends_ze_ze_la_SOURCES = $(ze_module_sources) backends/ze/tunables.def backends/runtime.h
backends_ze_ze_la_CPPFLAGS = $(AM_CPPFLAGS) $(ZE_CPPFLAGS)
backends_ze_ze_la_CFLAGS = $(AM_CFLAGS) $(VISIBILITY_CFLAGS) -pthread
backends_ze_ze_la_LDFLAGS = $(backend_module_ldflags)
backends_ze_ze_la_LIBADD = $(LTLIBINTL)
endif
EXTRA_DIST += $(ze_module_sources) backends/ze/configure.m4 backends/ze/local.mk
module_tunable_defs += backends/ze/tunables.def

notrans_man_MANS += man/devcache-ze.7
EXTRA_DIST += backends/ze/devcache-ze.7.in
CLEANFILES += man/devcache-ze.7
man/devcache-ze.7: backends/ze/devcache-ze.7.in $(MKMAN) Makefile
	$(AM_V_GEN)$(MKMAN) $(man_subst) -i $(srcdir)/backends/ze/devcache-ze.7.in -O $@
