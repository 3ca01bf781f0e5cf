/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* replay-run.c - running allocation traces through a device's caching allocator, for devcache replay and devcache tune.
 *
 * The traces are streamed: each batch of events the reader gives is run at
 * once, so that memory follows the blocks live at once, not the length of
 * the files.  Only the batches are timed, not the reading between them.
 */
#include "tool.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "replay-run.h"

void replay_run_init(struct replay_run *rr)
{
	memset(rr, 0, sizeof *rr);
	trace_set_init(&rr->set);
	rr->worst_unused = -1;
}

void replay_run_destroy(struct replay_run *rr)
{
	for (uint32_t s = 0; s < rr->n_ptrs; s++)
		if (rr->ptrs[s])
			devcache_free(rr->dev, rr->ptrs[s]);
	if (rr->streams)
		for (unsigned s = 1; s <= rr->set.max_stream; s++)
			if (rr->streams[s])
				devcache_stream_destroy(rr->dev, rr->streams[s]);
	free(rr->ptrs);
	free(rr->streams);
	rr->ptrs = NULL;
	rr->streams = NULL;
	rr->n_ptrs = 0;
	trace_set_destroy(&rr->set);
}

int replay_trace_failed(struct replay_run *rr, int rc)
{
	tool_error("%s", rr->err);
	/* A bad or missing file is bad input; one that cannot be read, or
	 * memory running out, is a failure at run time. */
	return rc == DEVCACHE_EFORMAT || rc == DEVCACHE_ENOENT ? EXIT_USAGE : EXIT_RUNTIME;
}

/* Streams and pointer slots for the batch just read: what the allocator
 * needs before the batch runs. */
static int prepare_batch(struct replay_run *rr)
{
	const struct trace_set *set = &rr->set;

	if (!rr->streams && !(rr->streams = calloc(TRACE_STREAM_MAX + 1, sizeof *rr->streams))) {
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	if (set->n_slots > rr->n_ptrs) {
		void **ptrs = realloc(rr->ptrs, set->n_slots * sizeof *ptrs);

		if (!ptrs) {
			tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
			return EXIT_RUNTIME;
		}
		memset(ptrs + rr->n_ptrs, 0, (set->n_slots - rr->n_ptrs) * sizeof *ptrs);
		rr->ptrs = ptrs;
		rr->n_ptrs = set->n_slots;
	}
	if (set->n_streams == rr->n_streams)
		return EXIT_OK;
	rr->n_streams = set->n_streams;
	for (unsigned s = 1; s <= set->max_stream; s++)
		if (trace_stream_used(set, s) && !rr->streams[s] &&
		    devcache_stream_create(rr->dev, &rr->streams[s])) {
			tool_error(_("cannot create stream %u: %s"), s, devcache_last_error());
			return EXIT_RUNTIME;
		}
	return EXIT_OK;
}

/* Where event i of the batch came from, for a message. */
static void report_failure(const struct replay_run *rr, size_t i, const struct trace_event *ev)
{
	const char *path = rr->set.path;
	size_t n = rr->set.first + i + 1;

	if (ev->op == TRACE_OP_ALLOC)
		tool_error(_("%s: event %zu: allocating %llu bytes failed: %s"), path, n,
			   (unsigned long long)ev->size, devcache_last_error());
	else
		tool_error(_("%s: event %zu: freeing failed: %s"), path, n, devcache_last_error());
}

/* The fragmentation now, kept where the cache holds the most unused
 * memory so far. */
static void sample(struct replay_run *rr)
{
	devcache_stats_t st;

	if (devcache_stats(rr->dev, &st) != 0)
		return;
	int64_t unused = st.reserved_bytes[DEVCACHE_POOL_ALL].current -
			 st.allocated_bytes[DEVCACHE_POOL_ALL].current;
	if (unused > rr->worst_unused) {
		rr->worst_unused = unused;
		rr->worst_fragmentation = st.fragmentation;
	}
}

/* The timed part: every event of the batch, nothing else (but the
 * samples, where asked for). */
static int run_batch(struct replay_run *rr)
{
	const struct trace_event *events = rr->set.events;
	const size_t n = rr->set.n_events;
	devcache_device_t *dev = rr->dev;
	devcache_stream_t *streams = rr->streams;
	void **ptrs = rr->ptrs;
	uint64_t operations = 0, ooms = 0, recorded_failed = 0;
	struct timespec t0, t1;
	int rc = 0;
	size_t i;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < n; i++) {
		const struct trace_event *ev = &events[i];

		if (ev->op == TRACE_OP_ALLOC) {
			operations++;
			rc = devcache_alloc(dev, ev->size, streams[ev->stream], &ptrs[ev->slot]);
			if (rc == DEVCACHE_ENOMEM) {
				ptrs[ev->slot] = NULL; /* its free is skipped */
				ooms++;
				recorded_failed += ev->recorded_oom;
				rc = 0;
				if (rr->sample_every)
					sample(rr);
			} else if (rc) {
				ptrs[ev->slot] = NULL;
				break;
			}
		} else if (ev->op == TRACE_OP_FREE && ptrs[ev->slot]) {
			operations++;
			rc = devcache_free(dev, ptrs[ev->slot]);
			ptrs[ev->slot] = NULL;
			if (rc)
				break;
		}
		if (rr->sample_every && ++rr->since_sample >= rr->sample_every) {
			rr->since_sample = 0;
			sample(rr);
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	rr->operations += operations;
	rr->ooms += ooms;
	rr->recorded_failed += recorded_failed;
	rr->ns += (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u + (uint64_t)t1.tv_nsec -
		  (uint64_t)t0.tv_nsec;
	if (rc) {
		report_failure(rr, i, &events[i]);
		return EXIT_RUNTIME;
	}
	return EXIT_OK;
}

int replay_run_file(struct replay_run *rr, bool have_batch)
{
	int rc = 0, status;

	if (have_batch && rr->set.n_events &&
	    ((status = prepare_batch(rr)) || (status = run_batch(rr))))
		return status;
	if (have_batch && !rr->set.n_events)
		return EXIT_OK; /* read to its end */
	while (!(rc = trace_set_next(&rr->set, rr->err, sizeof rr->err)) && rr->set.n_events)
		if ((status = prepare_batch(rr)) || (status = run_batch(rr)))
			return status;
	return rc ? replay_trace_failed(rr, rc) : EXIT_OK;
}
