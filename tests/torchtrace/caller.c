/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* caller.c - stands for libc10 in tests/test-torchtrace: a library whose posix_memalign() calls, from two threads, bench/torchtrace.so must record. */
#include <config.h>

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "caller.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT int caller_run(void);

/* Each round allocates base + i bytes, kept until the next round, and
 * 4096 bytes freed at once; the last block kept is freed at the end. */
static void *worker(void *arg)
{
	size_t base = (size_t)(uintptr_t)arg;
	void *kept = NULL;

	for (size_t i = 0; i < CALLER_ROUNDS; i++) {
		void *a, *b;

		if (posix_memalign(&a, 64, base + i) != 0)
			return arg;
		if (posix_memalign(&b, 64, 4096) != 0) {
			free(a);
			return arg;
		}
		free(kept);
		kept = a;
		free(b);
	}
	free(kept);
	return NULL;
}

int caller_run(void)
{
	pthread_t tid[CALLER_THREADS];
	void *p, *z, *ret;
	int bad = 0;

	/* First, alone: 1000 bytes, then 0 bytes (no allocation in a trace). */
	if (posix_memalign(&p, 64, 1000) != 0)
		return -1;
	if (posix_memalign(&z, 64, 0) != 0)
		z = NULL;
	free(z);
	free(p);
	for (int i = 0; i < CALLER_THREADS; i++)
		if (pthread_create(&tid[i], NULL, worker, (void *)(uintptr_t)CALLER_BASE(i)) != 0)
			return -1;
	for (int i = 0; i < CALLER_THREADS; i++)
		if (pthread_join(tid[i], &ret) != 0 || ret)
			bad = 1;
	return bad ? -1 : 0;
}
