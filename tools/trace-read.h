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
/* A file is read in batches of at most this many events. */
#define TRACE_BATCH 16384
/* A file may have at most this many blocks live at once: the reader's
 * memory (about 200 bytes a live block at most) and the replay's pointer
 * table grow with them, never with the length of the file. */
#define TRACE_LIVE_MAX (1u << 20)

/* TRACE_OP_WARMUP_END and TRACE_OP_STEP are marks, comment lines read as
 * events only for a caller that sets trace_set.marks: "# warmup-end",
 * where the warm-up of the traced program ends, and "# step N", where its
 * step N starts (bench/replay counts the device allocations of the steps
 * after the warm-up).  Without marks they are comments, as every other
 * comment line is. */
enum trace_op { TRACE_OP_ALLOC, TRACE_OP_FREE, TRACE_OP_WARMUP_END, TRACE_OP_STEP };

/* IDs are resolved while reading: an allocation names a slot of the
 * replay's pointer table, and its free names the same slot, so the replay
 * needs no lookup.  Slots are reused once freed, so the table is as large
 * as the most blocks live at once. */
struct trace_event {
	uint64_t size;   /* bytes, at least 1; 0 for a free; a step mark: N; 0 for the warm-up mark */
	uint32_t slot;   /* 0 for a mark */
	uint16_t stream; /* allocations: the stream index, 0 the default stream */
	uint8_t op;      /* enum trace_op */
	uint8_t implicit; /* a free the reader added: the block was live at the end of its file */
	uint8_t recorded_oom; /* an allocation that failed in the traced run ("# oom:" before it) */
};

struct trace_reader;

/* A trace is streamed: files are read one after another, each in batches
 * of events that the replay runs before the next batch is read, so that
 * memory follows the blocks live at once and not the length of the file.
 * Every line is checked as it is read; each file's blocks still live at
 * its end are freed there, in the order they were allocated.
 *
 *	trace_set_init(&set);
 *	for each file:
 *		trace_set_open(&set, path, err, sizeof err);
 *		while (!(rc = trace_set_next(&set, err, sizeof err)) && set.n_events)
 *			use set.events[0 .. set.n_events - 1];
 *	trace_set_destroy(&set);
 */
struct trace_set {
	bool marks;         /* set by the caller before reading: the marks as events too */
	struct trace_event *events; /* the batch trace_set_next() read */
	size_t n_events;
	size_t n_read;      /* allocations and frees that were lines of the files, every batch so far */
	uint32_t n_slots;   /* the pointer table the replay needs */
	uint32_t live_max;  /* blocks live at once, at most: TRACE_LIVE_MAX */
	unsigned max_stream;
	unsigned n_streams; /* stream indices used, 0 included */
	uint8_t streams_used[(TRACE_STREAM_MAX + 1) / 8]; /* a bit per stream index */
	/* What the files' headers say, read whatever the marks: the memory of
	 * the device the first trace came from ("# device_memory: BYTES"; 0
	 * where none says it), and the allocations that failed there ("# oom:
	 * ... allocate N bytes" followed by the allocation of N bytes tried
	 * again, as trace_from_torch writes them; "# oom:" comments without it
	 * are counted in oom_comments only). */
	uint64_t device_memory;
	size_t recorded_ooms, oom_comments;
	/* the file being read, or the last one */
	const char *path;   /* as given to trace_set_open() */
	size_t first;       /* the file's events before this batch, implicit frees and marks included */
	uint64_t lines;     /* the file's lines read so far */
	size_t n_files;     /* files read to their end */
	/* reading state */
	struct trace_reader *reader;
	uint32_t *free_slots;
	size_t n_free_slots, cap_free_slots;
};

/* Without marks: set->marks stays false unless the caller sets it. */
void trace_set_init(struct trace_set *set);
/* Closes the file being read, if any. */
void trace_set_destroy(struct trace_set *set);

/* Open the trace file at path (kept, not copied: it must outlive the
 * reading), after the previous one was read to its end.  Returns 0, or on
 * failure a DEVCACHE_E* code with a message naming the file in err:
 *   DEVCACHE_ENOENT   the file does not exist;
 *   DEVCACHE_EIO      it cannot be opened, or is not a regular file;
 *   DEVCACHE_ENOMEM   out of memory. */
int trace_set_open(struct trace_set *set, const char *path, char *err, size_t err_size);

/* The next batch of the open file's events into set->events.  Returns 0
 * with set->n_events > 0 for a batch, 0 with set->n_events == 0 once the
 * file was read to its end (the file is closed then), or on failure a
 * DEVCACHE_E* code with a message naming the file (and the line, for a
 * fault in the file) in err:
 *   DEVCACHE_EFORMAT  the file is not a valid trace ("FILE:LINE: ...") or
 *                     not valid gzip data;
 *   DEVCACHE_EIO      it cannot be read;
 *   DEVCACHE_ENOMEM   out of memory.
 * After a failure, set is only fit for trace_set_destroy(). */
int trace_set_next(struct trace_set *set, char *err, size_t err_size);

static inline bool trace_stream_used(const struct trace_set *set, unsigned stream)
{
	return stream <= TRACE_STREAM_MAX && (set->streams_used[stream / 8] >> (stream % 8) & 1);
}

#endif
