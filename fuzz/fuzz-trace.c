/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fuzz-trace.c - fuzz target: an allocation trace (devcache-trace(5)), plain or gzip-compressed, through the trace reader of devcache replay and bench/replay. */
#include "config.h"

#include <devcache.h>

#include "fuzz.h"
#include "trace-read.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                          \
	do {                                                                                 \
		if (!(cond)) {                                                               \
			fprintf(stderr, "%s:%d: the reader accepted a trace where %s is false\n", \
				__FILE__, __LINE__, #cond);                                  \
			abort();                                                             \
		}                                                                            \
	} while (0)

/* What replay relies on: every free names a slot of the table that an
 * allocation before it took, and every block is freed by the end of its
 * file.  live[] follows the slots from batch to batch.  Marks come only
 * when asked for, and change nothing else: n_ops counts the allocations
 * and frees of a file, the same with marks as without. */
struct seen {
	unsigned char *live;
	uint32_t size;
	size_t n_live;
	size_t n_ops;
};

static void check_batch(const struct trace_set *set, struct seen *seen)
{
	CHECK(set->n_events <= TRACE_BATCH);
	if (set->n_slots > seen->size) {
		unsigned char *live = realloc(seen->live, set->n_slots);

		if (!live)
			abort();
		memset(live + seen->size, 0, set->n_slots - seen->size);
		seen->live = live;
		seen->size = set->n_slots;
	}
	for (size_t i = 0; i < set->n_events; i++) {
		const struct trace_event *e = &set->events[i];

		if (e->op == TRACE_OP_WARMUP_END || e->op == TRACE_OP_STEP) {
			CHECK(set->marks && e->slot == 0 && !e->implicit);
			continue;
		}
		seen->n_ops++;
		CHECK(e->slot < set->n_slots);
		if (e->op == TRACE_OP_ALLOC) {
			CHECK(e->size > 0 && !seen->live[e->slot] && trace_stream_used(set, e->stream));
			seen->live[e->slot] = 1;
			seen->n_live++;
		} else {
			CHECK(e->op == TRACE_OP_FREE && seen->live[e->slot]);
			seen->live[e->slot] = 0;
			seen->n_live--;
		}
	}
}

/* The file at path, batch after batch; 0 or the reader's error. */
static int read_file(struct trace_set *set, const char *path, struct seen *seen)
{
	char err[1024];
	int rc = trace_set_open(set, path, err, sizeof err);

	while (!rc && !(rc = trace_set_next(set, err, sizeof err)) && set->n_events)
		check_batch(set, seen);
	if (!rc)
		CHECK(seen->n_live == 0);
	return rc;
}

/* The same file twice into one set: replay reads several files one after
 * another; the second time with the marks, as bench/replay reads it. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct seen seen = {0};
	struct trace_set set;
	const char *path;

	if (size > FUZZ_MAX_INPUT)
		return -1;
	path = fuzz_path("trace");
	fuzz_write(path, data, size);
	trace_set_init(&set);
	if (read_file(&set, path, &seen) == 0) {
		size_t n_ops = seen.n_ops;
		int rc;

		seen.n_ops = 0;
		set.marks = true;
		rc = read_file(&set, path, &seen);
		CHECK(rc != DEVCACHE_EFORMAT); /* marks never make a trace invalid */
		if (rc == 0)
			CHECK(seen.n_ops == n_ops);
	}
	trace_set_destroy(&set);
	free(seen.live);
	return 0;
}
