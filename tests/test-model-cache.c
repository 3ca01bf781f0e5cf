/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-model-cache.c - loading models on the host and through the staging ring, hits, locks, budgets, eviction, cancellation and failures. */
#include "tap.h"
#include "model-writer.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <devcache.h>

TEST_TMPDIR_FIXTURE("model-cache");

/* A safetensors file of n (at most 8) U8 tensors "t0".."tN-1" of the
 * given sizes, byte j of each being mw_byte(name, j, seed); the header is
 * not padded and has no __metadata__. */
static void make_model(const char *path, size_t n, const size_t *sizes, unsigned seed)
{
	struct mw_tensor t[8];
	char names[8][24]; /* "t%zu" of any size_t */
	struct mw_opts o = {.seed = seed, .flags = MW_NO_PAD};

	assert_true(n <= 8);
	for (size_t i = 0; i < n; i++) {
		snprintf(names[i], sizeof names[i], "t%zu", i);
		t[i] = (struct mw_tensor){.name = names[i], .size = sizes[i]};
	}
	mw_safetensors_opts(path, t, n, &o);
}

static void check_tensors(devcache_model_t *m, size_t n, const size_t *sizes, unsigned seed)
{
	for (size_t i = 0; i < n; i++) {
		devcache_tensor_info_t info;
		unsigned char *data;
		char name[32];

		snprintf(name, sizeof name, "t%zu", i);
		assert_int_equal(devcache_model_tensor(m, name, &info, (void **)&data), 0);
		assert_int_equal(info.size, sizes[i]);
		mw_check(name, data, sizes[i], seed);
	}
}

static void path_of(char *buf, size_t size, const char *name)
{
	snprintf(buf, size, "%s/%s", dir, name);
}

static const size_t small_sizes[] = {1, 255, 4096, 70000, 3};

static void host_load_is_zero_copy(void **state)
{
	char path[512];
	devcache_model_t *m, *again;
	devcache_tensor_info_t info;
	void *data, *data2;

	(void)state;
	path_of(path, sizeof path, "a.safetensors");
	make_model(path, 5, small_sizes, 1);
	devcache_ctx_t *ctx = mw_open_ctx(NULL);
	devcache_device_t *host = mw_device(ctx, "host");
	assert_int_equal(devcache_model_load(ctx, path, host, NULL, &m), 0);
	check_tensors(m, 5, small_sizes, 1);
	/* The tensors are the file's bytes where the file is mapped: t1
	 * follows the 1-byte t0 directly, as in the file. */
	assert_int_equal(devcache_model_tensor_at(m, 1, &info, &data), 0);
	assert_string_equal(info.name, "t1");
	assert_int_equal(devcache_model_tensor_at(m, 0, &info, &data2), 0);
	assert_ptr_equal((char *)data, (char *)data2 + 1);
	/* The same file again is a hit: the same model. */
	assert_int_equal(devcache_model_load(ctx, path, host, NULL, &again), 0);
	assert_ptr_equal(again, m);
	devcache_cache_stats_t s;
	assert_int_equal(devcache_cache_stats(ctx, &s), 0);
	assert_int_equal(s.misses, 1);
	assert_int_equal(s.hits, 1);
	assert_int_equal(s.models, 1);
	assert_int_equal(s.locked_models, 1);
	assert_int_equal(s.ram_used, devcache_model_file_size(devcache_model_file(m)));
	assert_int_equal(devcache_model_tensor(m, "nope", &info, &data), DEVCACHE_ENOENT);
	devcache_model_release(again);
	devcache_model_release(m);
	assert_int_equal(devcache_cache_stats(ctx, &s), 0);
	assert_int_equal(s.locked_models, 0);
	assert_int_equal(devcache_cache_evict_all(ctx), 1);
	devcache_close(ctx);
}

/* Set path's modification time to *t (NULL: now, a moment after it was). */
static void set_mtime(const char *path, const struct timespec *t)
{
	struct timespec now[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};

	if (t)
		now[1] = *t;
	else {
		struct stat st;

		assert_int_equal(stat(path, &st), 0);
		now[1] = st.st_mtim;
		now[1].tv_sec += 2;
	}
	assert_int_equal(utimensat(AT_FDCWD, path, now, 0), 0);
}

/* A hit is decided by the files' identity (device, inode, size,
 * modification time), before and without parsing them: a file changed in
 * place with its time put back is still the cached model, and any file of
 * a set with a new time is a new model. */
static void a_hit_is_found_by_identity_without_parsing(void **state)
{
	static const struct mw_tensor set[] = {{"x", 1000, 0}, {"y", 3000, 1}};
	char path[512], index[512], shard[512], name[128];
	devcache_model_t *m, *again;
	devcache_cache_stats_t s;
	struct stat st;

	(void)state;
	path_of(path, sizeof path, "id.safetensors");
	make_model(path, 5, small_sizes, 2);
	/* Copied, not mapped: no fault tells the cache of the write below. */
	devcache_ctx_t *ctx = mw_open_ctx("mmap:false");
	devcache_device_t *host = mw_device(ctx, "host");
	assert_int_equal(devcache_model_load(ctx, path, host, NULL, &m), 0);
	devcache_model_release(m);
	/* Its header length made nonsense, its time put back: a parse would
	 * refuse it, the hit does not parse. */
	assert_int_equal(stat(path, &st), 0);
	int fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "\xff\xff\xff\xff\xff\xff\xff\x7f", 8, 0), 8);
	assert_int_equal(close(fd), 0);
	set_mtime(path, &st.st_mtim);
	assert_int_equal(devcache_model_load(ctx, path, host, NULL, &again), 0);
	assert_ptr_equal(again, m);
	devcache_model_release(again);
	/* Its folder, which holds only it, names the same model: a hit too. */
	assert_int_equal(devcache_model_load(ctx, dir, host, NULL, &again), 0);
	assert_ptr_equal(again, m);
	devcache_model_release(again);
	/* A new time: a new file to the cache, which parses it and refuses it. */
	set_mtime(path, NULL);
	assert_int_not_equal(devcache_model_load(ctx, path, host, NULL, &again), 0);
	assert_contains(devcache_last_error(), "id.safetensors");
	assert_int_equal(devcache_cache_stats(ctx, &s), 0);
	assert_int_equal(s.hits, 2);
	assert_int_equal(s.misses, 1);
	assert_int_equal(unlink(path), 0);

	/* A set, loaded by its index: a hit while every file is the same... */
	mw_sharded(dir, "set", set, 2, 2, 3, 0, index, sizeof index);
	assert_int_equal(devcache_model_load(ctx, index, host, NULL, &m), 0);
	devcache_model_release(m);
	assert_int_equal(devcache_model_load(ctx, index, host, NULL, &again), 0);
	assert_ptr_equal(again, m);
	devcache_model_release(again);
	/* ...and a new model once one shard has a new time. */
	mw_shard_name(name, sizeof name, "set", 1, 2, "safetensors");
	snprintf(shard, sizeof shard, "%s/%s", dir, name);
	set_mtime(shard, NULL);
	assert_int_equal(devcache_model_load(ctx, index, host, NULL, &again), 0);
	assert_ptr_not_equal(again, m);
	devcache_model_release(again);
	assert_int_equal(devcache_cache_stats(ctx, &s), 0);
	assert_int_equal(s.hits, 3);
	assert_int_equal(s.misses, 3);
	devcache_close(ctx);
}

static void writable_host_load_leaves_the_file_alone(void **state)
{
	char path[512];
	devcache_model_t *m, *ro;
	devcache_tensor_info_t info;
	unsigned char *data;
	devcache_load_args_t args = {.struct_size = sizeof args, .flags = DEVCACHE_LOAD_WRITABLE};

	(void)state;
	path_of(path, sizeof path, "w.safetensors");
	make_model(path, 5, small_sizes, 2);
	devcache_ctx_t *ctx = mw_open_ctx(NULL);
	devcache_device_t *host = mw_device(ctx, "host");
	assert_int_equal(devcache_model_load(ctx, path, host, &args, &m), 0);
	assert_int_equal(devcache_model_tensor(m, "t2", &info, (void **)&data), 0);
	memset(data, 0xee, info.size); /* a LoRA merge, say */
	/* A read-only load of the same file is another entry, and sees the file. */
	assert_int_equal(devcache_model_load(ctx, path, host, NULL, &ro), 0);
	assert_ptr_not_equal(ro, m);
	check_tensors(ro, 5, small_sizes, 2);
	devcache_model_release(ro);
	devcache_model_release(m);
	devcache_close(ctx);
	/* And so does a fresh context reading the file. */
	ctx = mw_open_ctx("mmap:false");
	assert_int_equal(devcache_model_load(ctx, path, mw_device(ctx, "host"), NULL, &m), 0);
	check_tensors(m, 5, small_sizes, 2);
	devcache_model_release(m);
	devcache_close(ctx);
}

/* What the progress callback saw, checked after the load returns: a
 * failed assertion inside the callback would jump out of the library (and
 * out of whichever thread called it), so the callback only records. */
struct progress_seen {
	pthread_mutex_t lock;
	uint64_t done, total, calls;
	uint64_t past_total, backwards; /* reports that broke the rules */
};

static int count_calls(void *user, uint64_t done, uint64_t total)
{
	struct progress_seen *seen = user;

	pthread_mutex_lock(&seen->lock);
	seen->past_total += done > total;
	seen->backwards += done < seen->done;
	seen->done = done;
	seen->total = total;
	seen->calls++;
	pthread_mutex_unlock(&seen->lock);
	return 0;
}

static void progress_reset(struct progress_seen *seen)
{
	seen->done = seen->total = seen->calls = seen->past_total = seen->backwards = 0;
}

/* Every report in order and within the whole, the last the whole. */
static void progress_check(const struct progress_seen *seen, uint64_t min_calls)
{
	assert_int_equal(seen->past_total, 0);
	assert_int_equal(seen->backwards, 0);
	assert_int_equal(seen->done, seen->total);
	assert_true(seen->calls >= min_calls);
}

/* The staging path: small buffers, several workers, pieces cut across
 * buffers, every byte where the layout says. */
static void device_load_streams_through_the_ring(void **state)
{
	static const size_t sizes[] = {100000, 1, 300000, 65536, 12345, 0, 200000};
	char path[512];
	devcache_model_t *m;
	struct progress_seen progress = {.lock = PTHREAD_MUTEX_INITIALIZER};
	devcache_load_args_t args = {.struct_size = sizeof args, .progress = count_calls,
				     .progress_user = &progress};

	(void)state;
	path_of(path, sizeof path, "d.safetensors");
	make_model(path, 7, sizes, 3);
	devcache_ctx_t *ctx = mw_open_ctx("staging_buffer_size:64K,staging_buffers:3,load_workers:3");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_load(ctx, path, dev, &args, &m), 0);
	check_tensors(m, 7, sizes, 3);
	/* Packed at 256 bytes, in one allocation. */
	for (size_t i = 0; i < 7; i++) {
		devcache_tensor_info_t info;
		void *data, *base;

		devcache_model_tensor_at(m, 0, &info, &base);
		devcache_model_tensor_at(m, i, &info, &data);
		assert_int_equal(((char *)data - (char *)base) % 256, 0);
	}
	/* Last of the whole; how often before depends on the workers' pace. */
	progress_check(&progress, 1);
	devcache_cache_stats_t s;
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.bytes_uploaded, 100000 + 1 + 300000 + 65536 + 12345 + 200000);
	uint64_t used, budget;
	assert_int_equal(devcache_cache_device_usage(ctx, dev, &used, &budget), 0);
	assert_true(used >= s.bytes_uploaded && used < s.bytes_uploaded + 7 * 256);
	/* auto: 1 GiB less device_working_mem (512 MiB, half of it). */
	assert_int_equal(budget, 512u << 20);
	devcache_stats_t as;
	devcache_stats(dev, &as);
	assert_int_equal(as.allocation[DEVCACHE_POOL_ALL].current, 1);
	devcache_model_release(m);
	/* The staging buffers were pinned host memory, given back. */
	devcache_host_stats(dev, &as);
	assert_int_equal(as.allocation[DEVCACHE_POOL_ALL].current, 0);
	devcache_close(ctx);
	/* One worker, the loading thread: a report after each 64 KiB chunk. */
	ctx = mw_open_ctx("staging_buffer_size:64K,load_workers:1");
	progress_reset(&progress);
	assert_int_equal(devcache_model_load(ctx, path, mw_device(ctx, "good:0"), &args, &m), 0);
	check_tensors(m, 7, sizes, 3);
	progress_check(&progress, 10);
	devcache_model_release(m);
	devcache_close(ctx);
}

static void direct_io_and_page_cache_advice_load_the_same_bytes(void **state)
{
	static const size_t sizes[] = {5000, 100000, 7};
	char path[512];
	devcache_model_t *m;

	(void)state;
	path_of(path, sizeof path, "o.safetensors");
	make_model(path, 3, sizes, 4);
	/* Where the file system refuses O_DIRECT, the load falls back. */
	devcache_ctx_t *ctx = mw_open_ctx("direct_io:true,fadvise_sequential:true,evict_page_cache:true,"
				       "staging_buffer_size:64K");
	assert_int_equal(devcache_model_load(ctx, path, mw_device(ctx, "good:0"), NULL, &m), 0);
	check_tensors(m, 3, sizes, 4);
	devcache_model_release(m);
	devcache_close(ctx);
}

static void budgets_evict_least_recently_used_unlocked(void **state)
{
	static const size_t mib[] = {1 << 20};
	char a[512], b[512], c[512];
	devcache_model_t *ma, *mb, *mc;

	(void)state;
	path_of(a, sizeof a, "a.st");
	path_of(b, sizeof b, "b.st");
	path_of(c, sizeof c, "c.st");
	make_model(a, 1, mib, 5);
	make_model(b, 1, mib, 6);
	make_model(c, 1, mib, 7);
	/* Room for two models of 1 MiB. */
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:2300K");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_load(ctx, a, dev, NULL, &ma), 0);
	assert_int_equal(devcache_model_load(ctx, b, dev, NULL, &mb), 0);
	devcache_model_release(ma);
	devcache_model_release(mb);
	/* a is least recently used: c takes its place, and a is kept in RAM
	 * (keep_ram_copy is on by default). */
	assert_int_equal(devcache_model_load(ctx, c, dev, NULL, &mc), 0);
	devcache_cache_stats_t s;
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.evictions, 1);
	assert_int_equal(s.models, 3);
	assert_int_equal(s.ram_copies, 1);
	assert_int_equal(s.ram_used, 1 << 20);
	assert_int_equal(devcache_model_load(ctx, b, dev, NULL, &mb), 0); /* a hit */
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.hits, 1);
	/* Both locked: a third cannot be placed, and says why. */
	assert_int_equal(devcache_model_load(ctx, a, dev, NULL, &ma), DEVCACHE_ENOMEM);
	assert_contains(devcache_last_error(), "a.st: the model needs 1.0 MiB on good:0");
	assert_contains(devcache_last_error(), "max_cache_vram");
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.failed_loads, 1);
	assert_int_equal(s.models, 3);
	assert_int_equal(s.ram_copies, 1);
	check_tensors(mb, 1, mib, 6);
	check_tensors(mc, 1, mib, 7);
	devcache_model_release(mb);
	devcache_model_release(mc);
	devcache_close(ctx);
}

static void allocator_pressure_evicts_unlocked_models(void **state)
{
	static const size_t big[] = {30 << 20};
	char a[512];
	devcache_model_t *m;
	void *p = NULL;

	(void)state;
	path_of(a, sizeof a, "big.st");
	make_model(a, 1, big, 8);
	/* A 51 MiB cap on the device. */
	devcache_ctx_t *ctx = mw_open_ctx("memory_fraction:0.05");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_load(ctx, a, dev, NULL, &m), 0);
	/* Locked, it stays: 30 MiB more does not fit beside it. */
	assert_int_equal(devcache_alloc(dev, 30u << 20, NULL, &p), DEVCACHE_ENOMEM);
	devcache_model_release(m);
	/* Unlocked, the allocator's pressure callback evicts it. */
	assert_int_equal(devcache_alloc(dev, 30u << 20, NULL, &p), 0);
	devcache_cache_stats_t s;
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.evictions, 1);
	assert_int_equal(s.models, 1); /* its RAM copy */
	assert_int_equal(s.ram_copies, 1);
	devcache_free(dev, p);
	devcache_close(ctx);
}

/* Evicted from the device, a model comes back from RAM: no disk read. */
static void a_ram_copy_makes_the_reload_a_copy(void **state)
{
	static const size_t sizes[] = {300000, 5, 70000};
	char a[512], b[512];
	devcache_model_t *ma, *mb;

	(void)state;
	path_of(a, sizeof a, "ra.st");
	path_of(b, sizeof b, "rb.st");
	make_model(a, 3, sizes, 12);
	make_model(b, 3, sizes, 13);
	/* Room for one model on the device. */
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:400K");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_load(ctx, a, dev, NULL, &ma), 0);
	devcache_model_release(ma);
	assert_int_equal(devcache_model_load(ctx, b, dev, NULL, &mb), 0);
	devcache_model_release(mb);
	devcache_cache_stats_t s0, s;
	devcache_cache_stats(ctx, &s0);
	assert_int_equal(s0.ram_copies, 1);
	/* a again: b goes to RAM, a comes back from RAM. */
	assert_int_equal(devcache_model_load(ctx, a, dev, NULL, &ma), 0);
	check_tensors(ma, 3, sizes, 12);
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.ram_copy_reloads, 1);
	assert_int_equal(s.hits, s0.hits + 1);
	assert_int_equal(s.misses, s0.misses);
	assert_int_equal(s.bytes_read, s0.bytes_read); /* nothing read from the file */
	assert_int_equal(s.ram_copies, 1);           /* b's, now */
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	assert_non_null(out);
	assert_int_equal(devcache_cache_summary(ctx, out), 0);
	fclose(out);
	assert_contains(text, "Model cache\n");
	assert_contains(text, "\n  hits       1 (1 from RAM)\n  misses     2 (0 failed, 0 cancelled)\n");
	assert_contains(text, "(max_cache_vram)");
	assert_contains(text, "ra.st");
	assert_contains(text, "\n  RAM ");
	free(text);
	devcache_model_release(ma);
	/* Without keep_ram_copy an eviction drops the model. */
	devcache_close(ctx);
	ctx = mw_open_ctx("max_cache_vram:400K,keep_ram_copy:false,malloc_trim_on_evict:true");
	dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_load(ctx, a, dev, NULL, &ma), 0);
	devcache_model_release(ma);
	assert_int_equal(devcache_model_load(ctx, b, dev, NULL, &mb), 0);
	devcache_model_release(mb);
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.ram_copies, 0);
	assert_int_equal(s.models, 1);
	devcache_close(ctx);
}

struct log_capture {
	char text[8192];
};

static void capture(void *user, enum devcache_log_level level, const char *msg)
{
	struct log_capture *l = user;

	(void)level;
	strncat(l->text, msg, sizeof l->text - strlen(l->text) - 2);
	strcat(l->text, "\n");
}

static void memory_use_is_logged_at_each_load_and_eviction(void **state)
{
	static const size_t sizes[] = {100000};
	char a[512], b[512];
	devcache_model_t *m;
	struct log_capture log = {.text = ""};

	(void)state;
	path_of(a, sizeof a, "la.st");
	path_of(b, sizeof b, "lb.st");
	make_model(a, 1, sizes, 14);
	make_model(b, 1, sizes, 15);
	devcache_ctx_t *ctx = mw_open_ctx("log_memory_usage:true,log_level:info,max_cache_ram:150K,"
				       "malloc_mmap_threshold:1M");
	devcache_set_log_handler(ctx, capture, &log);
	devcache_device_t *host = mw_device(ctx, "host");
	assert_int_equal(devcache_model_load(ctx, a, host, NULL, &m), 0);
	devcache_model_release(m);
	assert_int_equal(devcache_model_load(ctx, b, host, NULL, &m), 0);
	devcache_model_release(m);
	assert_contains(log.text, "model cache: loaded ");
	assert_contains(log.text, "la.st: RSS ");
	assert_contains(log.text, "cached files in the page cache");
	assert_contains(log.text, "malloc heap");
	assert_contains(log.text, "model cache: evicted ");
	devcache_close(ctx);
}

/* Pages of path in the page cache, by mincore() on a fresh mapping. */
static size_t resident_pages(const char *path)
{
	int fd = open(path, O_RDONLY);
	struct stat st;
	size_t page = (size_t)sysconf(_SC_PAGESIZE), n, resident = 0;

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	n = ((size_t)st.st_size + page - 1) / page;
	void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	unsigned char *vec = malloc(n);
	assert_true(p != MAP_FAILED);
	assert_non_null(vec);
	assert_int_equal(mincore(p, (size_t)st.st_size, vec), 0);
	for (size_t i = 0; i < n; i++)
		resident += vec[i] & 1;
	free(vec);
	munmap(p, (size_t)st.st_size);
	close(fd);
	return resident;
}

/* The file written to disk and then read whole, so that its pages are
 * in the page cache and clean. */
static void read_whole(const char *path)
{
	int fd = open(path, O_RDONLY);
	char buf[65536];

	assert_true(fd >= 0);
	assert_int_equal(fsync(fd), 0);
	while (read(fd, buf, sizeof buf) > 0)
		;
	close(fd);
}

/* A host-placed model evicted with evict_page_cache: its file's pages
 * leave the page cache (unmapped, then POSIX_FADV_DONTNEED), and the
 * memory log's figure after the eviction counts them truly: "8.0 MiB ->
 * 0 B" with it, "8.0 MiB -> 8.0 MiB" without (it said 0 B there). */
static void evicted_host_models_leave_the_page_cache(void **state)
{
	static const size_t sizes[] = {8u << 20};
	const size_t pages = (8u << 20) / (size_t)sysconf(_SC_PAGESIZE);
	char path[512];

	(void)state;
	path_of(path, sizeof path, "pages.st");
	make_model(path, 1, sizes, 31);
	/* The file system must drop clean pages on advice (tmpfs does not). */
	read_whole(path);
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
	if (resident_pages(path) > pages / 2)
		skip_because("the file system under TMPDIR keeps clean pages after "
			     "POSIX_FADV_DONTNEED (tmpfs?)");
	for (int drop = 0; drop < 2; drop++) {
		struct log_capture log = {.text = ""};
		devcache_ctx_t *ctx = mw_open_ctx(drop ? "evict_page_cache:true,log_memory_usage:true,"
							 "log_level:info"
						       : "log_memory_usage:true,log_level:info");
		devcache_device_t *host = mw_device(ctx, "host");
		devcache_model_t *m;

		devcache_set_log_handler(ctx, capture, &log);
		read_whole(path);
		assert_int_equal(devcache_model_load(ctx, path, host, NULL, &m), 0);
		check_tensors(m, 1, sizes, 31); /* every page touched through the mapping */
		devcache_model_release(m);
		assert_true(resident_pages(path) >= pages);
		assert_int_equal(devcache_cache_evict_all(ctx), 1);
		if (drop) {
			assert_true(resident_pages(path) <= 1);
			assert_contains(log.text, "cached files in the page cache 8.0 MiB -> 0 B");
		} else {
			assert_true(resident_pages(path) >= pages);
			assert_contains(log.text, "cached files in the page cache 8.0 MiB -> 8.0 MiB");
		}
		devcache_close(ctx);
	}
}

static int cancel_at_half(void *user, uint64_t done, uint64_t total)
{
	(void)user;
	return done * 2 >= total;
}

/* A progress callback that loads the model it reports on: the inner load
 * must fail at once with EBUSY, not wait for the outer one forever. */
struct reentry {
	devcache_ctx_t *ctx;
	devcache_device_t *dev;
	const char *path;
	int calls, rc;
	char error[512];
};

static int load_again(void *user, uint64_t done, uint64_t total)
{
	struct reentry *r = user;
	devcache_model_t *m = NULL;

	(void)done;
	(void)total;
	if (r->calls++)
		return 0;
	alarm(10);
	r->rc = devcache_model_load(r->ctx, r->path, r->dev, NULL, &m);
	alarm(0);
	snprintf(r->error, sizeof r->error, "%s", devcache_last_error());
	devcache_model_release(m);
	return 0;
}

static void a_progress_callback_cannot_load_its_own_model(void **state)
{
	static const size_t sizes[] = {300000, 300000};
	const char *devices[] = {"good:0", "host"};
	char path[512];

	(void)state;
	path_of(path, sizeof path, "r.safetensors");
	make_model(path, 2, sizes, 5);
	for (size_t i = 0; i < 2; i++) {
		devcache_ctx_t *ctx = mw_open_ctx("staging_buffer_size:64K,load_workers:1");
		struct reentry r = {.ctx = ctx, .dev = mw_device(ctx, devices[i]), .path = path};
		devcache_load_args_t args = {.struct_size = sizeof args, .progress = load_again,
					     .progress_user = &r};
		devcache_model_t *m = NULL;

		assert_int_equal(devcache_model_load(ctx, path, r.dev, &args, &m), 0);
		assert_true(r.calls >= 1);
		assert_int_equal(r.rc, DEVCACHE_EBUSY);
		assert_contains(r.error, "r.safetensors: this thread is loading it already");
		check_tensors(m, 2, sizes, 5);
		devcache_model_release(m);
		devcache_close(ctx);
	}
}

static void cancelled_and_failed_loads_leave_nothing(void **state)
{
	static const size_t sizes[] = {400000, 400000};
	char path[512];
	devcache_model_t *m = (void *)1;
	devcache_load_args_t args = {.struct_size = sizeof args, .progress = cancel_at_half};

	(void)state;
	path_of(path, sizeof path, "c.safetensors");
	make_model(path, 2, sizes, 9);
	devcache_ctx_t *ctx = mw_open_ctx("staging_buffer_size:64K,load_workers:2");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_load(ctx, path, dev, &args, &m), DEVCACHE_ECANCELED);
	assert_null(m);
	assert_contains(devcache_last_error(), "c.safetensors: load cancelled");
	assert_int_equal(devcache_model_load(ctx, path, mw_device(ctx, "host"), &args, &m),
			 DEVCACHE_ECANCELED);
	devcache_cache_stats_t s;
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.cancelled_loads, 2);
	assert_int_equal(s.models, 0);
	uint64_t used, budget;
	devcache_cache_device_usage(ctx, dev, &used, &budget);
	assert_int_equal(used, 0);
	devcache_stats_t as;
	devcache_stats(dev, &as);
	assert_int_equal(as.allocation[DEVCACHE_POOL_ALL].current, 0);
	devcache_host_stats(dev, &as);
	assert_int_equal(as.allocation[DEVCACHE_POOL_ALL].current, 0);
	devcache_close(ctx);
	/* The device cannot hold it (a 512 KiB cap): the allocation fails
	 * part way in, and the load leaves no entry and no memory. */
	ctx = mw_open_ctx("memory_fraction:0.0005");
	dev = mw_device(ctx, "good:0");
	assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &m), DEVCACHE_ENOMEM);
	assert_contains(devcache_last_error(), "out of memory");
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.failed_loads, 1);
	assert_int_equal(s.models, 0);
	devcache_close(ctx);
	/* A malformed file fails before anything is placed. */
	path_of(path, sizeof path, "junk.safetensors");
	mw_text(path, "this is not a model");
	ctx = mw_open_ctx(NULL);
	assert_int_equal(devcache_model_load(ctx, path, mw_device(ctx, "host"), NULL, &m),
			 DEVCACHE_EFORMAT);
	assert_contains(devcache_last_error(), "junk.safetensors");
	devcache_close(ctx);
}

/* Every driver failure in the middle of a load: a clean error, nothing
 * left behind, and the next load works. */
static void driver_faults_mid_load_leave_nothing(void **state)
{
	static const size_t sizes[] = {300000, 300000};
	static const struct {
		const char *entry;
		unsigned nth; /* 0x80000000: every call from the nth on */
		int rc;
		const char *says;
	} faults[] = {
		{"memcpy_htod", 3, DEVCACHE_EBACKEND, "injected failure of memcpy_htod"},
		{"host_alloc", 1 | 0x80000000u, DEVCACHE_ENOMEM,
		 "out of pinned host memory. Tried to allocate 2.00 MiB for a request of 65536 bytes"},
		{"event_create", 2, DEVCACHE_EBACKEND, "injected failure of event_create"},
		{"event_record", 4, DEVCACHE_EBACKEND, "injected failure of event_record"},
		/* Every call, or the OOM sequence's retry would succeed. */
		{"mem_alloc", 1 | 0x80000000u, DEVCACHE_ENOMEM, "good:0: out of memory"},
	};
	char path[512], module_path[4096];
	void (*inject)(const char *, unsigned);

	(void)state;
	snprintf(module_path, sizeof module_path, "%s/good.so", test_env("TEST_MODULES"));
	void *module = dlopen(module_path, RTLD_NOW);
	assert_non_null(module);
	*(void **)&inject = dlsym(module, "fake_fail");
	assert_non_null(inject);
	path_of(path, sizeof path, "f.safetensors");
	make_model(path, 2, sizes, 16);
	devcache_ctx_t *ctx = mw_open_ctx("staging_buffer_size:64K,load_workers:2");
	devcache_device_t *dev = mw_device(ctx, "good:0");
	for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) {
		devcache_model_t *m = NULL;
		devcache_cache_stats_t s;
		devcache_stats_t as;
		uint64_t used, budget;

		/* Cached memory would spare the driver the call. */
		assert_int_equal(devcache_host_empty_cache(dev), 0);
		assert_int_equal(devcache_empty_cache(dev), 0);
		inject(faults[i].entry, faults[i].nth);
		int rc = devcache_model_load(ctx, path, dev, NULL, &m);
		inject(faults[i].entry, 0);
		if (rc != faults[i].rc)
			fail_msg("%s: %d (%s)", faults[i].entry, rc, devcache_last_error());
		assert_contains(devcache_last_error(), faults[i].says);
		assert_null(m);
		devcache_cache_stats(ctx, &s);
		assert_int_equal(s.models, 0);
		devcache_cache_device_usage(ctx, dev, &used, &budget);
		assert_int_equal(used, 0);
		devcache_stats(dev, &as);
		assert_int_equal(as.allocation[DEVCACHE_POOL_ALL].current, 0);
		devcache_host_stats(dev, &as);
		assert_int_equal(as.allocation[DEVCACHE_POOL_ALL].current, 0);
		/* And the context is fine for the next one. */
		assert_int_equal(devcache_model_load(ctx, path, dev, NULL, &m), 0);
		check_tensors(m, 2, sizes, 16);
		devcache_model_release(m);
		assert_int_equal(devcache_cache_evict_all(ctx), 1);
	}
	devcache_close(ctx);
	dlclose(module);
}

/* The file is cut short while it streams: an error, never SIGBUS.  The
 * callback only records how the truncation went (the library is its
 * caller); the test checks after the load returns. */
struct shrink {
	const char *path;
	int truncated, error; /* times truncate() worked; errno of one that did not */
};

static int truncate_on_first_call(void *user, uint64_t done, uint64_t total)
{
	struct shrink *sh = user;

	(void)total;
	if (done > 0 && done < 200000) {
		if (truncate(sh->path, 100000) == 0)
			sh->truncated++;
		else
			sh->error = errno;
	}
	return 0;
}

static void a_file_that_shrinks_while_streaming_is_an_error(void **state)
{
	static const size_t sizes[] = {600000};
	char path[512];
	devcache_model_t *m;
	struct shrink sh = {.path = path};
	devcache_load_args_t args = {.struct_size = sizeof args, .progress = truncate_on_first_call,
				     .progress_user = &sh};

	(void)state;
	path_of(path, sizeof path, "shrink.safetensors");
	make_model(path, 1, sizes, 10);
	devcache_ctx_t *ctx = mw_open_ctx("staging_buffer_size:64K,load_workers:1,staging_buffers:2");
	assert_int_equal(devcache_model_load(ctx, path, mw_device(ctx, "good:0"), &args, &m),
			 DEVCACHE_EFORMAT);
	if (sh.error)
		fail_msg("truncate(%s): %s", path, strerror(sh.error));
	assert_true(sh.truncated >= 1);
	assert_contains(devcache_last_error(), "shrink.safetensors: the file ends at byte 100000");
	assert_contains(devcache_last_error(), "truncated while being loaded");
	devcache_close(ctx);
}

struct loader {
	devcache_ctx_t *ctx;
	devcache_device_t *dev;
	const char *path;
	devcache_model_t *got;
	int rc;
};

static void *load_thread(void *arg)
{
	struct loader *l = arg;

	for (int i = 0; i < 20 && l->rc == 0; i++) {
		devcache_model_t *m;

		l->rc = devcache_model_load(l->ctx, l->path, l->dev, NULL, &m);
		if (l->rc == 0) {
			l->got = m;
			devcache_model_release(m);
		}
	}
	return NULL;
}

static void threads_loading_one_file_share_one_model(void **state)
{
	static const size_t sizes[] = {500000, 1000};
	char path[512];
	struct loader l[4];
	pthread_t t[4];

	(void)state;
	path_of(path, sizeof path, "shared.safetensors");
	make_model(path, 2, sizes, 11);
	devcache_ctx_t *ctx = mw_open_ctx("staging_buffer_size:64K");
	for (int i = 0; i < 4; i++) {
		l[i] = (struct loader){ctx, mw_device(ctx, i % 2 ? "good:0" : "host"), path, NULL, 0};
		assert_int_equal(pthread_create(&t[i], NULL, load_thread, &l[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		assert_int_equal(l[i].rc, 0);
	}
	assert_ptr_equal(l[0].got, l[2].got);
	assert_ptr_equal(l[1].got, l[3].got);
	devcache_cache_stats_t s;
	devcache_cache_stats(ctx, &s);
	assert_int_equal(s.misses, 2);
	assert_int_equal(s.hits, 78);
	assert_int_equal(s.locked_models, 0);
	devcache_close(ctx);
}

/* What the first release's programs pass: the struct without result and
 * reserved room. */
struct load_args_v0 {
	size_t struct_size;
	unsigned flags;
	devcache_progress_fn progress;
	void *progress_user;
	devcache_stream_t stream;
};

static void each_load_says_what_it_did(void **state)
{
	static const size_t sizes[] = {70000, 3, 5000};
	char path[512];
	devcache_model_t *m, *m2;
	devcache_load_result_t r;
	devcache_load_args_t args = {.struct_size = sizeof args, .result = &r};
	struct load_args_v0 old = {.struct_size = sizeof old};

	(void)state;
	path_of(path, sizeof path, "r.safetensors");
	make_model(path, 3, sizes, 9);
	devcache_ctx_t *ctx = mw_open_ctx("max_cache_vram:100K");
	devcache_device_t *dev = mw_device(ctx, "good:0"), *host = mw_device(ctx, "host");
	/* A miss reads and uploads the tensors. */
	memset(&r, 0xff, sizeof r);
	assert_int_equal(devcache_model_load(ctx, path, dev, &args, &m), 0);
	assert_int_equal(r.hit, 0);
	assert_int_equal(r.from_ram, 0);
	assert_int_equal(r.bytes_read, 75003);
	assert_int_equal(r.bytes_uploaded, 75003);
	assert_int_equal(r.device_bytes, 75003);
	assert_int_equal(r.host_bytes, 0);
	assert_true(r.seconds >= 0 && r.seconds < 60);
	/* A hit reads nothing. */
	assert_int_equal(devcache_model_load(ctx, path, dev, &args, &m2), 0);
	assert_ptr_equal(m, m2);
	assert_int_equal(r.hit, 1);
	assert_int_equal(r.bytes_read, 0);
	assert_int_equal(r.bytes_uploaded, 0);
	devcache_model_release(m2);
	devcache_model_release(m);
	/* Pushed into RAM by another model, then a hit from RAM: uploaded,
	 * not read. */
	char other[512];
	path_of(other, sizeof other, "r2.safetensors");
	make_model(other, 3, sizes, 10);
	assert_int_equal(devcache_model_load(ctx, other, dev, NULL, &m2), 0);
	devcache_model_release(m2);
	assert_int_equal(devcache_model_load(ctx, path, dev, &args, &m), 0);
	assert_int_equal(r.hit, 1);
	assert_int_equal(r.from_ram, 1);
	assert_int_equal(r.bytes_read, 0);
	/* The whole allocation, padding included, goes back. */
	assert_true(r.bytes_uploaded >= 75003 && r.bytes_uploaded < 75003 + 3 * 256);
	check_tensors(m, 3, sizes, 9);
	devcache_model_release(m);
	/* A program built against the first header: its smaller struct is
	 * taken, the rest defaults. */
	assert_int_equal(devcache_model_load(ctx, path, host, (devcache_load_args_t *)&old, &m), 0);
	check_tensors(m, 3, sizes, 9);
	devcache_model_release(m);
	/* On the host nothing is read now: the file is mapped. */
	assert_int_equal(devcache_model_load(ctx, path, host, &args, &m), 0);
	assert_int_equal(r.hit, 1);
	assert_int_equal(r.host_bytes, 75003);
	assert_int_equal(r.device_bytes, 0);
	devcache_model_release(m);
	/* Sizes no header ever had, and flags no release knows. */
	args.struct_size = sizeof args + 8;
	assert_int_equal(devcache_model_load(ctx, path, host, &args, &m), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "not that of any known devcache_load_args_t");
	args.struct_size = sizeof args;
	args.flags = 0x80;
	assert_int_equal(devcache_model_load(ctx, path, host, &args, &m), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "unknown flags 0x80");
	devcache_close(ctx);
}

static void bad_arguments_fail_cleanly(void **state)
{
	devcache_model_t *m;
	devcache_load_args_t small = {.struct_size = 4};

	(void)state;
	devcache_ctx_t *ctx = mw_open_ctx(NULL);
	devcache_ctx_t *other = mw_open_ctx(NULL);
	devcache_device_t *host = mw_device(ctx, "host");
	assert_int_equal(devcache_model_load(NULL, "x", host, NULL, &m), DEVCACHE_EINVAL);
	assert_int_equal(devcache_model_load(ctx, NULL, host, NULL, &m), DEVCACHE_EINVAL);
	assert_int_equal(devcache_model_load(ctx, "x", host, &small, &m), DEVCACHE_EINVAL);
	assert_int_equal(devcache_model_load(other, "x", host, NULL, &m), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "belongs to another context");
	assert_int_equal(devcache_model_load(ctx, "/nonexistent/model.gguf", host, NULL, &m),
			 DEVCACHE_ENOENT);
	assert_contains(devcache_last_error(), "/nonexistent/model.gguf: cannot open");
	devcache_model_release(NULL);
	devcache_close(other);
	devcache_close(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TMPDIR_TEST(host_load_is_zero_copy),
		TMPDIR_TEST(writable_host_load_leaves_the_file_alone),
		TMPDIR_TEST(device_load_streams_through_the_ring),
		TMPDIR_TEST(direct_io_and_page_cache_advice_load_the_same_bytes),
		TMPDIR_TEST(budgets_evict_least_recently_used_unlocked),
		TMPDIR_TEST(allocator_pressure_evicts_unlocked_models),
		TMPDIR_TEST(a_ram_copy_makes_the_reload_a_copy),
		TMPDIR_TEST(memory_use_is_logged_at_each_load_and_eviction),
		TMPDIR_TEST(evicted_host_models_leave_the_page_cache),
		TMPDIR_TEST(cancelled_and_failed_loads_leave_nothing),
		TMPDIR_TEST(a_progress_callback_cannot_load_its_own_model),
		TMPDIR_TEST(a_file_that_shrinks_while_streaming_is_an_error),
		TMPDIR_TEST(driver_faults_mid_load_leave_nothing),
		TMPDIR_TEST(threads_loading_one_file_share_one_model),
		TMPDIR_TEST(each_load_says_what_it_did),
		TMPDIR_TEST(a_hit_is_found_by_identity_without_parsing),
		cmocka_unit_test(bad_arguments_fail_cleanly),
	};

	return RUN_TAP(tests);
}
