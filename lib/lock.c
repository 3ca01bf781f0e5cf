/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lock.c - the slow paths of the allocator's mutex (lock.h): a short spin, then sleeping on a futex. */
#include <config.h>

#include "lock.h"

#include <sched.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* As long as a short critical section takes: the holder is likely to
 * give the lock back before the spin ends, and sleeping costs two
 * system calls. */
enum { SPINS = 100 };

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

static void futex_wait(int *word, int value)
{
#ifdef __linux__
	/* Any return will do: spurious wake-ups, EAGAIN (the word moved) and
	 * EINTR all send the caller round its loop again. */
	syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, value, NULL, NULL, 0);
#else
	(void)word;
	(void)value;
	sched_yield();
#endif
}

void dc_lock_wait(struct dc_lock *l)
{
	for (int i = 0; i < SPINS; i++) {
		cpu_relax();
		int w = 0;

		if (__atomic_load_n(&l->word, __ATOMIC_RELAXED) == 0 &&
		    __atomic_compare_exchange_n(&l->word, &w, 1, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			return;
	}
	/* Held: say that somebody waits (2) and sleep until it is given
	 * back.  Taken this way the word stays 2, so the next unlock wakes
	 * a sleeper even if none is left: one system call too many, never
	 * one too few. */
	while (__atomic_exchange_n(&l->word, 2, __ATOMIC_ACQUIRE) != 0)
		futex_wait(&l->word, 2);
}

/* dc_unlock() found a waiter's 2 and left 1: the lock stays held while
 * the word moves from 2 to 1, so no thread takes it meanwhile and a
 * waiter's exchange keeps asking to be woken; now free, and a sleeper
 * woken. */
void dc_lock_wake(struct dc_lock *l)
{
	__atomic_store_n(&l->word, 0, __ATOMIC_RELEASE);
#ifdef __linux__
	syscall(SYS_futex, &l->word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
#else
	(void)l;
#endif
}
