/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lock.h - the allocator's mutex: one atomic instruction to take and one to give back when nobody waits, a futex when somebody must. */
#ifndef DEVCACHE_LOCK_H
#define DEVCACHE_LOCK_H

#include <stdbool.h>

/*
 * Every allocation and free takes its pool's lock, almost always without
 * another thread near it; pthread_mutex_lock() and _unlock() then cost a
 * call each, a check of the mutex's kind and, for an adaptive mutex, more
 * bookkeeping: some 30 instructions a call, 15% of the allocator's time
 * on the recorded PyTorch traces (bench/README).  This lock is the
 * three-state futex mutex of Drepper's "Futexes Are Tricky" (the word:
 * 0 free, 1 held, 2 held and perhaps waited for), inline: a compare-and-
 * swap to take it, a decrement to give it back (which leaves 0 unless
 * somebody may wait: then 1, still held, until dc_lock_wake() frees it
 * and wakes a sleeper, as Drepper's third mutex), and a system call only
 * when a thread has had to sleep.  A waiter spins briefly first, as the
 * adaptive pthread mutex did: the sections it guards are short.
 *
 * The atomics carry the ordering (acquire on taking, release on giving
 * back), so ThreadSanitizer sees what the lock orders; what it does not
 * see is the lock itself, so its lock-order checks no longer cover these
 * (the order is simple: world_lock() takes the allocator's, then every
 * pool's by index).  Without Linux's futex a waiter yields the processor
 * instead of sleeping (lock.c).
 */
struct dc_lock {
	int word;
};

static inline void dc_lock_init(struct dc_lock *l)
{
	__atomic_store_n(&l->word, 0, __ATOMIC_RELAXED);
}

/* lock.c: the slow paths. */
void dc_lock_wait(struct dc_lock *l);
void dc_lock_wake(struct dc_lock *l);

static inline __attribute__((always_inline)) void dc_lock(struct dc_lock *l)
{
	int free_word = 0;

	if (__builtin_expect(!__atomic_compare_exchange_n(&l->word, &free_word, 1, false,
							  __ATOMIC_ACQUIRE, __ATOMIC_RELAXED),
			     0))
		dc_lock_wait(l);
}

static inline __attribute__((always_inline)) void dc_unlock(struct dc_lock *l)
{
	if (__builtin_expect(__atomic_sub_fetch(&l->word, 1, __ATOMIC_RELEASE) != 0, 0))
		dc_lock_wake(l);
}

#endif
