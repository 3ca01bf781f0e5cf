/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* alloc-stats.c - the allocator's statistics (PyTorch's memory_stats), their resets, and the JSON snapshot. */
#include "alloc.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#define EACH_STAT_ARRAY(X)                                                                      \
	X(allocation) X(segment) X(active) X(inactive_split) X(allocated_bytes) X(reserved_bytes) \
	X(active_bytes) X(inactive_split_bytes) X(requested_bytes)

/* A stat as it is kept (alloc.h: freed holds current at the last reset)
 * made what the user reads. */
static void stat_public(devcache_stat_t *s)
{
	s->freed = s->allocated - s->current + s->freed;
}

/* The ALL entry of an array: its peak as kept, the rest the pools' sums. */
static void array_public(devcache_stat_t *array)
{
	devcache_stat_t *all = &array[DEVCACHE_POOL_ALL];

	stat_public(&array[DEVCACHE_POOL_SMALL]);
	stat_public(&array[DEVCACHE_POOL_LARGE]);
	all->current = array[DEVCACHE_POOL_SMALL].current + array[DEVCACHE_POOL_LARGE].current;
	all->allocated = array[DEVCACHE_POOL_SMALL].allocated + array[DEVCACHE_POOL_LARGE].allocated;
	all->freed = array[DEVCACHE_POOL_SMALL].freed + array[DEVCACHE_POOL_LARGE].freed;
}

/* What the thread caches add, added to the kept figures.  With several
 * threads, a block that one thread's cache holds as freed counts as
 * allocated in the peaks that the others' calls raise; a peak below what
 * is read now is raised to it, in the copy and in the figures kept. */
static void add_extra(struct allocator *a, devcache_stats_t *out, const devcache_stats_t *extra)
{
#define ADD_ARRAY(name)                                                                         \
	for (int p = DEVCACHE_POOL_SMALL; p <= DEVCACHE_POOL_LARGE; p++) {                     \
		out->name[p].current += extra->name[p].current;                                \
		out->name[p].allocated += extra->name[p].allocated;                            \
		if (out->name[p].current > out->name[p].peak)                                  \
			a->stats.name[p].peak = out->name[p].peak = out->name[p].current;      \
	}                                                                                      \
	if (stats_current(out->name) > out->name[DEVCACHE_POOL_ALL].peak)                      \
		a->stats.name[DEVCACHE_POOL_ALL].peak = out->name[DEVCACHE_POOL_ALL].peak =    \
			stats_current(out->name);
	EACH_STAT_ARRAY(ADD_ARRAY)
#undef ADD_ARRAY
}

/* One stat of the SMALL or LARGE pool, or the oversize ones. */
static void fold_stat(devcache_stat_t *s, const devcache_stat_t *d)
{
	if (s->current + d->peak > s->peak)
		s->peak = s->current + d->peak;
	s->current += d->current;
	s->allocated += d->allocated;
}

void stats_fold(devcache_stats_t *s, devcache_stats_t *d)
{
	/* A thread's differences keep no active figures: they are
	 * allocation's (alloc.c, keeps_active). */
	memcpy(d->active, d->allocation, sizeof d->active);
	memcpy(d->active_bytes, d->allocated_bytes, sizeof d->active_bytes);
#define FOLD_ARRAY(name)                                                                        \
	if (stats_current(s->name) + d->name[DEVCACHE_POOL_ALL].peak >                         \
	    s->name[DEVCACHE_POOL_ALL].peak)                                                   \
		s->name[DEVCACHE_POOL_ALL].peak =                                              \
			stats_current(s->name) + d->name[DEVCACHE_POOL_ALL].peak;              \
	fold_stat(&s->name[DEVCACHE_POOL_SMALL], &d->name[DEVCACHE_POOL_SMALL]);              \
	fold_stat(&s->name[DEVCACHE_POOL_LARGE], &d->name[DEVCACHE_POOL_LARGE]);
	EACH_STAT_ARRAY(FOLD_ARRAY)
#undef FOLD_ARRAY
	fold_stat(&s->oversize_allocations, &d->oversize_allocations);
	fold_stat(&s->oversize_segments, &d->oversize_segments);
	memset(d, 0, sizeof *d);
}

void allocator_stats(struct allocator *a, devcache_stats_t *out)
{
	size_t largest = 0;
	devcache_stats_t extra;

	world_lock(a);
	/* The blocks of threads that have ended are freed first, so that
	 * the figures and the blocks agree once the threads are done. */
	tcache_reap(a);
	tcache_fold_all(a);
	*out = a->stats;
	tcache_extra(a, &extra);
	add_extra(a, out, &extra);
	largest = extra.largest_free_block;
	for (size_t i = 0; i < a->n_pools; i++) {
		size_t s = index_largest(&a->pools[i]->small), l = index_largest(&a->pools[i]->large);

		largest = s > largest ? s : largest;
		largest = l > largest ? l : largest;
	}
	world_unlock(a);
#define ARRAY_PUBLIC(name) array_public(out->name);
	EACH_STAT_ARRAY(ARRAY_PUBLIC)
#undef ARRAY_PUBLIC
	stat_public(&out->oversize_allocations);
	stat_public(&out->oversize_segments);
	out->largest_free_block = largest;
	int64_t reserved = out->reserved_bytes[DEVCACHE_POOL_ALL].current;
	int64_t allocated = out->allocated_bytes[DEVCACHE_POOL_ALL].current;
	/* External fragmentation: the share of the cached free memory that lies
	 * outside its largest block.  One free block, however large, is 0;
	 * free memory in many small blocks, where a large request fits in none,
	 * comes near 1.  devcache replay, devcache tune and the summary use it. */
	int64_t cached_free = reserved - allocated;
	out->fragmentation = cached_free > 0 && largest < (uint64_t)cached_free
				     ? 1.0 - (double)largest / (double)cached_free
				     : 0.0;
	out->max_split_size = a->max_split_size == SIZE_MAX ? -1 : (int64_t)a->max_split_size;
}

int devcache_stats(devcache_device_t *dev, devcache_stats_t *stats)
{
	if (!dev || !stats)
		return err_set(DEVCACHE_EINVAL, _("devcache_stats: NULL argument"));
	allocator_stats(dev->alloc, stats);
	return 0;
}

int devcache_host_stats(devcache_device_t *dev, devcache_stats_t *stats)
{
	if (!dev || !stats)
		return err_set(DEVCACHE_EINVAL, _("devcache_host_stats: NULL argument"));
	allocator_stats(dev->pinned, stats);
	return 0;
}

/* A reset as the stats are kept (alloc.h): a peak starts again from
 * current, the accumulated figures from zero.  x is what the thread
 * caches add to the figures read, which the reset counts in. */
static void reset_stat(devcache_stat_t *s, const devcache_stat_t *x, bool peaks)
{
	if (peaks) {
		s->peak = s->current + x->current;
	} else {
		s->allocated = -x->allocated;
		s->freed = s->current + x->current;
	}
}

static void reset(struct allocator *a, bool peaks)
{
	devcache_stats_t x;

	world_lock(a);
	tcache_flush_own(a);
	tcache_fold_all(a);
	tcache_stop_all(a);
	tcache_extra(a, &x);
	devcache_stats_t *s = &a->stats;
#define RESET_ARRAY(name)                                                                       \
	reset_stat(&s->name[DEVCACHE_POOL_SMALL], &x.name[DEVCACHE_POOL_SMALL], peaks);        \
	reset_stat(&s->name[DEVCACHE_POOL_LARGE], &x.name[DEVCACHE_POOL_LARGE], peaks);        \
	if (peaks)                                                                             \
		s->name[DEVCACHE_POOL_ALL].peak = stats_current(s->name) + stats_current(x.name);
	EACH_STAT_ARRAY(RESET_ARRAY)
#undef RESET_ARRAY
	reset_stat(&s->oversize_allocations, &x.oversize_allocations, peaks);
	reset_stat(&s->oversize_segments, &x.oversize_segments, peaks);
	if (!peaks) {
		s->num_alloc_retries = s->num_ooms = s->num_sync_all_streams = 0;
		s->num_device_alloc = s->num_device_free = 0;
	}
	world_unlock(a);
}

int devcache_reset_peak(devcache_device_t *dev)
{
	if (!dev)
		return err_set(DEVCACHE_EINVAL, _("devcache_reset_peak: NULL device"));
	reset(dev->alloc, true);
	reset(dev->pinned, true);
	return 0;
}

int devcache_reset_accumulated(devcache_device_t *dev)
{
	if (!dev)
		return err_set(DEVCACHE_EINVAL, _("devcache_reset_accumulated: NULL device"));
	reset(dev->alloc, false);
	reset(dev->pinned, false);
	return 0;
}

static const char *block_state(const struct block *b)
{
	if (b->allocated)
		return "active_allocated";
	if (b->unmapped)
		return "unmapped";
	return b->is_free ? "inactive" : "active_pending_free";
}

/* The snapshot is JSON written by json-c, one segment an object of its
 * own, each on a line of its own: a large device's snapshot is never held
 * whole in memory, and a person can still read it line by line. */
#define SNAPSHOT_JSON_FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

/* Add key: value to obj, which takes value; nonzero when memory ran out
 * (value, NULL then too, is not leaked). */
static int put(struct json_object *obj, const char *key, struct json_object *value)
{
	if (!value)
		return -1;
	if (json_object_object_add(obj, key, value)) {
		json_object_put(value);
		return -1;
	}
	return 0;
}

static struct json_object *block_json(const struct block *b)
{
	struct json_object *o = json_object_new_object();

	if (!o || put(o, "address", json_object_new_uint64(b->addr)) ||
	    put(o, "size", json_object_new_uint64(b->size)) ||
	    put(o, "requested_size", json_object_new_uint64(b->allocated ? b->requested : 0)) ||
	    put(o, "state", json_object_new_string(block_state(b)))) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

static struct json_object *segment_json(const struct segment *s)
{
	struct json_object *o = json_object_new_object(), *blocks = NULL;

	if (!o || put(o, "address", json_object_new_uint64(s->base)) ||
	    put(o, "size", json_object_new_uint64(s->size)) ||
	    put(o, "pool", json_object_new_string(s->small ? "small" : "large")) ||
	    put(o, "stream", json_object_new_uint64(s->pool->index)))
		goto err;
	if (s->expandable && (put(o, "expandable", json_object_new_boolean(1)) ||
			      put(o, "mapped", json_object_new_uint64(s->mapped))))
		goto err;
	if (put(o, "blocks", blocks = json_object_new_array()))
		goto err;
	for (const struct block *b = s->first; b; b = b->next) {
		struct json_object *bo = block_json(b);

		if (!bo || json_object_array_add(blocks, bo)) {
			json_object_put(bo);
			goto err;
		}
	}
	return o;
err:
	json_object_put(o);
	return NULL;
}

/* Write the segments as the snapshot's text; nonzero when memory ran out. */
static int write_snapshot(FILE *out, const char *device, struct segment *const *segs, size_t n)
{
	struct json_object *id = json_object_new_string(device);

	if (!id)
		return -1;
	fprintf(out, "{\"device\":%s,\"segments\":[",
		json_object_to_json_string_ext(id, SNAPSHOT_JSON_FLAGS));
	json_object_put(id);
	for (size_t i = 0; i < n; i++) {
		struct json_object *seg = segment_json(segs[i]);
		const char *text = seg ? json_object_to_json_string_ext(seg, SNAPSHOT_JSON_FLAGS) : NULL;

		if (!text) {
			json_object_put(seg);
			return -1;
		}
		fprintf(out, "%s\n %s", i ? "," : "", text);
		json_object_put(seg);
	}
	fprintf(out, "%s]}\n", n ? "\n" : "");
	return 0;
}

/* Segments in address order make the snapshot easy to read. */
static int by_base(const void *x, const void *y)
{
	const struct segment *a = *(struct segment *const *)x, *b = *(struct segment *const *)y;

	return a->base < b->base ? -1 : a->base > b->base;
}

int devcache_snapshot(devcache_device_t *dev, FILE *out)
{
	if (!dev || !out)
		return err_set(DEVCACHE_EINVAL, _("devcache_snapshot: NULL argument"));
	struct allocator *a = dev->alloc;
	size_t n = 0, i = 0;

	world_lock(a);
	tcache_flush_own(a);
	tcache_reap(a);
	for (struct segment *s = a->segments; s; s = s->snext)
		n++;
	struct segment **segs = malloc((n ? n : 1) * sizeof *segs);
	if (!segs) {
		world_unlock(a);
		return err_oom();
	}
	for (struct segment *s = a->segments; s; s = s->snext)
		segs[i++] = s;
	qsort(segs, n, sizeof *segs, by_base);
	int rc = write_snapshot(out, dev->id, segs, n);
	world_unlock(a);
	free(segs);
	if (rc)
		return err_oom();
	return ferror(out) ? err_set(DEVCACHE_EIO, _("devcache_snapshot: write error")) : 0;
}

/* ---- the model cache's share ------------------------------------------------ */

struct seg_share {
	uintptr_t base;
	size_t size;
};

static int by_share_base(const void *x, const void *y)
{
	const struct seg_share *a = x, *b = y;

	return a->base < b->base ? -1 : a->base > b->base;
}

int alloc_share(devcache_device_t *dev, void *const *ptrs, size_t n, uint64_t *allocated_p,
		uint64_t *reserved_p)
{
	struct allocator *a = dev->alloc;
	struct seg_share *segs = malloc((n ? n : 1) * sizeof *segs);
	size_t k = 0;

	*allocated_p = *reserved_p = 0;
	if (!segs)
		return err_oom();
	world_lock(a);
	tcache_flush_own(a);
	for (size_t i = 0; i < n; i++) {
		struct block *b = tcache_lookup(a, (uintptr_t)ptrs[i], false);

		if (!b)
			continue;
		*allocated_p += b->size;
		/* An expandable segment is shared address space: the block's
		 * own pages are its share. */
		if (b->seg->expandable)
			*reserved_p += b->size;
		else
			segs[k++] = (struct seg_share){b->seg->base, b->seg->size};
	}
	world_unlock(a);
	qsort(segs, k, sizeof *segs, by_share_base);
	for (size_t i = 0; i < k; i++)
		if (i == 0 || segs[i].base != segs[i - 1].base)
			*reserved_p += segs[i].size;
	free(segs);
	return 0;
}
