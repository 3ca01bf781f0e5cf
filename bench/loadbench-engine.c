/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* loadbench-engine.c - bench/loadbench's engine figures: devcache_model_file_read_tensors() into the caller's device buffers, against the model cache's load and a naive read() + copy of each tensor. */
#include <config.h>

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loadbench.h"

/* The caller's buffer: one device allocation holding every tensor at a
 * multiple of 256 bytes, as an engine's backend buffer does. */
struct engine_buf {
	devcache_model_file_t *mf;
	devcache_tensor_dest_t *d;
	size_t n;
	void *block;
	uint64_t bytes;
};

static bool buf_open(devcache_device_t *dev, const struct model *m, struct engine_buf *b)
{
	uint64_t off = 0;

	memset(b, 0, sizeof *b);
	if (devcache_model_file_open(m->path, &b->mf))
		return fault("devcache_model_file_open(%s): %s", m->path, devcache_last_error());
	b->n = devcache_model_file_tensor_count(b->mf);
	b->d = xcalloc(b->n, sizeof *b->d);
	for (size_t i = 0; i < b->n; i++) {
		devcache_tensor_info_t info;

		devcache_model_file_tensor(b->mf, i, &info);
		b->d[i] = (devcache_tensor_dest_t){.name = info.name, .size = info.size,
						   .dst = (void *)(uintptr_t)off};
		off = (off + info.size + 255) & ~(uint64_t)255;
	}
	b->bytes = off;
	if (devcache_alloc(dev, (size_t)off, NULL, &b->block))
		return fault("devcache_alloc(%llu): %s", (unsigned long long)off,
			     devcache_last_error());
	for (size_t i = 0; i < b->n; i++)
		b->d[i].dst = (char *)b->block + (uintptr_t)b->d[i].dst;
	return true;
}

static void buf_close(devcache_device_t *dev, struct engine_buf *b)
{
	devcache_free(dev, b->block);
	free(b->d);
	devcache_model_file_close(b->mf);
}

/* The first and last 4 KiB of each tensor against the file (benchdev's
 * memory is host memory). */
static bool buf_matches(const struct model *m, const struct engine_buf *b)
{
	int fd = open(m->path, O_RDONLY | O_CLOEXEC);
	char page[PAGE];
	bool ok = fd >= 0;

	for (size_t i = 0; ok && i < b->n; i++) {
		devcache_tensor_info_t info;

		devcache_model_file_find(b->mf, b->d[i].name, &info);
		size_t len = info.size < PAGE ? (size_t)info.size : PAGE;
		uint64_t tail = info.size - len;

		ok = pread(fd, page, len, (off_t)info.offset) == (ssize_t)len &&
		     !memcmp(page, b->d[i].dst, len) &&
		     pread(fd, page, len, (off_t)(info.offset + tail)) == (ssize_t)len &&
		     !memcmp(page, (char *)b->d[i].dst + tail, len);
	}
	if (fd >= 0)
		close(fd);
	return ok || fault("the tensors read into the caller's buffer differ from %s", m->path);
}

static bool timed_read(devcache_device_t *dev, const struct model *m, struct engine_buf *b,
		       struct figure *f)
{
	double t0;
	uint64_t peak;
	int err;

	peak_start();
	t0 = now_seconds();
	err = devcache_model_file_read_tensors(b->mf, dev, b->d, b->n, NULL);
	double t = now_seconds() - t0;

	peak = peak_end();
	if (err)
		return fault("devcache_model_file_read_tensors(%s): %s", m->path,
			     devcache_last_error());
	record(f, t, peak);
	f->dev_bytes = b->bytes;
	if (peak > b->bytes && peak - b->bytes > f->over)
		f->over = peak - b->bytes;
	return buf_matches(m, b);
}

/* What an engine without a loader does: for each tensor, malloc and read()
 * its bytes, copy them to the device, free. */
static bool timed_naive(devcache_device_t *dev, const struct model *m, struct engine_buf *b,
			struct figure *f)
{
	int fd = open(m->path, O_RDONLY | O_CLOEXEC);
	double t0;

	if (fd < 0)
		return fault("%s: cannot open", m->path);
	memset(b->block, 0, (size_t)b->bytes);
	peak_start();
	t0 = now_seconds();
	for (size_t i = 0; i < b->n; i++) {
		devcache_tensor_info_t info;
		char *buf;

		devcache_model_file_find(b->mf, b->d[i].name, &info);
		buf = xcalloc(1, (size_t)info.size + 1);
		for (uint64_t done = 0; done < info.size;) {
			ssize_t r = pread(fd, buf + done, (size_t)(info.size - done),
					  (off_t)(info.offset + done));

			if (r <= 0) {
				close(fd);
				return fault("%s: short read", m->path);
			}
			done += (uint64_t)r;
		}
		devcache_copy_to_device(dev, b->d[i].dst, buf, (size_t)info.size, NULL);
		free(buf);
	}
	double t = now_seconds() - t0;

	record(f, t, peak_end());
	close(fd);
	return buf_matches(m, b);
}

/* One run: into a fresh buffer, into the same buffer again, then the
 * naive loader into it. */
static bool run_engine(const struct model *m, struct engine_result *r)
{
	devcache_ctx_t *ctx = open_ctx(NULL);
	devcache_device_t *dev = device(ctx, "benchdev:0");
	struct engine_buf b;
	bool ok = buf_open(dev, m, &b) && timed_read(dev, m, &b, &r->read_cold) &&
		  timed_read(dev, m, &b, &r->read_warm) && timed_naive(dev, m, &b, &r->naive);
	devcache_cache_stats_t cs;

	if (ok && (devcache_cache_stats(ctx, &cs) || cs.models || cs.misses))
		ok = fault("devcache_model_file_read_tensors() left a model in the cache");
	buf_close(dev, &b);
	devcache_close(ctx);
	return ok;
}

void measure_engine(const struct model *m, struct engine_result *r)
{
	memset(r, 0, sizeof *r);
	printf("\n-- engine: %s into the caller's buffer on benchdev:0, %llu bytes (%.2f GiB), "
	       "%zu tensors\n", m->l->file, (unsigned long long)m->size, gib(m->size), m->n);
	if (!warm_beside_copy(m, r->why, sizeof r->why))
		return;
	r->measured = true;
	/* The two loaders in turn, each first in every other run: the one
	 * that follows the other's freed gigabyte pays for it otherwise. */
	for (int i = 0; i < reps; i++) {
		bool ok = i % 2 ? run_engine(m, r) && run_staged(m->path, &r->cache_cold, &r->cache_warm)
				: run_staged(m->path, &r->cache_cold, &r->cache_warm) && run_engine(m, r);

		if (!ok)
			exit(2);
	}
	print_head("file");
	print_row("model cache: staged load, fresh memory", &r->cache_cold, m->size, NULL);
	print_row("model cache: staged load, memory cached", &r->cache_warm, m->size, NULL);
	print_row("read_tensors into caller's fresh buffer", &r->read_cold, m->size, NULL);
	print_row("read_tensors into caller's buffer again", &r->read_warm, m->size, NULL);
	print_row("naive: malloc + pread + copy per tensor", &r->naive, m->size, NULL);
	printf("read_tensors: peak RSS less the caller's buffer (%.1f MiB, counted in RSS on "
	       "benchdev): %.1f MiB fresh, %.1f MiB again\n",
	       mib(r->read_cold.dev_bytes), mib(r->read_cold.over), mib(r->read_warm.over));
}

void engine_targets(const struct model *m, const struct engine_result *r, uint64_t ring)
{
	(void)m;
	if (!r->measured) {
		print_target("engine/read-into-speed", "SKIP", "%s", r->why);
		print_target("engine/read-into-rss", "SKIP", "%s", r->why);
		return;
	}
	double rd = median(&r->read_warm), ld = median(&r->cache_warm);
	double rc = median(&r->read_cold), lc = median(&r->cache_cold);
	double nv = median(&r->naive);

	/* "At least as fast": within 5%, the spread of runs on a shared machine. */
	print_target("engine/read-into-speed", rd <= 1.05 * ld && rc <= 1.05 * lc ? "PASS" : "MISS",
		     "read_tensors %.1f ms (fresh %.1f) vs the cache's load %.1f ms (fresh %.1f); "
		     "naive %.1f ms (%.2fx read_tensors) (target <= 1.05x the load)",
		     rd * 1e3, rc * 1e3, ld * 1e3, lc * 1e3, nv * 1e3, nv / rd);
	uint64_t over = r->read_cold.over > r->read_warm.over ? r->read_cold.over : r->read_warm.over;
	uint64_t limit = ring + 32 * MIB;

	print_target("engine/read-into-rss", over <= limit ? "PASS" : "MISS",
		     "peak RSS less the caller's buffer %.1f MiB (target <= ring %.0f MiB + 32 MiB "
		     "= %.0f MiB)", mib(over), mib(ring), mib(limit));
}
