/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* interpose.h - the test executable's own malloc, pread and pthread_create: count the library's calls, fail the Nth, find what it leaks. */
#ifndef DEVCACHE_TEST_INTERPOSE_H
#define DEVCACHE_TEST_INTERPOSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/*
 * A program linked with tests/interpose.c defines malloc, calloc, realloc,
 * reallocarray, aligned_alloc, posix_memalign, memalign, free, strdup,
 * strndup, asprintf, vasprintf, pread (and the names _FORTIFY_SOURCE gives
 * it), preadv, read and pthread_create itself; the library,
 * linked into the same executable, and every shared object (libc, json-c,
 * the backend modules) call these, which forward to the next definition
 * (dlsym RTLD_NEXT).  Calls are counted, and can fail, only while the
 * window is open: the test opens it around each library call and makes no
 * call of its own (cmocka's included) inside it.
 *
 * Under AddressSanitizer or ThreadSanitizer the allocation functions are
 * the sanitizer's and are left alone (ip_have_alloc() is false; the
 * sanitizer finds the leaks); reads and thread creation are still
 * interposed, forwarding to the sanitizer's interceptors.
 */

enum ip_kind {
	IP_ALLOC,  /* malloc, calloc, realloc, aligned_alloc, posix_memalign, strdup... */
	IP_READ,   /* pread, preadv, read */
	IP_THREAD, /* pthread_create */
	IP_KINDS
};

/* What the armed call does instead: an allocation returns NULL (errno
 * ENOMEM), a thread is not created (EAGAIN); a read fails with err, or,
 * with err 0, is short: it returns about half of what it read (at least 1
 * byte, whole 4 KiB blocks when it read 8 KiB or more), the buffer past
 * that scribbled over. */
struct ip_fault {
	enum ip_kind kind;
	unsigned long nth;  /* the nth counted call of that kind (1: the first) */
	int err;            /* a read's errno; 0: a short read */
	bool from_nth;      /* every call from the nth on, not the nth alone */
};

/* False where a sanitizer owns the allocation functions. */
bool ip_have_alloc(void);
/* The object (executable or shared library) holding addr makes
 * allocations that are neither counted nor failed, only followed for
 * leaks: json-c 0.16 crashes when some of its own fail.  False when addr
 * is in no object. */
bool ip_spare(const void *addr);
/* Open or close the window. */
void ip_window(bool open);
/* Zero the counts and the fired flag, and disarm. */
void ip_reset(void);
void ip_arm(const struct ip_fault *f);
void ip_disarm(void);
/* Calls of a kind counted since ip_reset(), and whether the armed fault
 * has struck (how many times). */
unsigned long ip_calls(enum ip_kind kind);
unsigned long ip_fired(void);
/* The file (its /proc/self/fd link) of the last read that a fault struck. */
const char *ip_fired_file(void);

/* Leaks: blocks allocated while the window was open and not freed since.
 * ip_forget() stops following the ones there are; ip_leaks() counts those
 * allocated by the executable (the library), json-c or a module that has
 * been unloaded since (a backend), leaving out libc's own (dlerror's
 * message, a thread's TLS), and writes each (size and the caller's
 * address, with its object and symbol where dladdr finds them) to out when
 * out is not NULL.  (asprintf and strdup are interposed so that their
 * blocks count as their caller's.) */
void ip_forget(void);
size_t ip_leaks(FILE *out);
/* More blocks were live at once than the table holds: leaks can be missed. */
bool ip_overflowed(void);

#endif
