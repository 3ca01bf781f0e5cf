/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fuzz-trace.c - fuzz target: an allocation trace (devcache-trace(5)), plain or gzip-compressed, through devcache replay's reader. */
#include "config.h"

#include "fuzz.h"
#include "trace-read.h"

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                          \
	do {                                                                                 \
		if (!(cond)) {                                                               \
			fprintf(stderr, "%s:%d: the reader accepted a trace where %s is false\n", \
				__FILE__, __LINE__, #cond);                                  \
			abort();                                                             \
		}                                                                            \
	} while (0)

/* What replay relies on: every free names a slot of the table that an
 * allocation before it took, and every block is freed by the end. */
static void check(const struct trace_set *set)
{
	unsigned char *live = calloc(set->n_slots ? set->n_slots : 1, 1);
	size_t n_live = 0;

	if (!live)
		return;
	for (size_t i = 0; i < set->n_events; i++) {
		const struct trace_event *e = &set->events[i];

		CHECK(e->slot < set->n_slots);
		if (e->op == TRACE_OP_ALLOC) {
			CHECK(e->size > 0 && !live[e->slot] && trace_stream_used(set, e->stream));
			live[e->slot] = 1;
			n_live++;
		} else {
			CHECK(e->op == TRACE_OP_FREE && live[e->slot]);
			live[e->slot] = 0;
			n_live--;
		}
	}
	CHECK(n_live == 0);
	free(live);
}

/* The same file twice into one set: replay reads several files one after
 * another. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct trace_set set;
	char err[1024];
	const char *path;

	if (size > FUZZ_MAX_INPUT)
		return -1;
	path = fuzz_path("trace");
	fuzz_write(path, data, size);
	trace_set_init(&set);
	if (trace_set_read(&set, path, err, sizeof err) == 0 &&
	    trace_set_read(&set, path, err, sizeof err) == 0)
		check(&set);
	trace_set_destroy(&set);
	return 0;
}
