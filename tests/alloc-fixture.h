/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* alloc-fixture.h - opening a context on the host or the capacity-limited test device for allocator tests. */
#ifndef DEVCACHE_TEST_ALLOC_FIXTURE_H
#define DEVCACHE_TEST_ALLOC_FIXTURE_H

#include <stdio.h>

#include "alloc.h"

#define MiB ((size_t)1 << 20)

struct fx {
	devcache_ctx_t *ctx;
	devcache_device_t *dev;
	struct allocator *a;
};

/* Open a context with options; device "host", or "good:0" (the test module:
 * 1 GiB that it really enforces, and events a test can hold pending), or
 * "vmm:0" (the same, with virtual memory for expandable segments). */
static inline void fx_open(struct fx *f, const char *device, const char *options)
{
	char opts[4096];
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV,
				     .options = opts};

	/* Blocks left live at close draw a warning; these tests leave some on purpose. */
	snprintf(opts, sizeof opts, "log_level:error,backend_path:%s,backends:good,vmm%s%s", test_env("TEST_MODULES"),
		 options && *options ? "," : "", options ? options : "");
	if (devcache_open_ex(&f->ctx, &args))
		fail_msg("devcache_open_ex(%s): %s", opts, devcache_last_error());
	if (devcache_device_get(f->ctx, device, &f->dev))
		fail_msg("devcache_device_get(%s): %s", device, devcache_last_error());
	f->a = f->dev->alloc;
}

static inline devcache_stats_t fx_stats(struct fx *f)
{
	devcache_stats_t s;

	assert_int_equal(devcache_stats(f->dev, &s), 0);
	return s;
}

static inline void *fx_alloc(struct fx *f, size_t size, devcache_stream_t stream)
{
	void *p = NULL;

	if (devcache_alloc(f->dev, size, stream, &p))
		fail_msg("devcache_alloc(%zu): %s", size, devcache_last_error());
	return p;
}

static inline void fx_free(struct fx *f, void *p)
{
	if (devcache_free(f->dev, p))
		fail_msg("devcache_free(%p): %s", p, devcache_last_error());
}

/* The size of the block the allocator handed out for p. */
static inline size_t fx_block_size(struct fx *f, void *p)
{
	for (struct segment *s = f->a->segments; s; s = s->snext)
		for (struct block *b = s->first; b; b = b->next)
			if (b->addr == (uintptr_t)p)
				return b->size;
	fail_msg("%p is in no segment", p);
	return 0;
}

static inline size_t fx_segment_size(struct fx *f, void *p)
{
	for (struct segment *s = f->a->segments; s; s = s->snext)
		if ((uintptr_t)p >= s->base && (uintptr_t)p < s->base + s->size)
			return s->size;
	fail_msg("%p is in no segment", p);
	return 0;
}

#endif
