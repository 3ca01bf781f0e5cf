/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-alloc-threads.c - many threads and streams on one allocator, its invariants checked exactly once they stop. */

/* Eight threads allocate tensor-like blocks, some on streams of their own,
 * two on a stream they share, two on the default stream; they stamp each
 * block's first and last bytes and check the stamp before freeing it (an
 * overlap, or a block handed out twice, overwrites one); they hand blocks
 * to each other to free, name other streams with devcache_record_stream,
 * and read the statistics, the summary and the snapshot, and empty the
 * cache, while the others work.  The test backends' events can be held
 * pending, so frees wait on them too.  Each configuration runs them:
 * the defaults, max_split_size_mb, garbage collection under a
 * memory_fraction, expandable segments, and a memory_fraction too small
 * for what the threads want, where allocations fail while others free.
 *
 * When every thread has stopped, the blocks they still hold are compared
 * with the allocator's: its segments, blocks, free-block index, idle list,
 * address table, pending events and every statistic must agree with each
 * other and with what the threads counted (alloc-check.h).  Then one
 * thread alone, whose peaks are known exactly.
 *
 * Threads never call cmocka (its asserts longjmp to the main thread): they
 * note the first fault, and the main thread fails the test with it. */
#include "tap.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>

#include "alloc-check.h"

/* Under a sanitizer a step costs many times more (ThreadSanitizer's some
 * thirty, AddressSanitizer's some ten): fewer steps keep their CI runs
 * short, with the same threads, streams and mix of calls.  ThreadSanitizer
 * sees a race in the order of events, not in how often they meet. */
#ifdef __has_feature
#define HAS_FEATURE(x) __has_feature(x)
#else
#define HAS_FEATURE(x) 0
#endif
#if defined(__SANITIZE_THREAD__) || HAS_FEATURE(thread_sanitizer)
#define STEPS 300
#define SOLO_STEPS 200
#elif defined(__SANITIZE_ADDRESS__) || HAS_FEATURE(address_sanitizer)
#define STEPS 1000
#define SOLO_STEPS 500
#else
#define STEPS 3000
#define SOLO_STEPS 1000
#endif

#define THREADS 8
#define OWN_MAX 4 /* blocks a thread holds at once */
#define BOX_MAX 2 /* blocks waiting in a thread's mailbox to be freed by it */
#define STAMP 16  /* bytes stamped at each end of a block */

struct live {
	char *ptr;
	size_t size;
	uint64_t tag;
};

/* Blocks other threads hand over for this one to free. */
struct mailbox {
	pthread_mutex_t lock;
	struct live items[BOX_MAX];
	int n;
};

struct run;

struct worker {
	struct run *run;
	int id;
	uint64_t seed;
	devcache_stream_t stream;
	bool own_stream;
	struct mailbox box;
	struct live live[OWN_MAX];
	int n;
	/* What this thread did, for the totals the allocator must agree with. */
	int64_t allocs, frees, failures, requested;
	int max_live;          /* most blocks held at once */
	int64_t max_requested; /* most bytes held at once, as asked */
	FILE *devnull;
	char why[512]; /* the first fault seen, empty if none */
};

/* Sizes a phase asks for: small ones (at most 1 MiB), large ones up to
 * large_max, and big ones from 32 MiB, which max_split_size_mb:32 makes
 * oversize; in percent, small_pct small and big_pct big. */
struct sizes {
	unsigned small_pct, big_pct;
	size_t large_max, big_max;
};

struct run {
	struct fx *f;
	const struct sizes *sizes;
	bool oom_expected;
	void (*hold)(int); /* the test backend's fake_hold_events, or NULL */
	pthread_barrier_t start, stop;
	devcache_stream_t shared;
	devcache_stream_t streams[THREADS]; /* each thread's, set before start */
	pthread_t tid[THREADS];
	struct worker w[THREADS];
};

struct phase {
	const char *device;
	const char *options;
	const struct sizes *sizes;
	bool oom_expected;
	uint64_t seed;
};

/* On the host, room for anything; on the 2 GiB test devices, little
 * enough that only a tight memory_fraction makes allocations fail; under
 * that cap, no block that takes a segment of its own. */
static const struct sizes tensor_sizes = {60, 5, 24 * MiB, 96 * MiB};
static const struct sizes device_sizes = {60, 2, 8 * MiB, 40 * MiB};
static const struct sizes oom_sizes = {40, 0, 8 * MiB, 0};
static const struct sizes small_sizes = {100, 0, 0, 0};

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static size_t random_size(uint64_t *s, const struct sizes *z)
{
	uint64_t r = rng(s) % 100;

	if (r < z->small_pct)
		return 1 + rng(s) % MiB;
	if (r < 100 - z->big_pct)
		return MiB + 1 + rng(s) % (z->large_max - MiB);
	return 32 * MiB + rng(s) % (z->big_max - 32 * MiB);
}

static void note(struct worker *w, const char *fmt, ...) DEVCACHE_PRINTF(2, 3);

/* Keep the first fault a thread sees, for the main thread to report. */
static void note(struct worker *w, const char *fmt, ...)
{
	va_list ap;

	if (w->why[0])
		return;
	va_start(ap, fmt);
	vsnprintf(w->why, sizeof w->why, fmt, ap);
	va_end(ap);
}

/* ---- stamps: the test backends' device memory is host memory too ---------- */

/* The byte at offset i of a block tagged tag: position-dependent, so the
 * stamps of two blocks differ wherever they would overlap. */
static unsigned char stamp_byte(uint64_t tag, size_t i)
{
	uint64_t x = (tag + i) * 0x9E3779B97F4A7C15ull;

	return (unsigned char)(x >> 56);
}

static void stamp(const struct live *l)
{
	size_t n = l->size < STAMP ? l->size : STAMP;

	for (size_t i = 0; i < n; i++) {
		l->ptr[i] = (char)stamp_byte(l->tag, i);
		l->ptr[l->size - n + i] = (char)stamp_byte(l->tag, l->size - n + i);
	}
}

static bool stamp_intact(const struct live *l)
{
	size_t n = l->size < STAMP ? l->size : STAMP;

	for (size_t i = 0; i < n; i++)
		if ((unsigned char)l->ptr[i] != stamp_byte(l->tag, i) ||
		    (unsigned char)l->ptr[l->size - n + i] != stamp_byte(l->tag, l->size - n + i))
			return false;
	return true;
}

/* ---- the threads ----------------------------------------------------------- */

static void take_stock(struct worker *w)
{
	int64_t held = 0;

	for (int i = 0; i < w->n; i++)
		held += (int64_t)w->live[i].size;
	if (w->n > w->max_live)
		w->max_live = w->n;
	if (held > w->max_requested)
		w->max_requested = held;
}

static void release(struct worker *w, const struct live *l, const char *whose)
{
	if (!stamp_intact(l))
		note(w, "%s block %p (%zu bytes) was overwritten", whose, (void *)l->ptr, l->size);
	if (devcache_free(w->run->f->dev, l->ptr))
		note(w, "devcache_free(%p): %s", (void *)l->ptr, devcache_last_error());
	else
		w->frees++;
}

/* Free what others handed over; the block was used on this thread's
 * stream, as a tensor handed to another stream is. */
static void drain(struct worker *w)
{
	struct live got[BOX_MAX];
	int n;

	pthread_mutex_lock(&w->box.lock);
	n = w->box.n;
	memcpy(got, w->box.items, (size_t)n * sizeof *got);
	w->box.n = 0;
	pthread_mutex_unlock(&w->box.lock);
	for (int i = 0; i < n; i++) {
		if (rng(&w->seed) % 4 == 0 &&
		    devcache_record_stream(w->run->f->dev, got[i].ptr, w->stream))
			note(w, "devcache_record_stream: %s", devcache_last_error());
		release(w, &got[i], "a handed-over");
	}
}

static void allocate_one(struct worker *w)
{
	struct run *r = w->run;
	struct live *l = &w->live[w->n];
	int rc;

	l->size = random_size(&w->seed, r->sizes);
	l->tag = rng(&w->seed);
	rc = devcache_alloc(r->f->dev, l->size, w->stream, (void **)&l->ptr);
	if (rc == DEVCACHE_ENOMEM && r->oom_expected) {
		/* A clean failure: the code, a message naming the device. */
		if (strncmp(devcache_last_error(), r->f->dev->id, strlen(r->f->dev->id)))
			note(w, "ENOMEM said \"%s\"", devcache_last_error());
		w->failures++;
		return;
	}
	if (rc) {
		note(w, "devcache_alloc(%zu): %d: %s", l->size, rc, devcache_last_error());
		w->failures++;
		return;
	}
	w->allocs++;
	w->requested += (int64_t)l->size;
	stamp(l);
	/* The tensor is also used on another thread's stream. */
	if (rng(&w->seed) % 8 == 0 &&
	    devcache_record_stream(r->f->dev, l->ptr, r->streams[rng(&w->seed) % THREADS]))
		note(w, "devcache_record_stream: %s", devcache_last_error());
	w->n++;
	take_stock(w);
}

static void hand_over(struct worker *w, int i)
{
	struct worker *to = &w->run->w[(w->id + 1 + rng(&w->seed) % (THREADS - 1)) % THREADS];
	bool sent = false;

	pthread_mutex_lock(&to->box.lock);
	if (to->box.n < BOX_MAX) {
		to->box.items[to->box.n++] = w->live[i];
		sent = true;
	}
	pthread_mutex_unlock(&to->box.lock);
	if (!sent)
		release(w, &w->live[i], "its own");
	w->live[i] = w->live[--w->n];
}

static void snapshot_check(struct worker *w)
{
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);

	if (!out) {
		note(w, "open_memstream failed");
		return;
	}
	if (devcache_snapshot(w->run->f->dev, out))
		note(w, "devcache_snapshot: %s", devcache_last_error());
	fclose(out);
	if (!text || strncmp(text, "{\"device\":", 10) != 0 || len < 3 ||
	    strcmp(text + len - 3, "]}\n") != 0)
		note(w, "the snapshot is malformed: %.60s", text ? text : "(null)");
	free(text);
}

/* The calls a program makes beside allocating: statistics, the summary,
 * the snapshot, emptying the cache; and the device's work running late. */
static void observe(struct worker *w, unsigned what)
{
	struct run *r = w->run;
	devcache_stats_t s;
	const char *why;

	if (what < 40) {
		if (devcache_stats(r->f->dev, &s))
			note(w, "devcache_stats: %s", devcache_last_error());
		else if ((why = check_stats_peaks(&s, false))) /* the others call meanwhile */
			note(w, "statistics: %s", why);
		else if (s.allocation[DEVCACHE_POOL_ALL].current < w->n)
			note(w, "fewer blocks allocated than this thread holds");
	} else if (what < 60) {
		if (devcache_summary(r->f->dev, w->devnull))
			note(w, "devcache_summary: %s", devcache_last_error());
	} else if (what < 70) {
		snapshot_check(w);
	} else if (what < 80) {
		if (devcache_empty_cache(r->f->dev))
			note(w, "devcache_empty_cache: %s", devcache_last_error());
	} else if (r->hold) {
		/* Waiting on an event (empty_cache, an allocation that
		 * found no memory) completes them all again. */
		r->hold(what < 90);
	}
}

static void *work(void *arg)
{
	struct worker *w = arg;
	struct run *r = w->run;

	if (w->own_stream && devcache_stream_create(r->f->dev, &w->stream))
		note(w, "devcache_stream_create: %s", devcache_last_error());
	r->streams[w->id] = w->stream;
	pthread_barrier_wait(&r->start);
	for (int step = 0; step < STEPS; step++) {
		uint64_t op = rng(&w->seed) % 1000;

		drain(w);
		if (w->n == 0 || (w->n < OWN_MAX && op < 480)) {
			allocate_one(w);
		} else if (op < 780) {
			size_t i = rng(&w->seed) % (size_t)w->n;

			release(w, &w->live[i], "its own");
			w->live[i] = w->live[--w->n];
		} else if (op < 960) {
			hand_over(w, (int)(rng(&w->seed) % (size_t)w->n));
		} else {
			observe(w, (unsigned)(rng(&w->seed) % 100));
		}
	}
	/* Once every thread has stopped handing blocks over, the last ones
	 * in the mailbox are freed; the blocks still held stay, for the
	 * main thread to compare with the allocator's. */
	pthread_barrier_wait(&r->stop);
	drain(w);
	return NULL;
}

/* ---- one run ---------------------------------------------------------------- */

/* The test backend's switch that holds events pending; NULL on the host,
 * whose events are done as soon as they are recorded. */
static void *open_hold(const char *device, void (**hold_p)(int))
{
	char path[4096];
	void *module;

	*hold_p = NULL;
	if (strcmp(device, "host") == 0)
		return NULL;
	snprintf(path, sizeof path, "%s/%.*s.so", test_env("TEST_MODULES"),
		 (int)strcspn(device, ":"), device);
	if (!(module = dlopen(path, RTLD_NOW)))
		fail_msg("dlopen(%s): %s", path, dlerror());
	*(void **)hold_p = dlsym(module, "fake_hold_events");
	assert_non_null(*hold_p);
	return module;
}

/* Frees waiting on events become free blocks: the events complete, and
 * an allocation looks at them first.  With nothing allocated it cannot
 * fail, whatever the cap. */
static void settle(struct run *r)
{
	if (r->hold)
		r->hold(0);
	fx_free(r->f, fx_alloc(r->f, 1, NULL));
}

static void start(struct run *r, struct fx *f, const struct phase *ph)
{
	r->f = f;
	r->sizes = ph->sizes;
	r->oom_expected = ph->oom_expected;
	assert_int_equal(devcache_stream_create(f->dev, &r->shared), 0);
	assert_int_equal(pthread_barrier_init(&r->start, NULL, THREADS), 0);
	assert_int_equal(pthread_barrier_init(&r->stop, NULL, THREADS), 0);
	/* Threads 0-3 on streams of their own, 4 and 5 on one they share, 6
	 * and 7 on the default stream. */
	for (int i = 0; i < THREADS; i++) {
		struct worker *w = &r->w[i];

		w->run = r;
		w->id = i;
		w->seed = ph->seed * (uint64_t)(2 * i + 1) | 1;
		w->own_stream = i < 4;
		w->stream = i == 4 || i == 5 ? r->shared : NULL;
		pthread_mutex_init(&w->box.lock, NULL);
		w->devnull = fopen("/dev/null", "w");
		assert_non_null(w->devnull);
	}
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_create(&r->tid[i], NULL, work, &r->w[i]), 0);
}

/* What all the threads did, and the blocks they still hold. */
struct totals {
	int64_t allocs, frees, failures, requested, max_requested;
	int max_live;
	struct live live[THREADS * OWN_MAX];
	struct held held[THREADS * OWN_MAX];
	size_t n;
};

static void join(struct run *r, struct totals *t)
{
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_join(r->tid[i], NULL), 0);
	for (int i = 0; i < THREADS; i++) {
		struct worker *w = &r->w[i];

		if (w->why[0])
			fail_msg("thread %d: %s", i, w->why);
		assert_int_equal(w->box.n, 0);
		for (int k = 0; k < w->n; k++, t->n++) {
			t->live[t->n] = w->live[k];
			t->held[t->n] = (struct held){w->live[k].ptr, w->live[k].size};
			if (!stamp_intact(&w->live[k]))
				fail_msg("block %p (%zu bytes) was overwritten",
					 (void *)w->live[k].ptr, w->live[k].size);
		}
		t->allocs += w->allocs;
		t->frees += w->frees;
		t->failures += w->failures;
		t->requested += w->requested;
		t->max_live = w->max_live > t->max_live ? w->max_live : t->max_live;
		if (w->max_requested > t->max_requested)
			t->max_requested = w->max_requested;
	}
}

/* The statistics count what the threads did, exactly; the peaks lie
 * between what one thread held by itself and what all could hold (its
 * own, its mailbox, and what it took from the mailbox to free). */
static void check_totals(struct fx *f, const struct phase *ph, const struct totals *t)
{
	devcache_stats_t s = fx_stats(f);
	const devcache_stat_t *blocks = &s.allocation[DEVCACHE_POOL_ALL];

	assert_int_equal(blocks->allocated, t->allocs);
	assert_int_equal(blocks->freed, t->frees);
	assert_int_equal(blocks->current, (int64_t)t->n);
	assert_int_equal(s.requested_bytes[DEVCACHE_POOL_ALL].allocated, t->requested);
	assert_int_equal((int64_t)s.num_ooms, t->failures);
	if (ph->oom_expected) {
		assert_true(t->failures > 0);
		/* memory_fraction holds, even with threads racing for it. */
		assert_true(s.reserved_bytes[DEVCACHE_POOL_ALL].peak <= (int64_t)check_cap(f->a));
	} else {
		assert_int_equal(t->failures, 0);
	}
	assert_true(blocks->peak >= t->max_live);
	assert_true(blocks->peak <= THREADS * (OWN_MAX + 2 * BOX_MAX));
	assert_true(s.requested_bytes[DEVCACHE_POOL_ALL].peak >= t->max_requested);
	check_device_calls(f, &s);
}

/* Nothing allocated, nothing active, every count balanced. */
static void check_all_freed(struct fx *f)
{
	devcache_stats_t s;

	check_allocator_peaks(f, NULL, 0, false);
	s = fx_stats(f);
	for (int p = 0; p < DEVCACHE_POOL_COUNT; p++) {
		assert_int_equal(s.allocation[p].current, 0);
		assert_int_equal(s.allocated_bytes[p].current, 0);
		assert_int_equal(s.requested_bytes[p].current, 0);
		assert_int_equal(s.active[p].current, 0);
		assert_int_equal(s.active_bytes[p].current, 0);
		assert_int_equal(s.allocation[p].allocated, s.allocation[p].freed);
		assert_int_equal(s.allocated_bytes[p].allocated, s.allocated_bytes[p].freed);
		assert_int_equal(s.requested_bytes[p].allocated, s.requested_bytes[p].freed);
	}
	assert_int_equal(s.oversize_allocations.current, 0);
}

/* A value and the largest it has been. */
struct seen {
	int64_t now, max;
};

static void see(struct seen *x, int64_t delta)
{
	x->now += delta;
	x->max = x->now > x->max ? x->now : x->max;
}

/* One thread, after devcache_reset_peak(): each peak is the largest value
 * the thread saw, exactly. */
static void solo(struct fx *f, uint64_t seed, const struct sizes *z)
{
	struct live live[8];
	struct held held[8] = {{0}};
	size_t n = 0;
	struct seen count[DEVCACHE_POOL_COUNT] = {{0}}, bytes[DEVCACHE_POOL_COUNT] = {{0}};
	struct seen requested[DEVCACHE_POOL_COUNT] = {{0}}, reserved;
	devcache_stats_t s;

	assert_int_equal(fx_stats(f).active[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(devcache_reset_peak(f->dev), 0);
	reserved.now = reserved.max = (int64_t)f->a->reserved_total;
	for (int step = 0; step < SOLO_STEPS; step++) {
		bool grow = n == 0 || (n < sizeof live / sizeof *live && rng(&seed) % 2);
		size_t i = grow ? n : rng(&seed) % n;
		int sign = grow ? 1 : -1;

		if (grow) {
			live[i].size = random_size(&seed, z);
			live[i].tag = rng(&seed);
			live[i].ptr = fx_alloc(f, live[i].size, NULL);
			stamp(&live[i]);
			n++;
		}
		int64_t size = (int64_t)fx_block_size(f, live[i].ptr);
		int pools[2] = {DEVCACHE_POOL_ALL, DEVCACHE_POOL_LARGE};

		if (alloc_round_size(f->a, live[i].size) <= ALLOC_SMALL_SIZE)
			pools[1] = DEVCACHE_POOL_SMALL;
		for (int k = 0; k < 2; k++) {
			see(&count[pools[k]], sign);
			see(&bytes[pools[k]], sign * size);
			see(&requested[pools[k]], sign * (int64_t)live[i].size);
		}
		if (!grow) {
			if (!stamp_intact(&live[i]))
				fail_msg("block %p was overwritten", (void *)live[i].ptr);
			fx_free(f, live[i].ptr);
			live[i] = live[--n];
		}
		/* Within a call reserved memory may fall (collection, the
		 * cache emptied when the driver refuses) and then grow, never
		 * the other way round: its peak is at the end of some call. */
		see(&reserved, (int64_t)f->a->reserved_total - reserved.now);
	}
	s = fx_stats(f);
	for (int p = 0; p < DEVCACHE_POOL_COUNT; p++) {
		assert_int_equal(s.allocation[p].peak, count[p].max);
		assert_int_equal(s.active[p].peak, count[p].max);
		assert_int_equal(s.allocated_bytes[p].peak, bytes[p].max);
		assert_int_equal(s.active_bytes[p].peak, bytes[p].max);
		assert_int_equal(s.requested_bytes[p].peak, requested[p].max);
	}
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].peak, reserved.max);
	for (size_t i = 0; i < n; i++)
		held[i] = (struct held){live[i].ptr, live[i].size};
	check_allocator_peaks(f, held, n, false);
	while (n)
		fx_free(f, live[--n].ptr);
}

static void finish(struct run *r)
{
	for (int i = 0; i < THREADS; i++) {
		if (r->w[i].own_stream)
			assert_int_equal(devcache_stream_destroy(r->f->dev, r->w[i].stream), 0);
		pthread_mutex_destroy(&r->w[i].box.lock);
		fclose(r->w[i].devnull);
	}
	assert_int_equal(devcache_stream_destroy(r->f->dev, r->shared), 0);
	pthread_barrier_destroy(&r->start);
	pthread_barrier_destroy(&r->stop);
}

static void run_phase(const struct phase *ph)
{
	struct fx f;
	struct run *r = calloc(1, sizeof *r);
	struct totals *t = calloc(1, sizeof *t);
	void *module;

	assert_non_null(r);
	assert_non_null(t);
	module = open_hold(ph->device, &r->hold);
	fx_open(&f, ph->device, ph->options);
	start(r, &f, ph);
	join(r, t);
	/* Quiescent, frees perhaps still waiting on events: the allocator
	 * agrees with itself and with the threads. */
	check_allocator_peaks(&f, t->held, t->n, false);
	check_totals(&f, ph, t);
	while (t->n)
		fx_free(&f, t->live[--t->n].ptr);
	settle(r);
	check_all_freed(&f);
	/* Alone on a cache the threads filled; within a tight cap, small
	 * blocks only. */
	solo(&f, ph->seed ^ 0x5011, ph->oom_expected ? &small_sizes : ph->sizes);
	check_all_freed(&f);
	/* The empty cache: every segment given back. */
	assert_int_equal(devcache_empty_cache(f.dev), 0);
	check_allocator_peaks(&f, NULL, 0, false);
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.reserved_bytes[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(s.segment[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(s.inactive_split[DEVCACHE_POOL_ALL].current, 0);
	if (!f.a->expandable)
		assert_int_equal(s.num_device_alloc, s.num_device_free);
	check_device_calls(&f, &s);
	finish(r);
	devcache_close(f.ctx);
	if (module)
		dlclose(module);
	free(t);
	free(r);
}

/* ---- the phases -------------------------------------------------------------- */

static void host_defaults(void **state)
{
	(void)state;
	run_phase(&(struct phase){"host", NULL, &tensor_sizes, false, 0x1234567});
}

static void host_max_split(void **state)
{
	(void)state;
	run_phase(&(struct phase){"host", "max_split_size_mb:32,roundup_power2_divisions:4",
				  &tensor_sizes, false, 0xfeedface});
}

/* The test devices: good:1 and vmm:1 have 2 GiB; here 1.5 GiB of it may
 * be used, and cached memory is collected above 300 MiB. */
static void device_gc_and_fraction(void **state)
{
	(void)state;
	run_phase(&(struct phase){"good:1",
				  "garbage_collection_threshold:0.2,memory_fraction:0.75,"
				  "max_split_size_mb:32",
				  &device_sizes, false, 0xabcdef});
}

static void device_expandable(void **state)
{
	(void)state;
	run_phase(&(struct phase){"vmm:1", "expandable_segments:true", &device_sizes, false,
				  0x7e57ab1e});
}

static void device_expandable_gc(void **state)
{
	(void)state;
	run_phase(&(struct phase){"vmm:1",
				  "expandable_segments:true,garbage_collection_threshold:0.2,"
				  "memory_fraction:0.75,max_split_size_mb:32",
				  &device_sizes, false, 0xc0ffee});
}

/* 192 MiB of good:0's 1 GiB for threads that want more: some allocations
 * fail, cleanly, while other threads free. */
static void oom_under_tight_fraction(void **state)
{
	(void)state;
	run_phase(&(struct phase){"good:0", "memory_fraction:0.1875", &oom_sizes, true,
				  0x0bad5eed});
}

#ifndef STITCH_CAP
#define STITCH_CAP "0.1"
#endif

static void oom_expandable(void **state)
{
	(void)state;
	run_phase(&(struct phase){"vmm:0",
				  "expandable_segments:true,expandable_stitching:false,"
				  "memory_fraction:0.1875",
				  &oom_sizes, true, 0xdecade});
}

/* Stitching serves more under the same cap: a tighter one makes it fail,
 * and unmap and map pages for other threads meanwhile. */
static void oom_stitching(void **state)
{
	(void)state;
	run_phase(&(struct phase){"vmm:0", "expandable_segments:true,memory_fraction:" STITCH_CAP,
				  &oom_sizes, true, 0xfacade});
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(host_defaults),
		cmocka_unit_test(host_max_split),
		cmocka_unit_test(device_gc_and_fraction),
		cmocka_unit_test(device_expandable),
		cmocka_unit_test(device_expandable_gc),
		cmocka_unit_test(oom_under_tight_fraction),
		cmocka_unit_test(oom_expandable),
		cmocka_unit_test(oom_stitching),
	};
	return RUN_TAP(tests);
}
