/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* mallocs.c - loads the reference mallocs for the benchmarks: glibc's own, and jemalloc, mimalloc and tcmalloc by the sonames configure found. */
#include <config.h>

#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mallocs.h"

/* jemalloc, mimalloc and tcmalloc all export malloc and free.  Linked in
 * the usual way, any of them would replace glibc's malloc for the whole
 * process (the library and glibc's own comparator included), so they are
 * dlopen()ed with RTLD_LOCAL and called through their own symbols: every
 * allocator is one call through a pointer per operation. */
#ifndef BENCH_JEMALLOC_SONAME
#define BENCH_JEMALLOC_SONAME ""
#endif
#ifndef BENCH_MIMALLOC_SONAME
#define BENCH_MIMALLOC_SONAME ""
#endif
#ifndef BENCH_TCMALLOC_SONAME
#define BENCH_TCMALLOC_SONAME ""
#endif

#define REEXEC_ENV "DEVCACHE_BENCH_REEXEC"
/* jemalloc's and tcmalloc's thread-local data are initial-exec: dlopen()
 * needs more static TLS room than glibc keeps spare by default. */
#define STATIC_TLS_TUNABLE "glibc.rtld.optional_static_tls=16384"

static void load_glibc(struct ref_malloc *g)
{
	g->alloc = malloc;
	g->release = free;
	g->available = true;
	snprintf(g->version, sizeof g->version, "%s", gnu_get_libc_version());
}

static void *open_local(struct ref_malloc *r, const char *soname)
{
	void *h;

	if (!*soname) {
		snprintf(r->why, sizeof r->why, "not found by configure");
		return NULL;
	}
	h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		snprintf(r->why, sizeof r->why, "%s", dlerror());
	return h;
}

/* Resolves the pair; false (and why) when the library does not have it or
 * it is glibc's own. */
static bool resolve(struct ref_malloc *r, void *h, const char *soname, const char *alloc_name,
		    const char *free_name)
{
	r->alloc = (malloc_fn)dlsym(h, alloc_name);
	r->release = (free_fn)dlsym(h, free_name);
	if (!r->alloc || !r->release || r->alloc == malloc) {
		snprintf(r->why, sizeof r->why, "%s: no private %s/%s", soname, alloc_name,
			 free_name);
		return false;
	}
	return true;
}

static void load_jemalloc(struct ref_malloc *j)
{
	void *h = open_local(j, BENCH_JEMALLOC_SONAME);
	int (*mallctl)(const char *, void *, size_t *, void *, size_t);
	const char *v = NULL;
	size_t len = sizeof v;

	/* Its own malloc and free: jemalloc's fastest entry points. */
	if (!h || !resolve(j, h, BENCH_JEMALLOC_SONAME, "malloc", "free"))
		return;
	*(void **)&mallctl = dlsym(h, "mallctl");
	if (mallctl && mallctl("version", &v, &len, NULL, 0) == 0 && v)
		snprintf(j->version, sizeof j->version, "%.*s", (int)strcspn(v, "-"), v);
	j->available = true;
}

static void load_mimalloc(struct ref_malloc *m)
{
	void *h = open_local(m, BENCH_MIMALLOC_SONAME);
	int (*version)(void);

	if (!h || !resolve(m, h, BENCH_MIMALLOC_SONAME, "mi_malloc", "mi_free"))
		return;
	*(void **)&version = dlsym(h, "mi_version");
	if (version) {
		int v = version();

		snprintf(m->version, sizeof m->version, "%d.%d.%d", v / 100, v / 10 % 10, v % 10);
	}
	m->available = true;
}

/* gperftools' tcmalloc: tc_malloc and tc_free are the same code as its
 * malloc and free, under names glibc does not have. */
static void load_tcmalloc(struct ref_malloc *t)
{
	void *h = open_local(t, BENCH_TCMALLOC_SONAME);
	const char *(*version)(int *, int *, const char **);
	int major, minor;
	const char *patch = "";

	if (!h || !resolve(t, h, BENCH_TCMALLOC_SONAME, "tc_malloc", "tc_free"))
		return;
	*(void **)&version = dlsym(h, "tc_version");
	if (version && version(&major, &minor, &patch))
		snprintf(t->version, sizeof t->version, "%d.%d%s", major, minor,
			 patch ? patch : "");
	t->available = true;
}

/* Runs the program again with glibc's tunable that reserves more static
 * TLS; it changes nothing else.  Returns only when that is not possible. */
static void reexec(char **argv)
{
	const char *old = getenv("GLIBC_TUNABLES");
	char *tun;

	if (getenv(REEXEC_ENV))
		return;
	if (asprintf(&tun, "%s%s%s", old ? old : "", old ? ":" : "", STATIC_TLS_TUNABLE) < 0)
		return;
	setenv("GLIBC_TUNABLES", tun, 1);
	setenv(REEXEC_ENV, "1", 1);
	fflush(NULL);
	execv("/proc/self/exe", argv);
	free(tun); /* exec failed: go on without them */
}

void ref_mallocs_load(struct ref_malloc refs[N_REF_MALLOCS], char **argv)
{
	static const char *const names[N_REF_MALLOCS] = {
		[REF_GLIBC] = "glibc malloc",
		[REF_JEMALLOC] = "jemalloc",
		[REF_MIMALLOC] = "mimalloc",
		[REF_TCMALLOC] = "tcmalloc",
	};

	memset(refs, 0, N_REF_MALLOCS * sizeof *refs);
	for (int i = 0; i < N_REF_MALLOCS; i++)
		refs[i].name = names[i];
	load_glibc(&refs[REF_GLIBC]);
	/* tcmalloc before jemalloc: both need libstdc++, whose operator new
	 * and delete are bound, once, in the scope of the first dlopen() that
	 * loads it.  Loaded by jemalloc first, libstdc++ hands tcmalloc's own
	 * start-up strings (MallocExtension::Initialize) to another
	 * allocator's delete, and the process aborts; tcmalloc first, each
	 * library's strings go back where they came from. */
	load_tcmalloc(&refs[REF_TCMALLOC]);
	load_jemalloc(&refs[REF_JEMALLOC]);
	load_mimalloc(&refs[REF_MIMALLOC]);
	for (int i = 0; i < N_REF_MALLOCS; i++)
		if (!refs[i].available && strstr(refs[i].why, "static TLS"))
			reexec(argv);
}
