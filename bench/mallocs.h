/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* mallocs.h - the reference mallocs the benchmarks measure devcache against: glibc's, and jemalloc, mimalloc and tcmalloc dlopen()ed privately. */
#ifndef DEVCACHE_BENCH_MALLOCS_H
#define DEVCACHE_BENCH_MALLOCS_H

#include <stdbool.h>
#include <stddef.h>

typedef void *(*malloc_fn)(size_t);
typedef void (*free_fn)(void *);

enum { REF_GLIBC, REF_JEMALLOC, REF_MIMALLOC, REF_TCMALLOC, N_REF_MALLOCS };

struct ref_malloc {
	const char *name;
	bool available;
	char why[256];    /* why not available */
	char version[64];
	malloc_fn alloc;
	free_fn release;
};

/* Fills refs[] in the order above.  When jemalloc or tcmalloc cannot be
 * dlopen()ed for want of static TLS, the program runs itself again (execv
 * of argv) with glibc's tunable that reserves more, so call this first in
 * main(), before any other work. */
void ref_mallocs_load(struct ref_malloc refs[N_REF_MALLOCS], char **argv);

/* The allocator's entry points read through a volatile, so that the
 * compiler can neither inline them nor drop a malloc/free pair it can see
 * through. */
static inline malloc_fn ref_malloc_fn(const struct ref_malloc *r)
{
	malloc_fn volatile f = r->alloc;

	return f;
}

static inline free_fn ref_free_fn(const struct ref_malloc *r)
{
	free_fn volatile f = r->release;

	return f;
}

#endif
