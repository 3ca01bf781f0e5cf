/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-model-partial.c - models larger than the device's budget: what fits on the device, the rest on the host, tensors moved in and out. */
#include "tap.h"
#include "model-writer.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <devcache.h>

TEST_TMPDIR_FIXTURE("model-partial");

/* Four tensors of 100000 bytes: each charged 100096 on a device (256-byte
 * rounding), so a budget of 300K (307200) holds three. */
static const struct mw_tensor four[] = {
	{"t0", 100000, 0}, {"t1", 100000, 1}, {"t2", 100000, 1}, {"t3", 100000, 2}};
#define CHARGE 100096u

/* A three-shard set of four, by its index, in path. */
static void write_set(char *path, size_t size, const char *stem, unsigned seed)
{
	mw_sharded(dir, stem, four, 4, 3, seed, 0, path, size);
}

/* Every tensor byte-exact wherever it is; returns a bit mask of those on
 * the device. */
static unsigned check_all(devcache_model_t *m, unsigned seed)
{
	devcache_device_info_t di;
	devcache_model_info_t mi;
	unsigned on_dev = 0;

	assert_int_equal(devcache_model_info(m, &mi), 0);
	assert_int_equal(devcache_device_info(mi.device, &di), 0);
	for (size_t i = 0; i < mi.tensors; i++) {
		devcache_tensor_info_t t;
		void *data;

		assert_int_equal(devcache_model_tensor_at(m, i, &t, &data), 0);
		if (t.place == DEVCACHE_PLACE_DEVICE) {
			unsigned char *copy = malloc(t.size);

			assert_non_null(copy);
			assert_int_equal(devcache_copy_to_host(mi.device, copy, data, t.size, NULL), 0);
			mw_check(t.name, copy, t.size, seed);
			free(copy);
			on_dev |= 1u << i;
		} else {
			assert_int_equal(t.place, DEVCACHE_PLACE_HOST);
			mw_check(t.name, data, t.size, seed);
		}
	}
	return on_dev;
}

/* The cache never holds more than its budget on dev. */
static void within_budget(devcache_ctx_t *ctx, devcache_device_t *dev)
{
	uint64_t used, budget;

	assert_int_equal(devcache_cache_device_usage(ctx, dev, &used, &budget), 0);
	if (used > budget)
		fail_msg("the cache holds %llu bytes on the device, over its budget of %llu",
			 (unsigned long long)used, (unsigned long long)budget);
}

static uint64_t ram_used(devcache_ctx_t *ctx)
{
	devcache_cache_stats_t s;

	assert_int_equal(devcache_cache_stats(ctx, &s), 0);
	return s.ram_used;
}

static void without_the_tunable_the_error_says_so(void **state)
{
	char path[512];
	devcache_model_t *m;

	(void)state;
	write_set(path, sizeof path, "big", 1);
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:300K");
	assert_int_equal(devcache_model_load(ctx, path, mw_device(ctx, "good:0"), NULL, &m),
			 DEVCACHE_ENOMEM);
	assert_contains(devcache_last_error(), path);
	assert_contains(devcache_last_error(), "max_cache_vram");
	assert_contains(devcache_last_error(), "partial_loading would load what fits");
	devcache_close(ctx);
}

static void what_fits_goes_to_the_device_in_order(void **state)
{
	char path[512];
	devcache_model_t *m;
	devcache_load_result_t r;
	devcache_load_args_t args = {.struct_size = sizeof args, .result = &r};
	devcache_model_info_t mi;

	(void)state;
	write_set(path, sizeof path, "big", 2);
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:300K,partial_loading:true");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_load(ctx, path, dev, &args, &m), 0);
	within_budget(ctx, dev);
	assert_int_equal(check_all(m, 2), 0x7); /* t0, t1, t2 */
	assert_int_equal(r.hit, 0);
	assert_int_equal(r.device_bytes, 300000);
	assert_int_equal(r.host_bytes, 100000);
	assert_int_equal(r.bytes_uploaded, 300000);
	assert_int_equal(devcache_model_info(m, &mi), 0);
	assert_int_equal(mi.partial, 1);
	assert_int_equal(mi.tensors, 4);
	assert_int_equal(mi.device_tensors, 3);
	assert_int_equal(mi.device_bytes, 300000);
	assert_int_equal(mi.host_bytes, 100000);
	assert_ptr_equal(mi.device, dev);
	assert_int_equal(mi.locks, 1);
	/* The host part, charged to RAM: mapped, only the bytes of the tensors
	 * on the host (t3), not the whole files. */
	devcache_cache_stats_t s;
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.ram_used, 100000);
	/* One entry: a second load is a hit on it. */
	devcache_model_t *again;
	assert_int_equal(devcache_model_load(ctx, path, dev, &args, &again), 0);
	assert_ptr_equal(again, m);
	assert_int_equal(r.hit, 1);
	assert_int_equal(r.device_bytes, 300000);
	devcache_model_release(again);
	/* The summary shows the device share. */
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	assert_int_equal(devcache_cache_summary(ctx, f), 0);
	fclose(f);
	assert_contains(text, "(partial: 293.0 KiB of 390.6 KiB on good:0)");
	free(text);
	devcache_model_release(m);
	devcache_close(ctx);
}

/* RAM's budget counts a mapped partial model's host part only: 150K
 * holds t3 (100000 bytes) though not the files (over 400000). */
static void ram_counts_the_host_part_only(void **state)
{
	char path[512];
	devcache_model_t *m;

	(void)state;
	write_set(path, sizeof path, "big", 12);
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:300K,max_cache_ram:150K,partial_loading:true");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &m), 0);
	assert_int_equal(check_all(m, 12), 0x7);
	assert_int_equal(ram_used(ctx), 100000);
	devcache_model_release(m);
	devcache_close(ctx);
}

static void tensors_move_in_and_out_byte_exact(void **state)
{
	char path[512];
	devcache_model_t *m;
	devcache_model_info_t mi;
	const char *t3[] = {"t3"}, *t1[] = {"t1"}, *t0_t3[] = {"t0", "t3"};

	(void)state;
	write_set(path, sizeof path, "big", 3);
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:300K,partial_loading:true,"
				       "staging_buffer_size:64K,load_workers:2");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &m), 0);
	assert_int_equal(check_all(m, 3), 0x7);
	/* t3 in: t0, the least recently used, goes back to the host. */
	assert_int_equal(devcache_model_make_resident(m, t3, 1, NULL), 0);
	within_budget(ctx, dev);
	assert_int_equal(check_all(m, 3), 0xe);
	assert_int_equal(ram_used(ctx), 100000); /* t0's bytes, now on the host */
	/* t1 out, then t0 and t3 in: room without moving anything else. */
	assert_int_equal(devcache_model_move_to_host(m, t1, 1), 0);
	within_budget(ctx, dev);
	assert_int_equal(check_all(m, 3), 0xc);
	assert_int_equal(devcache_model_make_resident(m, t0_t3, 2, NULL), 0);
	within_budget(ctx, dev);
	assert_int_equal(check_all(m, 3), 0xd);
	/* Already there: nothing moves, and it counts as a use. */
	assert_int_equal(devcache_model_make_resident(m, t3, 1, NULL), 0);
	assert_int_equal(check_all(m, 3), 0xd);
	/* All four cannot fit: an error, and nothing moved. */
	assert_int_equal(devcache_model_make_resident(m, NULL, 0, NULL), DEVCACHE_ENOMEM);
	assert_contains(devcache_last_error(), path);
	assert_contains(devcache_last_error(), "max_cache_vram");
	assert_int_equal(check_all(m, 3), 0xd);
	/* An unknown name: nothing moved either. */
	const char *bad[] = {"t1", "nope"};
	assert_int_equal(devcache_model_make_resident(m, bad, 2, NULL), DEVCACHE_ENOENT);
	assert_contains(devcache_last_error(), "no tensor named 'nope'");
	assert_int_equal(check_all(m, 3), 0xd);
	/* Everything back to the host. */
	assert_int_equal(devcache_model_move_to_host(m, NULL, 0), 0);
	assert_int_equal(check_all(m, 3), 0);
	assert_int_equal(ram_used(ctx), 400000);
	assert_int_equal(devcache_model_info(m, &mi), 0);
	assert_int_equal(mi.device_bytes, 0);
	uint64_t used, budget;
	devcache_cache_device_usage(ctx, dev, &used, &budget);
	assert_int_equal(used, 0);
	devcache_model_release(m);
	devcache_close(ctx);
}

static void other_models_make_room_in_order(void **state)
{
	char a[512], b[512], small[512];
	devcache_model_t *ma, *mb, *ms;
	devcache_model_info_t mi;
	const char *a_first[] = {"t0", "t1", "t2"}, *t2[] = {"t2"}, *t3[] = {"t3"};

	(void)state;
	write_set(a, sizeof a, "a", 4);
	write_set(b, sizeof b, "b", 5);
	snprintf(small, sizeof small, "%s/small.safetensors", dir);
	static const struct mw_tensor one[] = {{"s", 50000, 0}};
	mw_safetensors(small, one, 1, 6, NULL);
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:300K,partial_loading:true");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	/* b takes three tensors' room; a, loaded while b is locked, gets
	 * none of it. */
	assert_int_equal(devcache_model_load(ctx, b, dev, NULL, &mb), 0);
	assert_int_equal(devcache_model_load(ctx, a, dev, NULL, &ma), 0);
	assert_int_equal(check_all(mb, 5), 0x7);
	assert_int_equal(check_all(ma, 4), 0);
	/* b gives one back, and a small whole model takes the room. */
	assert_int_equal(devcache_model_move_to_host(mb, t2, 1), 0);
	assert_int_equal(devcache_model_load(ctx, small, dev, NULL, &ms), 0);
	devcache_model_release(ms);
	devcache_model_release(mb);
	within_budget(ctx, dev);
	/* a wants three: b's tensors (unlocked now) go back to the host
	 * first, then the small model is evicted whole. */
	assert_int_equal(devcache_model_make_resident(ma, a_first, 3, NULL), 0);
	within_budget(ctx, dev);
	assert_int_equal(check_all(ma, 4), 0x7);
	assert_int_equal(devcache_model_load(ctx, b, dev, NULL, &mb), 0);
	assert_int_equal(devcache_model_info(mb, &mi), 0);
	assert_int_equal(mi.device_tensors, 0);
	assert_int_equal(check_all(mb, 5), 0);
	devcache_cache_stats_t s;
	devcache_cache_stats(ctx, &s);
	/* b, holding nothing on the device, was not evicted for it; the small
	 * model was, into a RAM copy. */
	assert_int_equal(s.models, 3);
	assert_int_equal(s.ram_copies, 1);
	assert_int_equal(s.evictions, 1);
	assert_int_equal(s.misses, 3);
	/* A locked partial model's tensors are not taken for another model's
	 * request: b finds no room while a, locked, holds the device. */
	assert_int_equal(devcache_model_make_resident(mb, t3, 1, NULL), DEVCACHE_ENOMEM);
	assert_int_equal(check_all(ma, 4), 0x7);
	/* Released, a gives way: its least recently used tensor goes. */
	devcache_model_release(ma);
	assert_int_equal(devcache_model_make_resident(mb, t3, 1, NULL), 0);
	within_budget(ctx, dev);
	assert_int_equal(check_all(mb, 5), 0x8);
	assert_int_equal(devcache_model_load(ctx, a, dev, NULL, &ma), 0);
	assert_int_equal(check_all(ma, 4), 0x6);
	devcache_model_release(ma);
	devcache_model_release(mb);
	devcache_close(ctx);
}

static void without_mmap_the_host_side_is_a_copy(void **state)
{
	char path[512];
	devcache_model_t *m;
	uint64_t calls[3] = {0, 0, 0};

	(void)state;
	write_set(path, sizeof path, "big", 7);
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:300K,partial_loading:true,mmap:false");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &m), 0);
	assert_int_equal(check_all(m, 7), 0x7);
	/* The host part is a copy of the files: all of it charged to RAM,
	 * wherever the tensors are. */
	uint64_t files = devcache_model_file_size(devcache_model_file(m));
	assert_true(files > 400000);
	assert_int_equal(ram_used(ctx), files);
	const char *t3[] = {"t3"};
	assert_int_equal(devcache_model_make_resident(m, t3, 1, NULL), 0);
	assert_int_equal(check_all(m, 7), 0xe);
	assert_int_equal(ram_used(ctx), files);
	(void)calls;
	devcache_model_release(m);
	devcache_close(ctx);
}

static int record(void *user, uint64_t done, uint64_t total)
{
	uint64_t *p = user;

	if (done < p[0] || done > total)
		p[2] = 1; /* went backwards, or past the whole */
	p[0] = done;
	p[1] = total;
	return 0;
}

static void progress_runs_once_to_the_whole(void **state)
{
	char path[512];
	devcache_model_t *m;
	uint64_t p[3] = {0, 0, 0};
	devcache_load_args_t args = {.struct_size = sizeof args, .progress = record,
				     .progress_user = p};

	(void)state;
	write_set(path, sizeof path, "big", 8);
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:300K,partial_loading:true,mmap:false,"
				       "staging_buffer_size:64K");
	assert_int_equal(devcache_model_load(ctx, path, mw_device(ctx, "good:0"), &args, &m), 0);
	assert_int_equal(p[2], 0);
	assert_int_equal(p[0], p[1]);
	devcache_model_release(m);
	devcache_close(ctx);
}

static void the_calls_refuse_what_they_cannot_do(void **state)
{
	char path[512], small[512];
	devcache_model_t *m, *ms;
	const char *t0[] = {"t0"};

	(void)state;
	write_set(path, sizeof path, "big", 9);
	snprintf(small, sizeof small, "%s/small.safetensors", dir);
	static const struct mw_tensor one[] = {{"s", 5000, 0}};
	mw_safetensors(small, one, 1, 6, NULL);
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:300K,partial_loading:true");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_make_resident(NULL, t0, 1, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_model_move_to_host(NULL, t0, 1), DEVCACHE_EINVAL);
	assert_int_equal(devcache_model_info(NULL, NULL), DEVCACHE_EINVAL);
	/* A model that fits is not partial. */
	assert_int_equal(devcache_model_load(ctx, small, dev, NULL, &ms), 0);
	assert_int_equal(devcache_model_make_resident(ms, t0, 1, NULL), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "was not loaded partially");
	devcache_model_release(ms);
	/* A released model is not the caller's to move. */
	assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &m), 0);
	devcache_model_release(m);
	assert_int_equal(devcache_model_move_to_host(m, t0, 1), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "is not locked");
	/* A NULL name in the list. */
	assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &m), 0);
	const char *null_name[] = {NULL};
	assert_int_equal(devcache_model_make_resident(m, null_name, 1, NULL), DEVCACHE_EINVAL);
	devcache_model_release(m);
	/* On the host there is nothing to be partial about. */
	assert_int_equal(devcache_model_load(ctx, path, mw_device(ctx, "host"), NULL, &m), 0);
	devcache_model_info_t mi;
	assert_int_equal(devcache_model_info(m, &mi), 0);
	assert_int_equal(mi.partial, 0);
	assert_int_equal(mi.host_bytes, 400000);
	assert_int_equal(devcache_model_make_resident(m, t0, 1, NULL), DEVCACHE_EINVAL);
	devcache_model_release(m);
	devcache_close(ctx);
}

struct loader {
	devcache_ctx_t *ctx;
	devcache_device_t *dev;
	const char *path;
	devcache_model_t *m;
	int rc;
};

static void *load_thread(void *arg)
{
	struct loader *l = arg;

	l->rc = devcache_model_load(l->ctx, l->path, l->dev, NULL, &l->m);
	return NULL;
}

static void two_threads_share_one_partial_load(void **state)
{
	char path[512];
	pthread_t th[2];
	struct loader l[2];

	(void)state;
	write_set(path, sizeof path, "big", 10);
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:300K,partial_loading:true,"
				       "staging_buffer_size:64K");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	for (int i = 0; i < 2; i++) {
		l[i] = (struct loader){.ctx = ctx, .dev = dev, .path = path};
		assert_int_equal(pthread_create(&th[i], NULL, load_thread, &l[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(l[0].rc, 0);
	assert_int_equal(l[1].rc, 0);
	assert_ptr_equal(l[0].m, l[1].m);
	devcache_cache_stats_t s;
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.misses, 1);
	assert_int_equal(s.hits, 1);
	assert_int_equal(s.models, 1);
	within_budget(ctx, dev);
	assert_int_equal(check_all(l[0].m, 10), 0x7);
	devcache_model_release(l[0].m);
	devcache_model_release(l[1].m);
	devcache_close(ctx);
}

/* Another thread loads and releases the model, round after round, while
 * its holder moves its tensors: make_resident and move_to_host read the
 * model's locks, which those loads and releases change, under the cache's
 * lock.  (The race was ThreadSanitizer's to see: CI runs this test under
 * it.) */
struct churn {
	devcache_ctx_t *ctx;
	devcache_device_t *dev;
	const char *path;
	int rounds, rc;
};

static void *churn_thread(void *arg)
{
	struct churn *ch = arg;

	for (int i = 0; i < ch->rounds && ch->rc == 0; i++) {
		devcache_model_t *m;

		if ((ch->rc = devcache_model_load(ch->ctx, ch->path, ch->dev, NULL, &m)) == 0)
			devcache_model_release(m);
	}
	return NULL;
}

static void others_load_and_release_while_tensors_move(void **state)
{
	char path[512];
	const char *t0[] = {"t0"}, *t3[] = {"t3"};
	devcache_cache_stats_t s;
	devcache_model_t *m;
	pthread_t th;

	(void)state;
	write_set(path, sizeof path, "big", 11);
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:300K,partial_loading:true,"
				       "staging_buffer_size:64K");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &m), 0);
	struct churn ch = {.ctx = ctx, .dev = dev, .path = path, .rounds = 400};
	assert_int_equal(pthread_create(&th, NULL, churn_thread, &ch), 0);
	for (int i = 0; i < 200; i++) {
		assert_int_equal(devcache_model_make_resident(m, i % 2 ? t0 : t3, 1, NULL), 0);
		assert_int_equal(devcache_model_move_to_host(m, i % 2 ? t3 : t0, 1), 0);
	}
	pthread_join(th, NULL);
	assert_int_equal(ch.rc, 0);
	within_budget(ctx, dev);
	check_all(m, 11);
	assert_int_equal(devcache_cache_stats(ctx, &s), 0);
	assert_int_equal(s.hits, 400);
	assert_int_equal(s.misses, 1);
	assert_int_equal(s.locked_models, 1);
	devcache_model_release(m);
	devcache_close(ctx);
}

/* devcache_model_tensor_copy() in one thread while another that holds the
 * model too moves the tensor to the host and back, its device memory
 * reused meanwhile: every copy holds the tensor's bytes, taken from where
 * the tensor is at that moment, never from device memory it has left. */
struct copier {
	devcache_ctx_t *ctx;
	devcache_device_t *dev;
	const char *path;
	int rounds, rc, done;
	size_t wrong; /* the first wrong byte, + 1 */
};

static void *copy_thread(void *arg)
{
	struct copier *cp = arg;
	unsigned char *buf = malloc(100000);
	devcache_model_t *m = NULL;

	if (!buf || (cp->rc = devcache_model_load(cp->ctx, cp->path, cp->dev, NULL, &m)))
		goto out;
	for (int i = 0; i < cp->rounds && !cp->rc && !cp->wrong; i++) {
		if ((cp->rc = devcache_model_tensor_copy(m, "t0", buf, 100000)))
			break;
		for (size_t j = 0; j < 100000 && !cp->wrong; j++)
			if (buf[j] != mw_byte("t0", j, 12))
				cp->wrong = j + 1;
	}
	devcache_model_release(m);
out:
	free(buf);
	__atomic_store_n(&cp->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void tensor_copy_while_another_thread_moves_it(void **state)
{
	char path[512];
	const char *t0[] = {"t0"};
	unsigned char *junk = malloc(100000);
	devcache_model_t *m;
	pthread_t th;

	(void)state;
	assert_non_null(junk);
	memset(junk, 0xee, 100000);
	write_set(path, sizeof path, "big", 12);
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:300K,partial_loading:true,"
				       "staging_buffer_size:64K");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &m), 0);
	struct copier cp = {.ctx = ctx, .dev = dev, .path = path, .rounds = 2000};
	assert_int_equal(pthread_create(&th, NULL, copy_thread, &cp), 0);
	while (!__atomic_load_n(&cp.done, __ATOMIC_ACQUIRE)) {
		void *p;

		/* t0's device memory goes back to the allocator, which hands
		 * the same block to the next request of its size. */
		assert_int_equal(devcache_model_move_to_host(m, t0, 1), 0);
		assert_int_equal(devcache_alloc(dev, 100000, NULL, &p), 0);
		assert_int_equal(devcache_copy_to_device(dev, p, junk, 100000, NULL), 0);
		assert_int_equal(devcache_free(dev, p), 0);
		assert_int_equal(devcache_model_make_resident(m, t0, 1, NULL), 0);
	}
	pthread_join(th, NULL);
	assert_int_equal(cp.rc, 0);
	if (cp.wrong)
		fail_msg("a copy of t0 had a wrong byte at %zu", cp.wrong - 1);
	check_all(m, 12);
	devcache_model_release(m);
	devcache_close(ctx);
	free(junk);
}

/* devcache_cache_summary() in one thread, round after round, while
 * another loads a partial model afresh: the summary reads a loading
 * entry's tensor pointers, which the load publishes under the cache lock.
 * (ThreadSanitizer, under which CI runs this test, saw the race.) */
struct summarizer {
	devcache_ctx_t *ctx;
	int done, rc, rounds;
};

static void *summary_thread(void *arg)
{
	struct summarizer *su = arg;
	FILE *f = fopen("/dev/null", "w");

	while (f && !__atomic_load_n(&su->done, __ATOMIC_ACQUIRE) && su->rc == 0) {
		su->rc = devcache_cache_summary(su->ctx, f);
		su->rounds++;
	}
	if (f)
		fclose(f);
	else
		su->rc = -1;
	return NULL;
}

static void summaries_while_partial_loads_run(void **state)
{
	char path[512];
	pthread_t th;

	(void)state;
	write_set(path, sizeof path, "big", 13);
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:300K,partial_loading:true,"
				       "staging_buffer_size:64K");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	struct summarizer su = {.ctx = ctx};
	assert_int_equal(pthread_create(&th, NULL, summary_thread, &su), 0);
	for (int i = 0; i < 100; i++) {
		devcache_model_t *m;

		assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &m), 0);
		assert_int_equal(check_all(m, 13), 0x7);
		devcache_model_release(m);
		assert_int_equal(devcache_cache_evict_all(ctx), 1);
	}
	__atomic_store_n(&su.done, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	assert_int_equal(su.rc, 0);
	assert_true(su.rounds > 0);
	devcache_close(ctx);
}

/* A driver that fails mid-way: a partial load leaves nothing, and a
 * make_resident that fails leaves the model as it was, charges included. */
static void driver_faults_leave_nothing_behind(void **state)
{
	static const struct {
		const char *entry;
		unsigned nth; /* 0x80000000: every call from the nth on */
		int rc;
	} faults[] = {
		{"memcpy_htod", 2, DEVCACHE_EBACKEND},
		{"event_record", 2, DEVCACHE_EBACKEND},
		/* Every call: the tensors share one segment of the allocator. */
		{"mem_alloc", 1 | 0x80000000u, DEVCACHE_ENOMEM},
	};
	char path[512], module_path[4096];
	void (*inject)(const char *, unsigned);
	const char *t3[] = {"t3"};

	(void)state;
	snprintf(module_path, sizeof module_path, "%s/good.so", test_env("TEST_MODULES"));
	void *module = dlopen(module_path, RTLD_NOW);
	assert_non_null(module);
	*(void **)&inject = dlsym(module, "fake_fail");
	assert_non_null(inject);
	write_set(path, sizeof path, "big", 11);
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:300K,partial_loading:true,"
					  "staging_buffer_size:64K");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) {
		devcache_model_t *m = NULL;
		devcache_cache_stats_t s;
		uint64_t used, budget;

		assert_int_equal(devcache_empty_cache(dev), 0);
		inject(faults[i].entry, faults[i].nth);
		int rc = devcache_model_load(ctx, path, dev, NULL, &m);
		inject(faults[i].entry, 0);
		if (rc != faults[i].rc)
			fail_msg("load, %s: %d (%s)", faults[i].entry, rc, devcache_last_error());
		assert_contains(devcache_last_error(), path);
		assert_null(m);
		devcache_cache_stats(ctx, &s);
		assert_int_equal(s.models, 0);
		assert_int_equal(s.ram_used, 0);
		devcache_cache_device_usage(ctx, dev, &used, &budget);
		assert_int_equal(used, 0);
		/* Loaded, then a make_resident that fails; t3 reuses t0's block
		 * from the allocator's cache, so mem_alloc is not called. */
		assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &m), 0);
		if (strcmp(faults[i].entry, "mem_alloc") == 0) {
			devcache_model_release(m);
			assert_int_equal(devcache_cache_evict_all(ctx), 1);
			continue;
		}
		devcache_cache_device_usage(ctx, dev, &used, &budget);
		uint64_t before = used;
		inject(faults[i].entry, 1 | (faults[i].nth & 0x80000000u));
		rc = devcache_model_make_resident(m, t3, 1, NULL);
		inject(faults[i].entry, 0);
		if (rc != faults[i].rc)
			fail_msg("make_resident, %s: %d (%s)", faults[i].entry, rc,
				 devcache_last_error());
		/* t0 went back to make room; t3 did not come: one fewer charged. */
		devcache_cache_device_usage(ctx, dev, &used, &budget);
		assert_int_equal(used, before - CHARGE);
		assert_int_equal(check_all(m, 11), 0x6);
		/* And the model still works. */
		assert_int_equal(devcache_model_make_resident(m, t3, 1, NULL), 0);
		assert_int_equal(check_all(m, 11), 0xe);
		devcache_model_release(m);
		assert_int_equal(devcache_cache_evict_all(ctx), 1);
	}
	devcache_close(ctx);
	dlclose(module);
}

/* With direct_io, each upload opens the files again by name.  A name given
 * since to a FIFO must not block that open (the alarm turns a hang into a
 * failure), nor may another file under the name be read: the bytes still
 * come from the file the model was opened from. */
static void a_file_replaced_by_a_fifo_is_not_opened_again(void **state)
{
	char path[512], shard[512], moved[520];
	devcache_model_t *m;
	const char *t3[] = {"t3"};

	(void)state;
	write_set(path, sizeof path, "fifo", 5);
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:300K,partial_loading:true,"
				       "direct_io:true,staging_buffer_size:64K");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &m), 0);
	assert_int_equal(check_all(m, 5), 0x7);
	for (unsigned k = 0; k < 3; k++) {
		char name[128];

		mw_shard_name(name, sizeof name, "fifo", k, 3, "safetensors");
		snprintf(shard, sizeof shard, "%s/%s", dir, name);
		snprintf(moved, sizeof moved, "%s.old", shard);
		assert_int_equal(rename(shard, moved), 0);
		assert_int_equal(mkfifo(shard, 0600), 0);
	}
	alarm(10);
	int rc = devcache_model_make_resident(m, t3, 1, NULL);
	alarm(0);
	assert_int_equal(rc, 0);
	assert_int_equal(check_all(m, 5), 0xe);
	devcache_model_release(m);
	devcache_close(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TMPDIR_TEST(without_the_tunable_the_error_says_so),
		TMPDIR_TEST(what_fits_goes_to_the_device_in_order),
		TMPDIR_TEST(ram_counts_the_host_part_only),
		TMPDIR_TEST(tensors_move_in_and_out_byte_exact),
		TMPDIR_TEST(other_models_make_room_in_order),
		TMPDIR_TEST(without_mmap_the_host_side_is_a_copy),
		TMPDIR_TEST(progress_runs_once_to_the_whole),
		TMPDIR_TEST(the_calls_refuse_what_they_cannot_do),
		TMPDIR_TEST(two_threads_share_one_partial_load),
		TMPDIR_TEST(others_load_and_release_while_tensors_move),
		TMPDIR_TEST(tensor_copy_while_another_thread_moves_it),
		TMPDIR_TEST(summaries_while_partial_loads_run),
		TMPDIR_TEST(driver_faults_leave_nothing_behind),
		TMPDIR_TEST(a_file_replaced_by_a_fifo_is_not_opened_again),
	};

	return RUN_TAP(tests);
}
