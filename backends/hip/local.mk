## SPDX-License-Identifier: LGPL-2.1-or-later
## local.mk - make rules of the hip backend module: the module, when configure builds it, and its manual page.
if BUILD_HIP
backendmod_LTLIBRARIES += backends/hip/hip.la
backends_hip_hip_la_SOURCES = backends/hip/hip.c backends/hip/tunables.def backends/runtime.h
backends_hip_hip_la_CPPFLAGS = $(AM_CPPFLAGS) $(HIP_CPPFLAGS)
backends_hip_hip_la_CFLAGS = $(AM_CFLAGS) $(VISIBILITY_CFLAGS)
backends_hip_hip_la_LDFLAGS = $(backend_module_ldflags)
backends_hip_hip_la_LIBADD = $(LTLIBINTL)
endif
EXTRA_DIST += backends/hip/hip.c backends/hip/configure.m4 backends/hip/local.mk
module_tunable_defs += backends/hip/tunables.def

notrans_man_MANS += man/devcache-hip.7
EXTRA_DIST += backends/hip/devcache-hip.7.in
CLEANFILES += man/devcache-hip.7
man/devcache-hip.7: backends/hip/devcache-hip.7.in $(MKMAN) Makefile
	$(AM_V_GEN)$(MKMAN) $(man_subst) -i $(srcdir)/backends/hip/devcache-hip.7.in -O $@
