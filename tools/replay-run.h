/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* replay-run.h - running allocation traces through a device's caching allocator, for devcache replay and devcache tune. */
#ifndef DEVCACHE_REPLAY_RUN_H
#define DEVCACHE_REPLAY_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include <devcache.h>

#include "trace-read.h"

/* One replay: the trace files' events, batch after batch, made again with
 * devcache_alloc() and devcache_free() on dev.
 *
 *	replay_run_init(&rr);
 *	trace_set_open(&rr.set, path, ...);   (and trace_set_next() for a
 *	                                         header read ahead: have_batch)
 *	rr.dev = dev;
 *	replay_run_file(&rr, have_batch);     each file, then the next
 *	replay_run_destroy(&rr);
 */
struct replay_run {
	devcache_device_t *dev;
	struct trace_set set;
	/* Sample the fragmentation every this many events (0: never): tune's
	 * figure at the moment the cache held the most unused memory. */
	uint32_t sample_every;
	/* results */
	uint64_t operations, ooms, ns;
	uint64_t recorded_failed; /* allocations that failed in the traced run and here */
	int64_t worst_unused;     /* the most reserved-but-unallocated memory sampled */
	double worst_fragmentation; /* the fragmentation then */
	char err[1024];
	/* the run's state */
	devcache_stream_t *streams; /* by stream index; [0] is NULL, the default stream */
	unsigned n_streams;         /* stream indices seen to, 0 included */
	void **ptrs;                /* by slot; NULL: free, or the allocation failed */
	uint32_t n_ptrs;
	uint64_t since_sample;
};

void replay_run_init(struct replay_run *rr);
/* Frees what is still allocated, destroys the streams, closes the set. */
void replay_run_destroy(struct replay_run *rr);
/* The open file to its end; its first batch is read already where
 * have_batch says so.  Returns 0, or the exit status after saying why
 * (tool_error): EXIT_USAGE for a fault in the file, EXIT_RUNTIME for a
 * failure other than out of memory. */
int replay_run_file(struct replay_run *rr, bool have_batch);
/* The status for a trace that cannot be read (rc from trace-read.h), after
 * saying why. */
int replay_trace_failed(struct replay_run *rr, int rc);

#endif
