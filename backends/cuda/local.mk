## SPDX-License-Identifier: LGPL-2.1-or-later
## local.mk - make rules of the cuda backend module: the module, when configure builds it, and its manual page.
if BUILD_CUDA
backendmod_LTLIBRARIES += backends/cuda/cuda.la
backends_cuda_cuda_la_SOURCES = backends/cuda/cuda.c backends/cuda/tunables.def backends/runtime.h
backends_cuda_cuda_la_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
backends_cuda_cuda_la_CFLAGS = $(AM_CFLAGS) $(VISIBILITY_CFLAGS) -pthread
backends_cuda_cuda_la_LDFLAGS = $(backend_module_ldflags)
backends_cuda_cuda_la_LIBADD = $(LTLIBINTL)
endif
EXTRA_DIST += backends/cuda/cuda.c backends/cuda/configure.m4 backends/cuda/local.mk
module_tunable_defs += backends/cuda/tunables.def

notrans_man_MANS += man/devcache-cuda.7
EXTRA_DIST += backends/cuda/devcache-cuda.7.in
CLEANFILES += man/devcache-cuda.7
man/devcache-cuda.7: backends/cuda/devcache-cuda.7.in $(MKMAN) Makefile
	$(AM_V_GEN)$(MKMAN) $(man_subst) -i $(srcdir)/backends/cuda/devcache-cuda.7.in -O $@
