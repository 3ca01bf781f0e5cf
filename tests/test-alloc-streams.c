/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-alloc-streams.c - hits on a thread's own stream take that stream's lock alone, and their statistics come out exact. */
#include "config.h"

#include "tap.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <devcache.h>

#include "alloc-check.h"

/* Tensor-like sizes, 512 B to 8 MiB, log-uniform: most of them hits in
 * the large pool once the pool has its segments. */
#define N_SIZES 512
#define LIVE 8

static void make_sizes(size_t *v, uint64_t seed)
{
	for (size_t i = 0; i < N_SIZES; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		unsigned shift = 9 + (unsigned)(seed >> 33) % 15; /* 2^9 .. 2^23 */

		v[i] = ((size_t)1 << shift) + (size_t)(seed >> 40) % ((size_t)1 << shift);
	}
}

/* One pass: each request, with the LIVE before it still held. */
static int pass(devcache_device_t *dev, devcache_stream_t stream, const size_t *sizes)
{
	void *live[LIVE] = { 0 };
	int rc = 0;

	for (size_t i = 0; i < N_SIZES && !rc; i++) {
		void **slot = &live[i % LIVE];

		if (*slot && (rc = devcache_free(dev, *slot)))
			break;
		*slot = NULL;
		rc = devcache_alloc(dev, sizes[i], stream, slot);
	}
	for (int i = 0; i < LIVE; i++)
		if (live[i] && !rc)
			rc = devcache_free(dev, live[i]);
	return rc;
}

struct worker {
	struct fx *f;
	pthread_barrier_t *ready, *go, *done;
	uint64_t seed;
	int warmups, rc;
	char why[256];
};

static void *work(void *arg)
{
	struct worker *w = arg;
	devcache_stream_t stream = NULL;
	size_t sizes[N_SIZES];
	devcache_stats_t s;
	uint64_t before = 0;

	make_sizes(sizes, w->seed);
	if ((w->rc = devcache_stream_create(w->f->dev, &stream)))
		goto out;
	/* Warm-up until a pass asks the driver for nothing: from then on
	 * every request of the pass is a hit on this stream's pools. */
	for (w->warmups = 1; w->warmups <= 8; w->warmups++) {
		if ((w->rc = devcache_stats(w->f->dev, &s)))
			goto out;
		before = s.num_device_alloc;
		if ((w->rc = pass(w->f->dev, stream, sizes)) || (w->rc = devcache_stats(w->f->dev, &s)))
			goto out;
		if (s.num_device_alloc == before)
			break;
	}
out:
	if (w->rc)
		snprintf(w->why, sizeof w->why, "%s", devcache_last_error());
	pthread_barrier_wait(w->ready);
	pthread_barrier_wait(w->go);
	for (int i = 0; i < 3 && !w->rc; i++)
		if ((w->rc = pass(w->f->dev, stream, sizes)))
			snprintf(w->why, sizeof w->why, "%s", devcache_last_error());
	pthread_barrier_wait(w->done);
	if (stream)
		devcache_stream_destroy(w->f->dev, stream);
	return NULL;
}

/* Two threads, each on its own stream, repeat passes the cache serves
 * whole: none of their calls takes the allocator-wide lock, so neither
 * waits for the other; and afterwards the statistics are exact. */
static void own_streams_take_no_allocator_lock(void **state)
{
	enum { N = 2 };
	pthread_barrier_t ready, go, done;
	struct worker w[N];
	pthread_t t[N];
	struct fx f;

	(void)state;
	fx_open(&f, "good:0", NULL);
	pthread_barrier_init(&ready, NULL, N + 1);
	pthread_barrier_init(&go, NULL, N + 1);
	pthread_barrier_init(&done, NULL, N + 1);
	for (int i = 0; i < N; i++) {
		w[i] = (struct worker){.f = &f, .ready = &ready, .go = &go, .done = &done,
				       .seed = 42 + (uint64_t)i};
		assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
	}
	pthread_barrier_wait(&ready);
	uint64_t before = f.a->world_locks; /* the workers wait: no call in flight */
	pthread_barrier_wait(&go);
	pthread_barrier_wait(&done);
	uint64_t after = f.a->world_locks;
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		if (w[i].rc)
			fail_msg("worker %d: %s", i, w[i].why);
		assert_true(w[i].warmups <= 8);
	}
	assert_int_equal(after - before, 0);

	devcache_stats_t s = fx_stats(&f);
	const char *why = check_stats(&s);
	if (why)
		fail_msg("statistics: %s", why);
	assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(s.active_bytes[DEVCACHE_POOL_ALL].current, 0);
	assert_int_equal(s.requested_bytes[DEVCACHE_POOL_ALL].current, 0);
	/* Every allocation was counted, the hits' too: warm-up and measured
	 * passes alike. */
	int64_t calls = 0;
	for (int i = 0; i < N; i++)
		calls += (int64_t)(w[i].warmups + 3) * N_SIZES;
	assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].allocated, calls);
	assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].freed, calls);
	check_allocator(&f, NULL, 0);
	pthread_barrier_destroy(&ready);
	pthread_barrier_destroy(&go);
	pthread_barrier_destroy(&done);
	devcache_close(f.ctx);
}

struct three {
	struct fx *f;
	void *left[2];
	int rc;
};

/* Three blocks on a stream of its own, the first freed; the thread ends
 * holding two, its statistics not yet folded into the allocator's. */
static void *three_then_exit(void *arg)
{
	struct three *o = arg;
	devcache_stream_t s = NULL;
	void *p[3];

	if ((o->rc = devcache_stream_create(o->f->dev, &s)))
		return NULL;
	for (int i = 0; i < 3 && !o->rc; i++)
		o->rc = devcache_alloc(o->f->dev, 1 << 20, s, &p[i]);
	if (!o->rc) {
		o->rc = devcache_free(o->f->dev, p[0]);
		o->left[0] = p[1];
		o->left[1] = p[2];
	}
	/* Hits, each counted in this thread's differences. */
	for (int i = 0; i < 4 && !o->rc; i++)
		if (!(o->rc = devcache_alloc(o->f->dev, 512 << 10, s, &p[0])))
			o->rc = devcache_free(o->f->dev, p[0]);
	devcache_stream_destroy(o->f->dev, s);
	return NULL;
}

/* A thread's statistics outlive it, and with one thread at a time the
 * peaks are exact: three 1 MiB blocks at once, never more. */
static void ended_thread_counts(void **state)
{
	struct three o;
	pthread_t t;
	struct fx f;

	(void)state;
	fx_open(&f, "good:0", NULL);
	o = (struct three){.f = &f};
	assert_int_equal(pthread_create(&t, NULL, three_then_exit, &o), 0);
	pthread_join(t, NULL);
	assert_int_equal(o.rc, 0);
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].current, 2);
	assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].peak, 3);
	assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].allocated, 7);
	assert_int_equal(s.allocated_bytes[DEVCACHE_POOL_ALL].current, 2 << 20);
	assert_int_equal(s.allocated_bytes[DEVCACHE_POOL_ALL].peak, 3 << 20);
	assert_int_equal(s.requested_bytes[DEVCACHE_POOL_SMALL].peak, 3 << 20);
	const char *why = check_stats(&s);
	if (why)
		fail_msg("statistics: %s", why);
	devcache_close(f.ctx);
}

struct reader {
	struct fx *f;
	int stop; /* atomic */
	int reads;
	char why[256];
};

static void *read_stats(void *arg)
{
	struct reader *r = arg;

	while (!__atomic_load_n(&r->stop, __ATOMIC_RELAXED) && !r->why[0]) {
		devcache_stats_t s;
		const char *why;

		if (devcache_stats(r->f->dev, &s))
			snprintf(r->why, sizeof r->why, "%s", devcache_last_error());
		else if ((why = check_stats_peaks(&s, false))) /* the workers call meanwhile */
			snprintf(r->why, sizeof r->why, "%s", why);
		r->reads++;
	}
	return NULL;
}

/* Statistics read while two threads allocate on their streams are
 * consistent in themselves (every peak at least its current, the
 * accumulated figures the sum of the rest), and exact once they stop. */
static void stats_read_meanwhile(void **state)
{
	struct reader r;
	pthread_t rt, t[2];
	struct three o[2];
	struct held held[20 * 2 * 2];
	size_t n = 0;
	struct fx f;

	(void)state;
	fx_open(&f, "good:0", NULL);
	r = (struct reader){.f = &f};
	assert_int_equal(pthread_create(&rt, NULL, read_stats, &r), 0);
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < 2; i++) {
			o[i] = (struct three){.f = &f};
			assert_int_equal(pthread_create(&t[i], NULL, three_then_exit, &o[i]), 0);
		}
		for (int i = 0; i < 2; i++) {
			pthread_join(t[i], NULL);
			assert_int_equal(o[i].rc, 0);
			for (int k = 0; k < 2; k++)
				held[n++] = (struct held){.ptr = o[i].left[k], .size = 1 << 20};
		}
	}
	__atomic_store_n(&r.stop, 1, __ATOMIC_RELAXED);
	pthread_join(rt, NULL);
	if (r.why[0])
		fail_msg("a read while threads ran: %s", r.why);
	devcache_stats_t s = fx_stats(&f);
	assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].current, 20 * 2 * 2);
	assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].allocated, 20 * 2 * 7);
	assert_true(s.allocation[DEVCACHE_POOL_ALL].peak >= 20 * 2 * 2);
	check_allocator(&f, held, n);
	devcache_close(f.ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(own_streams_take_no_allocator_lock),
		cmocka_unit_test(ended_thread_counts),
		cmocka_unit_test(stats_read_meanwhile),
	};

	return RUN_TAP(tests);
}
