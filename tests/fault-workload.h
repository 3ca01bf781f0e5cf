/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fault-workload.h - one run of the fault matrices' workload, with one vendor call failing or none. */
#ifndef DEVCACHE_TEST_FAULT_WORKLOAD_H
#define DEVCACHE_TEST_FAULT_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>

#include <devcache.h>

#include "fault-matrix.h"

/* Whether a matrix's loads run on more than one thread: then the calls
 * that wait (an event's query or synchronisation) and the ones a new
 * thread makes first (cuCtxSetCurrent) vary in number from run to run,
 * and only the functions called as often in three clean runs are failed
 * (the one-worker matrices fail the others); which thread meets the
 * fault varies, which is the point.  Even those may be called less often
 * in a run where the threads meet otherwise: a fault that does not strike
 * leaves a clean run, counted as missed, and most must strike. */
bool threaded(const char *options);

/* The fake's controls: fake_<vendor>_fail, _calls, _function, _live,
 * _misuses, and where the vendor has contexts, _context_current. */
struct fake {
	void *lib;
	void (*inject)(const char *, unsigned, int);
	unsigned long (*calls)(const char *);
	const char *(*function)(unsigned);
	size_t (*live)(void);
	unsigned long (*misuses)(const char *);
	void (*context_current)(int);
};

/* Or'ed into a fault's nth: every call from the nth on fails (fake-controls.h). */
#define FAIL_ON 0x80000000u

/* What one run saw. */
struct run {
	const struct vendor *v;
	const char *options;
	struct fake *f;
	const char *function; /* the fault: the nth call from calls0 of function fails */
	unsigned nth;
	unsigned long calls0;
	const char *fired_in; /* the step in which it did, once it did */
	char label[128];     /* the fault, for messages: "cuMemAlloc_v2 #3 failing" */
	const char *step;    /* the step that failed, or NULL */
	int rc;
	char error[1024];    /* its detail message */
	char expected[2048]; /* the messages of the calls that were to fail, and did */
	char log[8192];      /* what the library logged, one message a line */
	size_t log_len;
};

/* The backend module, from the directories of TEST_BACKENDS, held loaded
 * while its matrix runs: the contexts then find it mapped.  NULL if it is
 * not built. */
void *backend_hold(const char *name);
/* The fake's controls into f: false if it cannot be loaded or lacks one. */
bool fake_controls(const struct vendor *v, struct fake *f);
/* One run from a fresh context, with the nth call of function failing
 * (function NULL: none). */
void one_run(struct run *r, const char *function, unsigned nth);

#endif
