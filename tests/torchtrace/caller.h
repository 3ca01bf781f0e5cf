/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* caller.h - what tests/torchtrace/caller.c allocates, for tests/test-torchtrace to check the trace against. */
#ifndef DEVCACHE_TEST_TORCHTRACE_CALLER_H
#define DEVCACHE_TEST_TORCHTRACE_CALLER_H

#define CALLER_THREADS 2
#define CALLER_ROUNDS 2000
/* Thread i's first size; its rounds ask for CALLER_BASE(i) + round. */
#define CALLER_BASE(i) (100 + 10000 * (i))
/* Allocations in all: the first alone, then two a round a thread. */
#define CALLER_ALLOCS (1 + 2 * CALLER_THREADS * CALLER_ROUNDS)

#endif
