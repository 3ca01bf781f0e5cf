/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fault-matrix.h - a workload run on a fake runtime once per vendor call it makes, that call failing. */
#ifndef DEVCACHE_TEST_FAULT_MATRIX_H
#define DEVCACHE_TEST_FAULT_MATRIX_H

#include <stddef.h>

/*
 * The workload (open, allocate on two streams, read the free memory from
 * this thread and from a new one, copy under a context of the program's
 * own where the vendor has contexts, ask for more than the device has,
 * load a sharded set, load a model partly and move its tensors, evict to
 * RAM and reload from there, evict everything, empty the caches, close)
 * is run clean to count the calls it makes of every function the fake
 * exports, twice, to see that the counts hold; then, from a fresh context
 * each time, once for every call: the Nth call of function F fails, for
 * every F and every N up to F's count.  One loader thread keeps the calls
 * in one order; the matrices with two load workers fail the functions
 * whose counts do not vary, met by whichever thread comes to them.  The calls that only describe an error fail in a pass of
 * their own, with each F's first call.  A last test reads the backend's
 * source for the vendor functions it calls, and fails if one is failed
 * by no matrix: a new call site needs a step that reaches it.
 *
 * A run must either fail a step with an error that names F, or go on
 * with every byte right: saying so in a log message that names F (what
 * fails while the context closes can only be said so), or silently where
 * the library may (the tolerated lists of struct vendor say why).  After a failure
 * the same context must load a model byte-exact.  Once it is closed, the
 * fake must hold no more objects than before, but for what a refused
 * release leaves (the object, and what holds it), and must have refused
 * no call as a misuse (an unknown handle, a double free, a bad argument).
 *
 * TEST_FAULT_ONLY=FUNCTION:N runs that one fault alone, with its messages.
 *
 * tests/fault-workload.c runs the workload once, tests/fault-matrix.c runs
 * the matrices and checks the rules; each backend's program,
 * tests/test-fault-matrix-BACKEND.c, holds its vendor's tables (struct
 * vendor), its matrices and their tests.
 */

/* A call whose failure the library tolerates without a word, and why:
 * function failing in step (NULL: in any). */
struct tolerated {
	const char *function;
	const char *step;
	const char *why;
};

struct vendor {
	const char *backend; /* "cuda" */
	const char *device;  /* "cuda:0" */
	const char *fake;    /* the fake runtime, in TEST_FAKES */
	/* What every injected failure returns: a fault any call may report
	 * once the device has failed (an illegal address, or a lost device). */
	int code;
	const struct tolerated *tolerated;
	/* Calls that give an object back: failing, they leave it with the
	 * runtime, and the library can only say so. */
	const char *const *releases;
	size_t cascade; /* the most objects one refused release can leave */
	/* Called only to describe another call's failure: failed, in a pass
	 * of their own, together with each function of the workload. */
	const char *const *describers;
	/* Called by the backend, and never failed here: why each cannot be. */
	const struct tolerated *unfailed;
};

/* Why a block used on another stream may be freed without an event. */
#define WAITS "the allocator, with no event to record on the other stream, waits for it instead"

/* Nothing tolerated, no describers: for a vendor that has none. */
extern const struct tolerated none[];
extern const char *const no_describers[];

/* The vendors of the program's backend (a backend may run on several fake
 * runtimes), defined by each tests/test-fault-matrix-BACKEND.c; the first
 * of a backend keeps what the matrices of all its runtimes covered. */
enum { MAX_VENDORS = 4 };
extern const struct vendor vendors[];
extern const size_t n_vendors;

/* One matrix: a vendor, and the options that choose the allocator's paths.
 * Expandable segments map pages where plain ones allocate: other calls,
 * other error paths; two load workers meet the faults on either thread
 * (threaded(), tests/fault-workload.h). */
struct matrix {
	const struct vendor *v;
	const char *options; /* appended to the context's */
};

/* Every call of the workload on mx's fake runtime failed in turn: a
 * test's body, skipped where the backend or the fake is not built. */
void fault_matrix(const struct matrix *mx);

/* The test of each matrix (name, index in the program's matrices[]), run
 * with setup() and teardown(), which write the models the workload loads. */
#define MATRIX(name, i)                                                                            \
	static void name(void **state)                                                             \
	{                                                                                          \
		(void)state;                                                                       \
		fault_matrix(&matrices[i]);                                                        \
	}
int setup(void **state);
int teardown(void **state);

/* The last test of each program: every vendor function that the backend's
 * source calls is failed in one of the matrices run before it. */
void every_call_site_of_the_backend_is_failed(void **state);

/* Small fake devices, set before any test runs. */
void small_devices(void);

#endif
