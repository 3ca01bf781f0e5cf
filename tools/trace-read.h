/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* trace-read.h - reading allocation traces (devcache-trace(5)), plain or gzip-compressed, for replay. */
#ifndef DEVCACHE_TRACE_READ_H
#define DEVCACHE_TRACE_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Stream indices go up to this. */
#define TRACE_STREAM_MAX 65535
/* A line, its newline included, is at most this long. */
#define TRACE_LINE_MAX 1024

enum trace_op { TRACE_OP_ALLOC, TRACE_OP_FREE };

/* IDs are resolved while reading: an allocation names a slot of the
 * replay's pointer table, and its free names the same slot, so the replay
 * needs no lookup.  Slots are reused once freed, so the table is as large
 * as the most blocks live at once. */
struct trace_event {
	uint64_t size;   /* bytes, at least 1; 0 for a free */
	uint32_t slot;
	uint16_t stream; /* allocations: the stream index, 0 the default stream */
	uint8_t op;      /* enum trace_op */
	uint8_t implicit; /* a free the reader added: the block was live at the end of its file */
};

struct trace_file {
	char *path;
	size_t first, count; /* its events in trace_set.events, implicit frees included */
	size_t lines;
};

/* The events of every file read, one file after another; each file's
 * blocks still live at its end are freed there, in the order they were
 * allocated. */
struct trace_set {
	struct trace_event *events;
	size_t n_events, cap_events;
	size_t n_read;      /* events that were lines of the files */
	uint32_t n_slots;   /* the pointer table the replay needs */
	unsigned max_stream;
	uint8_t streams_used[(TRACE_STREAM_MAX + 1) / 8]; /* a bit per stream index */
	struct trace_file *files;
	size_t n_files;
	/* reading state */
	uint32_t *free_slots;
	size_t n_free_slots, cap_free_slots;
};

void trace_set_init(struct trace_set *set);
void trace_set_destroy(struct trace_set *set);

/* Append the events of the trace file at path.  Returns 0, or on failure a
 * DEVCACHE_E* code with a message naming the file (and the line, for a
 * fault in the file) in err:
 *   DEVCACHE_EFORMAT  the file is not a valid trace ("FILE:LINE: ...") or
 *                     not valid gzip data;
 *   DEVCACHE_ENOENT   the file does not exist;
 *   DEVCACHE_EIO      it cannot be opened or read;
 *   DEVCACHE_ENOMEM   out of memory.
 * After a failure, set is only fit for trace_set_destroy(). */
int trace_set_read(struct trace_set *set, const char *path, char *err, size_t err_size);

static inline bool trace_stream_used(const struct trace_set *set, unsigned stream)
{
	return stream <= TRACE_STREAM_MAX && (set->streams_used[stream / 8] >> (stream % 8) & 1);
}

#endif
