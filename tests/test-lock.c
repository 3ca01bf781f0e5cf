/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-lock.c - the allocator's mutex (lock.h): excludes, and wakes every sleeper, when threads queue on it. */
#include "config.h"

#include "tap.h"

#include <pthread.h>
#include <sched.h>

#include "lock.h"

/* Threads that hold the lock across a yield of the processor, so that the
 * others spin out and sleep on it: every unlock then finds a waiter now
 * and then and must free the lock and wake one (dc_lock_wake).  A lost
 * wake-up hangs the test, a lock given to two threads at once loses
 * counts or finds another thread inside. */
enum { THREADS = 6, ROUNDS = TEST_TSAN ? 2000 : 20000 };

static struct dc_lock lock;
static long counter;   /* under lock, written without atomics */
static int inside;     /* threads inside, which must be one */
static int overlaps;   /* atomic: times a thread found another inside */

static void *worker(void *arg)
{
	(void)arg;
	for (int i = 0; i < ROUNDS; i++) {
		dc_lock(&lock);
		if (inside++)
			__atomic_add_fetch(&overlaps, 1, __ATOMIC_RELAXED);
		long c = counter;

		if (i % 16 == 0)
			sched_yield();
		counter = c + 1;
		inside--;
		dc_unlock(&lock);
	}
	return NULL;
}

static void excludes_and_wakes(void **state)
{
	pthread_t t[THREADS];

	(void)state;
	dc_lock_init(&lock);
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, worker, NULL), 0);
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	assert_int_equal(overlaps, 0);
	assert_int_equal(counter, (long)THREADS * ROUNDS);
	/* Given back for good: free, and takeable at once. */
	assert_int_equal(__atomic_load_n(&lock.word, __ATOMIC_RELAXED), 0);
	dc_lock(&lock);
	assert_int_equal(__atomic_load_n(&lock.word, __ATOMIC_RELAXED), 1);
	dc_unlock(&lock);
	assert_int_equal(__atomic_load_n(&lock.word, __ATOMIC_RELAXED), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(excludes_and_wakes),
	};

	return RUN_TAP(tests);
}
