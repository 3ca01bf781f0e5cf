/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-cache.h - what the model cache's files share: the staging ring's interface and the memory diagnostics. */
#ifndef DEVCACHE_MODEL_CACHE_H
#define DEVCACHE_MODEL_CACHE_H

#include "internal.h"

/* ---- staging.c: streaming file ranges to a device through pinned buffers ---- */

/* A file to read from. */
struct stage_file {
	const char *path; /* for messages */
	int fd;
};

/* A run of bytes to copy from a file to the device.  Items come sorted by
 * file, then by offset, and do not overlap. */
struct stage_item {
	size_t file;     /* index into the files */
	uint64_t offset; /* in the file */
	uint64_t size;
	char *dst;       /* on the device */
};

struct stage_job {
	devcache_device_t *dev;
	const struct stage_file *files;
	size_t n_files;
	const struct stage_item *items;
	size_t n_items;
	devcache_stream_t stream;
	devcache_progress_fn progress; /* called on the calling thread only */
	void *progress_user;
	const char *name;              /* the model, for messages */
	uint64_t bytes_read;           /* out: read from the files */
};

/* Read the items' bytes into a ring of staging_buffers pinned buffers of
 * staging_buffer_size, load_workers threads at once (the caller among them),
 * copying each filled buffer to the device on job->stream; returns once the
 * stream has finished.  0, DEVCACHE_ECANCELED, or an error naming the file. */
int stage_upload(struct stage_job *job);

/* ---- memdiag.c: what log_memory_usage reports ---------------------------------- */

/* The process's resident set, in bytes. */
uint64_t memdiag_rss(void);
/* Bytes of the file (fd, size bytes) in the page cache, by mincore(). */
uint64_t memdiag_cached(int fd, uint64_t size);
/* glibc's heap: arena plus mmapped blocks. */
uint64_t memdiag_heap(void);

#endif
