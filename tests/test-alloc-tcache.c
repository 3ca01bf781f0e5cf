/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-alloc-tcache.c - thread caches: the same results as taking the lock, and the frees other threads and bad calls make. */
#include "config.h"

#include "tap.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <devcache.h>

#include "alloc-check.h"
#include "arena-base.h"

/* This thread's cache of f's allocator, or NULL before its first hit. */
static struct tcache *own_cache(struct fx *f)
{
	return f->a->tkey_ok ? pthread_getspecific(f->a->tkey) : NULL;
}

static uint64_t redos(struct fx *f)
{
	struct tcache *tc = own_cache(f);

	return tc ? tcache_pairs(tc) : 0;
}

/* A 4 KiB block that this thread's cache holds as allocated: a miss, a
 * free with the lock (which names the size), then a hit, recorded. */
static void *cached_block(struct fx *f, devcache_stream_t stream)
{
	void *p = fx_alloc(f, 4096, stream);

	fx_free(f, p);
	assert_ptr_equal(fx_alloc(f, 4096, stream), p);
	assert_int_equal(tcache_state(own_cache(f)), TC_LIVE);
	return p;
}

/* Every figure of two statistics, one by one, naming the first that differs. */
static void assert_same_stats(const devcache_stats_t *x, const devcache_stats_t *y, size_t step)
{
	static const char *names[] = {"allocation", "segment", "active", "inactive_split",
				      "allocated_bytes", "reserved_bytes", "active_bytes",
				      "inactive_split_bytes", "requested_bytes"};
	const devcache_stat_t *ax[] = {x->allocation,      x->segment,        x->active,
				       x->inactive_split,  x->allocated_bytes, x->reserved_bytes,
				       x->active_bytes,    x->inactive_split_bytes, x->requested_bytes};
	const devcache_stat_t *ay[] = {y->allocation,      y->segment,        y->active,
				       y->inactive_split,  y->allocated_bytes, y->reserved_bytes,
				       y->active_bytes,    y->inactive_split_bytes, y->requested_bytes};

	for (size_t k = 0; k < 9; k++)
		for (int p = 0; p < DEVCACHE_POOL_COUNT; p++) {
			const devcache_stat_t *s = &ax[k][p], *t = &ay[k][p];

			if (s->current != t->current || s->peak != t->peak ||
			    s->allocated != t->allocated || s->freed != t->freed)
				fail_msg("step %zu: %s[%d]: cached %" PRId64 "/%" PRId64 "/%" PRId64
					 "/%" PRId64 ", locked %" PRId64 "/%" PRId64 "/%" PRId64
					 "/%" PRId64 " (current/peak/allocated/freed)",
					 step, names[k], p, s->current, s->peak, s->allocated, s->freed,
					 t->current, t->peak, t->allocated, t->freed);
		}
	assert_int_equal(x->num_device_alloc, y->num_device_alloc);
	assert_int_equal(x->num_device_free, y->num_device_free);
	assert_int_equal(x->num_alloc_retries, y->num_alloc_retries);
	assert_int_equal(x->largest_free_block, y->largest_free_block);
	assert_int_equal(x->oversize_allocations.current, y->oversize_allocations.current);
	assert_int_equal(x->oversize_segments.current, y->oversize_segments.current);
}

enum { SLOTS = 12, STEPS = 20000 };

/* What one run saw after each step. */
struct seen {
	uint64_t place;
	devcache_stats_t stats;
};

/* The calls thread caches serve (a block freed and the same size asked
 * for again) among others, the same for every run, the statistics read
 * after every `every` steps (seen's others are zero); the number of them
 * served without the lock. */
static uint64_t run(const char *options, struct seen *seen, size_t every)
{
	static const size_t sizes[] = {512,	  4096,	      4096,	  4096,	     6000,
				       65536,	  700 * 1024, MiB,	  3 * MiB,   12 * MiB};
	char opts[4096];
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV,
				     .options = opts};
	struct fx f;
	devcache_stream_t streams[2] = {NULL, NULL};
	void *ptr[SLOTS] = {0};
	size_t size[SLOTS] = {0};
	int stream[SLOTS] = {0};
	uint64_t redone = 0;
	unsigned seed = 7;
	int last = 0;
	bool reset = false; /* allocated - freed is current until a reset */

	snprintf(opts, sizeof opts, "log_level:error,backend_path:%s,backends:arena,%s",
		 test_env("TEST_ARENA"), options);
	if (devcache_open_ex(&f.ctx, &args) || devcache_device_get(f.ctx, "arena:0", &f.dev))
		fail_msg("the arena device (%s): %s", opts, devcache_last_error());
	f.a = f.dev->alloc;
	uintptr_t base = arena_base();
	assert_int_equal(devcache_stream_create(f.dev, &streams[1]), 0);
	for (size_t step = 0; step < STEPS; step++) {
		unsigned r = (unsigned)rand_r(&seed);
		int i = (int)(r % SLOTS);

		r /= SLOTS;
		/* Often the block allocated last, as temporaries are. */
		if ((r >> 20) % 3 == 0)
			i = last;
		last = i;
		seen[step].place = 0;
		if (!ptr[i]) {
			size[i] = sizes[r % (sizeof sizes / sizeof *sizes)];
			stream[i] = (r >> 8) % 5 == 0;
		} else {
			fx_free(&f, ptr[i]);
			ptr[i] = NULL;
		}
		/* Mostly the same size again, at once. */
		if (ptr[i] || r % 10 < 6) {
			uint64_t before = redos(&f);
			ptr[i] = fx_alloc(&f, size[i], streams[stream[i]]);
			redone += redos(&f) == before + 1;
			seen[step].place = (uintptr_t)ptr[i] - base;
		}
		/* Now and then what a program does beside. */
		switch ((r >> 12) % 64) {
		case 0:
			assert_int_equal(devcache_empty_cache(f.dev), 0);
			break;
		case 1:
			assert_int_equal(devcache_reset_peak(f.dev), 0);
			break;
		case 2:
			assert_int_equal(devcache_reset_accumulated(f.dev), 0);
			reset = true;
			break;
		default:
			break;
		}
		if (step % every != every - 1)
			continue;
		seen[step].stats = fx_stats(&f);
		const char *why = reset ? NULL : check_stats(&seen[step].stats);
		if (why)
			fail_msg("%s, step %zu: %s", options, step, why);
	}
	for (int i = 0; i < SLOTS; i++)
		fx_free(&f, ptr[i]);
	devcache_stream_destroy(f.dev, streams[1]);
	devcache_close(f.ctx);
	return redone;
}

/* With thread caches and without: the same addresses and the same
 * statistics after every call, and many calls served without the lock. */
static void same_as_locked(void **state)
{
	struct seen *on = calloc(STEPS, sizeof *on), *off = calloc(STEPS, sizeof *off);

	(void)state;
	assert_true(on && off);
	uint64_t redone = run("thread_cache:true", on, 1);
	assert_int_equal(run("thread_cache:false", off, 1), 0);
	for (size_t step = 0; step < STEPS; step++) {
		if (on[step].place != off[step].place)
			fail_msg("step %zu: offset %" PRIu64 " with thread caches, %" PRIu64
				 " without", step, on[step].place, off[step].place);
		assert_same_stats(&on[step].stats, &off[step].stats, step);
	}
	print_message("# %" PRIu64 " of %d steps redone without the lock\n", redone, STEPS);
	assert_true(redone > STEPS / 10);
	free(on);
	free(off);
}

/* The same with the statistics read only now and then: a thread's
 * differences, folded then, hold many calls of both pools, their peaks
 * among them (alloc.c's small pool path leaves the ALL peaks to the end
 * of its run, struct tcache's small_run). */
static void same_peaks_between_reads(void **state)
{
	struct seen *on = calloc(STEPS, sizeof *on), *off = calloc(STEPS, sizeof *off);

	(void)state;
	assert_true(on && off);
	for (size_t every = 7; every <= 1000; every *= 11) {
		memset(on, 0, STEPS * sizeof *on);
		memset(off, 0, STEPS * sizeof *off);
		run("thread_cache:true", on, every);
		run("thread_cache:false", off, every);
		for (size_t step = every - 1; step < STEPS; step += every)
			assert_same_stats(&on[step].stats, &off[step].stats, step);
	}
	free(on);
	free(off);
}

/* Small and large hits of one thread between two reads, on its pool
 * alone: the peaks of ALL count the large blocks held while the small
 * ones rose, after the small ones or before them, as without thread
 * caches. */
static devcache_stats_t mixed_pools(const char *options, bool large_first)
{
	struct fx f;

	fx_open(&f, "good:0", options);
	/* Segments of both pools, and peaks from now on. */
	void *w[3] = {fx_alloc(&f, 4 * MiB, NULL), fx_alloc(&f, 64 * 1024, NULL),
		      fx_alloc(&f, 128 * 1024, NULL)};
	for (int i = 0; i < 3; i++)
		fx_free(&f, w[i]);
	assert_int_equal(devcache_reset_peak(f.dev), 0);
	fx_stats(&f);
	uint64_t locks = f.a->world_locks;
	void *l = large_first ? fx_alloc(&f, 4 * MiB, NULL) : NULL;
	void *s1 = fx_alloc(&f, 64 * 1024, NULL), *s2 = fx_alloc(&f, 128 * 1024, NULL);
	if (!large_first)
		l = fx_alloc(&f, 4 * MiB, NULL);
	fx_free(&f, s1);
	fx_free(&f, l);
	fx_free(&f, s2);
	if (strcmp(options, "thread_cache:true") == 0)
		assert_int_equal(f.a->world_locks, locks); /* each a pool path's */
	devcache_stats_t st = fx_stats(&f);
	devcache_close(f.ctx);
	return st;
}

static void all_peak_across_pools(void **state)
{
	(void)state;
	for (int large_first = 0; large_first < 2; large_first++) {
		devcache_stats_t on = mixed_pools("thread_cache:true", large_first);
		devcache_stats_t off = mixed_pools("thread_cache:false", large_first);

		assert_int_equal(on.allocated_bytes[DEVCACHE_POOL_ALL].peak,
				 (int64_t)(4 * MiB + 192 * 1024));
		assert_same_stats(&on, &off, (size_t)large_first);
	}
}

/* A free, the same request: the same block, without the lock; what the
 * statistics and a snapshot say in between is the free made. */
static void redo_is_counted(void **state)
{
	struct fx f;

	(void)state;
	fx_open(&f, "good:0", NULL);
	void *p = cached_block(&f, NULL);
	assert_int_equal(redos(&f), 0);
	for (int i = 0; i < 100; i++) {
		fx_free(&f, p);
		devcache_stats_t s = fx_stats(&f);
		assert_int_equal(s.allocated_bytes[DEVCACHE_POOL_ALL].current, 0);
		assert_int_equal(s.active[DEVCACHE_POOL_SMALL].current, 0);
		assert_int_equal(s.inactive_split[DEVCACHE_POOL_ALL].current, 0);
		assert_ptr_equal(fx_alloc(&f, 4096, NULL), p);
	}
	assert_int_equal(redos(&f), 100);
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].allocated, 102);
	assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].freed, 101);
	assert_int_equal(s.allocated_bytes[DEVCACHE_POOL_ALL].peak, 4096);
	assert_int_equal(s.num_device_alloc, 1);
	/* Another size: the lock, and the cached free made real first. */
	fx_free(&f, p);
	void *q = fx_alloc(&f, 8192, NULL);
	assert_ptr_equal(q, p);
	assert_int_equal(redos(&f), 0);
	s = fx_stats(&f);
	assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].allocated, 103);
	assert_int_equal(s.allocated_bytes[DEVCACHE_POOL_ALL].current, 8192);
	/* The peaks reset with a block cached as freed: the redo counts. */
	fx_free(&f, q);
	q = fx_alloc(&f, 8192, NULL);
	fx_free(&f, q);
	assert_int_equal(devcache_reset_peak(f.dev), 0);
	assert_int_equal(fx_stats(&f).allocated_bytes[DEVCACHE_POOL_ALL].peak, 0);
	q = fx_alloc(&f, 8192, NULL);
	assert_int_equal(fx_stats(&f).allocated_bytes[DEVCACHE_POOL_ALL].peak, 8192);
	/* empty_cache gives the segment back once the block is freed. */
	fx_free(&f, q);
	assert_int_equal(devcache_empty_cache(f.dev), 0);
	assert_int_equal(fx_stats(&f).reserved_bytes[DEVCACHE_POOL_ALL].current, 0);
	devcache_close(f.ctx);
}

/* Freeing a cached block again is the error it always was. */
static void double_free(void **state)
{
	struct fx f;

	(void)state;
	fx_open(&f, "good:0", NULL);
	void *p = cached_block(&f, NULL);
	fx_free(&f, p);
	assert_int_equal(tcache_state(own_cache(&f)), TC_CACHED);
	assert_int_equal(devcache_free(f.dev, p), DEVCACHE_EINVAL);
	assert_non_null(strstr(devcache_last_error(), "freed already"));
	assert_int_equal(devcache_record_stream(f.dev, p, NULL), DEVCACHE_EINVAL);
	assert_int_equal(fx_stats(&f).allocation[DEVCACHE_POOL_ALL].current, 0);
	devcache_close(f.ctx);
}

struct other {
	struct fx *f;
	devcache_stream_t stream;
	void *p;
	int rc;
	char why[256];
};

static void *other_free(void *arg)
{
	struct other *o = arg;

	o->rc = devcache_free(o->f->dev, o->p);
	snprintf(o->why, sizeof o->why, "%s", o->rc ? devcache_last_error() : "");
	return NULL;
}

static void *other_alloc_free(void *arg)
{
	struct other *o = arg;
	void *q;

	/* A hit, cached as freed, and the thread ends with it so. */
	for (int i = 0; i < 3; i++) {
		if ((o->rc = devcache_alloc(o->f->dev, 4096, NULL, &q)))
			return NULL;
		if ((o->rc = devcache_free(o->f->dev, q)))
			return NULL;
	}
	o->p = q;
	return NULL;
}

/* Blocks that threads hand each other: another thread may free a block
 * a cache holds as allocated, not one it holds as freed; a thread that
 * ends leaves its freed block to the allocator. */
static void other_threads(void **state)
{
	struct fx f;
	pthread_t t;

	(void)state;
	fx_open(&f, "good:0", NULL);
	void *p = cached_block(&f, NULL);

	struct other o = {.f = &f, .p = p};
	assert_int_equal(pthread_create(&t, NULL, other_free, &o), 0);
	pthread_join(t, NULL);
	assert_int_equal(o.rc, 0);
	assert_int_equal(tcache_state(own_cache(&f)), TC_NONE);
	assert_int_equal(fx_stats(&f).allocation[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(devcache_free(f.dev, p), DEVCACHE_EINVAL);

	p = fx_alloc(&f, 4096, NULL);
	fx_free(&f, p);
	assert_int_equal(tcache_state(own_cache(&f)), TC_CACHED);
	o = (struct other){.f = &f, .p = p};
	assert_int_equal(pthread_create(&t, NULL, other_free, &o), 0);
	pthread_join(t, NULL);
	assert_int_equal(o.rc, DEVCACHE_EINVAL);
	assert_non_null(strstr(o.why, "freed already"));

	/* Redone here after all: the other thread changed nothing. */
	assert_ptr_equal(fx_alloc(&f, 4096, NULL), p);
	fx_free(&f, p);

	o = (struct other){.f = &f};
	assert_int_equal(pthread_create(&t, NULL, other_alloc_free, &o), 0);
	pthread_join(t, NULL);
	assert_int_equal(o.rc, 0);
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(s.active_bytes[DEVCACHE_POOL_ALL].current, 0);
	const char *why = check_stats(&s);
	if (why)
		fail_msg("%s", why);
	/* The ended thread's block is made free by the release. */
	assert_int_equal(devcache_empty_cache(f.dev), 0);
	assert_int_equal(fx_stats(&f).reserved_bytes[DEVCACHE_POOL_ALL].current, 0);
	devcache_close(f.ctx);
}

static void *other_alloc(void *arg)
{
	struct other *o = arg;

	o->rc = devcache_alloc(o->f->dev, 4096, o->stream, &o->p);
	return NULL;
}

/* Another thread's call that changes the pool: the owner's next request
 * takes the lock and sees the pool as it is; one on another stream
 * leaves the pool and the redo as they were. */
static void other_thread_changes_pool(void **state)
{
	struct fx f;
	pthread_t t;
	devcache_stream_t s2;

	(void)state;
	fx_open(&f, "good:0", NULL);
	assert_int_equal(devcache_stream_create(f.dev, &s2), 0);
	void *p = cached_block(&f, NULL);
	fx_free(&f, p);
	assert_int_equal(tcache_state(own_cache(&f)), TC_CACHED);

	struct other o = {.f = &f};
	assert_int_equal(pthread_create(&t, NULL, other_alloc, &o), 0);
	pthread_join(t, NULL);
	assert_int_equal(o.rc, 0);
	assert_ptr_not_equal(o.p, p);
	uint64_t before = redos(&f);
	assert_ptr_equal(fx_alloc(&f, 4096, NULL), p);
	assert_int_equal(redos(&f), 0);
	assert_true(before == 0 || before == 1);
	assert_int_equal(tcache_state(own_cache(&f)), TC_LIVE); /* recorded afresh */
	assert_int_equal(devcache_free(f.dev, o.p), 0);

	/* Another thread on another stream: the redo goes on. */
	fx_free(&f, p);
	p = fx_alloc(&f, 4096, NULL);
	fx_free(&f, p);
	o = (struct other){.f = &f, .stream = s2};
	assert_int_equal(pthread_create(&t, NULL, other_alloc, &o), 0);
	pthread_join(t, NULL);
	assert_int_equal(o.rc, 0);
	assert_ptr_equal(fx_alloc(&f, 4096, NULL), p);
	assert_int_equal(redos(&f), 1);
	assert_int_equal(devcache_free(f.dev, o.p), 0);
	devcache_stream_destroy(f.dev, s2);
	fx_free(&f, p);
	devcache_close(f.ctx);
}

/* Statistics read while this thread's cache holds its block as freed and
 * another thread has since taken the rest of the block the allocation cut:
 * the cached free is counted as it would be made now, next to the other
 * thread's block, not as the pool was when it was recorded (which counted
 * the rest as merged with it, and read inactive_split_bytes below 0). */
static void stats_after_another_thread_changed_the_pool(void **state)
{
	struct fx f;
	pthread_t t;
	int64_t seg;

	(void)state;
	fx_open(&f, "good:0", NULL);
	void *p = cached_block(&f, NULL);
	fx_free(&f, p);
	assert_int_equal(tcache_state(own_cache(&f)), TC_CACHED);
	seg = fx_stats(&f).reserved_bytes[DEVCACHE_POOL_ALL].current;

	struct other o = {.f = &f};
	assert_int_equal(pthread_create(&t, NULL, other_alloc, &o), 0);
	pthread_join(t, NULL);
	assert_int_equal(o.rc, 0);
	/* One segment: the cached block (free), the other's, the rest (free). */
	devcache_stats_t cached = fx_stats(&f);
	assert_int_equal(cached.reserved_bytes[DEVCACHE_POOL_ALL].current, seg);
	assert_int_equal(cached.allocation[DEVCACHE_POOL_ALL].current, 1);
	assert_int_equal(cached.inactive_split[DEVCACHE_POOL_ALL].current, 2);
	assert_int_equal(cached.inactive_split_bytes[DEVCACHE_POOL_ALL].current, seg - 4096);
	const char *why = check_stats(&cached);
	if (why)
		fail_msg("%s", why);
	/* The same once the free is made, with the lock. */
	assert_int_equal(devcache_empty_cache(f.dev), 0);
	devcache_stats_t made = fx_stats(&f);
	assert_int_equal(tcache_state(own_cache(&f)), TC_NONE);
	for (int k = DEVCACHE_POOL_ALL; k < DEVCACHE_POOL_COUNT; k++) {
		assert_int_equal(made.inactive_split[k].current, cached.inactive_split[k].current);
		assert_int_equal(made.inactive_split[k].allocated, cached.inactive_split[k].allocated);
		assert_int_equal(made.inactive_split_bytes[k].current,
				 cached.inactive_split_bytes[k].current);
		assert_int_equal(made.inactive_split_bytes[k].allocated,
				 cached.inactive_split_bytes[k].allocated);
		assert_int_equal(made.allocated_bytes[k].current, cached.allocated_bytes[k].current);
	}
	assert_int_equal(made.largest_free_block, cached.largest_free_block);
	assert_int_equal(devcache_free(f.dev, o.p), 0);
	devcache_close(f.ctx);
}

/* A block used on another stream is freed with the lock, to wait for it. */
static void record_stream(void **state)
{
	struct fx f;
	devcache_stream_t s2;

	(void)state;
	fx_open(&f, "good:0", NULL);
	assert_int_equal(devcache_stream_create(f.dev, &s2), 0);
	void *p = cached_block(&f, NULL);
	assert_int_equal(devcache_record_stream(f.dev, p, s2), 0);
	assert_int_equal(tcache_state(own_cache(&f)), TC_NONE);
	fx_free(&f, p);
	assert_int_equal(tcache_state(own_cache(&f)), TC_NONE);
	devcache_stream_destroy(f.dev, s2);
	devcache_close(f.ctx);
}

/* Records that no redo uses back off: after TC_WASTED in a row a thread
 * records one hit in TC_SKIP + 1, and a loop that frees its block and
 * asks for it again is redone once more, at most TC_SKIP calls late. */
static void records_back_off(void **state)
{
	struct fx f;

	(void)state;
	fx_open(&f, "good:0", NULL);
	fx_free(&f, fx_alloc(&f, 4096, NULL));
	/* Each 4 KiB hit is recorded (the last free was of 4 KiB), and the
	 * 8 KiB request after it lets the record go unused. */
	for (unsigned i = 0; i < TC_WASTED; i++) {
		void *q = fx_alloc(&f, 4096, NULL);

		assert_int_equal(tcache_state(own_cache(&f)), TC_LIVE);
		void *r = fx_alloc(&f, 8192, NULL);
		fx_free(&f, r);
		fx_free(&f, q);
	}
	assert_int_equal(own_cache(&f)->wasted, TC_WASTED);
	/* A loop of 4 KiB: left out TC_SKIP times, then recorded and redone. */
	unsigned calls = 0;
	void *p;
	for (;;) {
		p = fx_alloc(&f, 4096, NULL);
		if (tcache_state(own_cache(&f)) == TC_LIVE)
			break;
		fx_free(&f, p);
		calls++;
	}
	assert_int_equal(calls, TC_SKIP);
	for (int i = 0; i < 10; i++) {
		fx_free(&f, p);
		assert_ptr_equal(fx_alloc(&f, 4096, NULL), p);
	}
	assert_int_equal(redos(&f), 10);
	/* The next call with the lock folds the redos: records start again. */
	fx_free(&f, fx_alloc(&f, 8192, NULL));
	assert_int_equal(own_cache(&f)->wasted, 0);
	fx_free(&f, p);
	devcache_close(f.ctx);
}

/* Where more than the free-block search decides, every call takes the lock. */
static void off_where_more_decides(void **state)
{
	static const char *options[] = {
		"thread_cache:false",
		"expandable_segments:true",
		"garbage_collection_threshold:0.5,memory_fraction:0.9",
	};

	(void)state;
	for (size_t k = 0; k < sizeof options / sizeof *options; k++) {
		struct fx f;

		fx_open(&f, "vmm:0", options[k]);
		for (int i = 0; i < 10; i++)
			fx_free(&f, fx_alloc(&f, 4096, NULL));
		/* Large blocks are never cached. */
		for (int i = 0; i < 10; i++)
			fx_free(&f, fx_alloc(&f, 4 * MiB, NULL));
		struct tcache *tc = own_cache(&f);
		if (tc)
			assert_int_equal(tcache_state(tc), TC_NONE);
		devcache_close(f.ctx);
	}
	struct fx f;
	fx_open(&f, "good:0", NULL);
	for (int i = 0; i < 10; i++)
		fx_free(&f, fx_alloc(&f, 4 * MiB, NULL));
	assert_true(!own_cache(&f) || tcache_state(own_cache(&f)) == TC_NONE);
	devcache_close(f.ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(same_as_locked), cmocka_unit_test(same_peaks_between_reads),
		cmocka_unit_test(all_peak_across_pools), cmocka_unit_test(redo_is_counted),
		cmocka_unit_test(double_free),	  cmocka_unit_test(other_threads),
		cmocka_unit_test(other_thread_changes_pool),
		cmocka_unit_test(stats_after_another_thread_changed_the_pool),
		cmocka_unit_test(record_stream),  cmocka_unit_test(records_back_off),
		cmocka_unit_test(off_where_more_decides),
	};

	return RUN_TAP(tests);
}
