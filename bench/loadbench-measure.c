/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* loadbench-measure.c - bench/loadbench's measurement core: peak RSS, contexts and loads, the timed loaders (cat, a naive read(), zero-copy, staged) and the report's lines. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "loadbench.h"

extern char **environ;

/* The first load that failed, and whether one did (loadbench.h). */
char load_error[1200];
bool load_failed;

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);

	if (!p) {
		fprintf(stderr, "loadbench: out of memory\n");
		exit(2);
	}
	return p;
}

/* ---- memory figures ---------------------------------------------------------- */

/* A kB field of /proc/self/status (VmRSS, VmHWM), in bytes; 0 if absent. */
uint64_t status_bytes(const char *field)
{
	char buf[4096];
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
	const char *p;

	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strstr(buf, field);
	return p ? strtoull(p + strlen(field), NULL, 10) * 1024 : 0;
}

uint64_t meminfo_bytes(const char *field)
{
	char line[256];
	uint64_t v = 0;
	FILE *f = fopen("/proc/meminfo", "r");

	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, field, strlen(field)))
			v = strtoull(line + strlen(field), NULL, 10) * 1024;
	if (f)
		fclose(f);
	return v;
}

/* Peak RSS over a stretch of code: the kernel's VmHWM, reset by writing 5
 * to /proc/self/clear_refs; where that is refused, a thread sampling
 * VmRSS every millisecond (which can miss a peak shorter than that). */
bool use_hwm;
static struct {
	pthread_t thread;
	bool on;
	uint64_t max;
} sampler;

bool hwm_reset(void)
{
	int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
	bool ok = fd >= 0 && write(fd, "5", 1) == 1;

	if (fd >= 0)
		close(fd);
	return ok;
}

static void *sample_main(void *arg)
{
	const struct timespec ms = { 0, 1000000 };

	(void)arg;
	while (__atomic_load_n(&sampler.on, __ATOMIC_RELAXED)) {
		uint64_t rss = status_bytes("VmRSS:");

		if (rss > sampler.max)
			sampler.max = rss;
		nanosleep(&ms, NULL);
	}
	return NULL;
}

void peak_start(void)
{
	if (use_hwm && hwm_reset())
		return;
	use_hwm = false;
	sampler.max = status_bytes("VmRSS:");
	__atomic_store_n(&sampler.on, true, __ATOMIC_RELAXED);
	if (pthread_create(&sampler.thread, NULL, sample_main, NULL) != 0) {
		fprintf(stderr, "loadbench: cannot start the RSS sampler\n");
		exit(2);
	}
}

uint64_t peak_end(void)
{
	uint64_t rss = status_bytes("VmRSS:");

	if (use_hwm)
		return status_bytes("VmHWM:");
	__atomic_store_n(&sampler.on, false, __ATOMIC_RELAXED);
	pthread_join(sampler.thread, NULL);
	return sampler.max > rss ? sampler.max : rss;
}

/* ---- contexts and the model cache ------------------------------------------------- */

devcache_ctx_t *open_ctx(const char *extra)
{
	char opts[8400];
	devcache_ctx_t *ctx;
	int err;

	/* Only the bench module besides the built-in host backend, so that
	 * backends installed on the machine play no part. */
	snprintf(opts, sizeof opts, "backend_path:%s,backends:benchdev%s%s%s%s", module_dir,
		 extra ? "," : "", extra ? extra : "", extra_options ? "," : "",
		 extra_options ? extra_options : "");
	if ((err = bench_open(&ctx, opts)) != 0)
		bench_fail(opts, err);
	return ctx;
}

devcache_device_t *device(devcache_ctx_t *ctx, const char *id)
{
	devcache_device_t *dev;
	int err = devcache_device_get(ctx, id, &dev);

	if (err)
		bench_fail(id, err);
	return dev;
}

/* A fault of a figure: kept in load_error and told on stderr; false. */
bool fault(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(load_error, sizeof load_error, fmt, ap);
	va_end(ap);
	fprintf(stderr, "loadbench: %s\n", load_error);
	load_failed = true;
	return false;
}

/* devcache_model_load(), its failure kept in load_error. */
bool try_load(devcache_ctx_t *ctx, const char *path, devcache_device_t *dev,
	      const devcache_load_args_t *args, devcache_model_t **model_p)
{
	devcache_device_info_t info;
	int err = devcache_model_load(ctx, path, dev, args, model_p);

	if (err) {
		char why[1024];

		snprintf(why, sizeof why, "%s", devcache_last_error());
		if (devcache_device_info(dev, &info))
			snprintf(info.id, sizeof info.id, "?");
		return fault("devcache_model_load(%s onto %s) failed: %s (%s)", path, info.id,
			     devcache_strerror(err), why);
	}
	return true;
}

/* Reads one byte of every page of every tensor (a host model's bytes). */
uint64_t touch(const devcache_model_t *model)
{
	size_t n = devcache_model_file_tensor_count(devcache_model_file(model));
	uint64_t sum = 0;

	for (size_t i = 0; i < n; i++) {
		devcache_tensor_info_t info;
		void *data;

		if (devcache_model_tensor_at(model, i, &info, &data))
			bench_fail("devcache_model_tensor_at", DEVCACHE_ENOENT);
		for (uint64_t off = 0; off < info.size; off += PAGE)
			sum += ((const volatile unsigned char *)data)[off];
	}
	return sum;
}

/* A staged model's tensors must hold the file's bytes: the first and last
 * 4 KiB of each are compared with the file, or with its shard in a set
 * (the emulated device's memory is host memory; a partial model's host
 * tensors are the file's mapping). */
bool staged_matches(const devcache_model_t *model)
{
	const devcache_model_file_t *mf = devcache_model_file(model);
	size_t n = devcache_model_file_tensor_count(mf);
	size_t n_files = devcache_model_file_shard_count(mf);
	int *fds = xcalloc(n_files, sizeof *fds);
	char buf[PAGE];
	bool ok = true;

	for (size_t k = 0; k < n_files; k++) {
		const char *path;
		uint64_t size;

		fds[k] = devcache_model_file_shard(mf, k, &path, &size) ? -1
			 : open(path, O_RDONLY | O_CLOEXEC);
		ok &= fds[k] >= 0;
	}
	for (size_t i = 0; ok && i < n; i++) {
		devcache_tensor_info_t info;
		void *data;

		if (devcache_model_tensor_at(model, i, &info, &data) || info.shard >= n_files) {
			ok = false;
			break;
		}
		size_t len = info.size < PAGE ? (size_t)info.size : PAGE;
		uint64_t tail = info.size - len;
		int fd = fds[info.shard];

		ok = pread(fd, buf, len, (off_t)info.offset) == (ssize_t)len &&
		     !memcmp(buf, data, len) &&
		     pread(fd, buf, len, (off_t)(info.offset + tail)) == (ssize_t)len &&
		     !memcmp(buf, (char *)data + tail, len);
	}
	for (size_t k = 0; k < n_files; k++)
		if (fds[k] >= 0)
			close(fds[k]);
	free(fds);
	return ok;
}

/* ---- the figures -------------------------------------------------------------------- */

double median(const struct figure *f)
{
	double s[MAX_REPS];

	memcpy(s, f->t, (size_t)f->n * sizeof *s);
	qsort(s, (size_t)f->n, sizeof *s, bench_cmp_double);
	return f->n % 2 ? s[f->n / 2] : (s[f->n / 2 - 1] + s[f->n / 2]) / 2;
}

void record(struct figure *f, double t, uint64_t peak)
{
	f->t[f->n++] = t;
	if (peak > f->peak)
		f->peak = peak;
}

/* cat FILE > /dev/null, spawned and waited for.  Its peak RSS is not
 * reported: with posix_spawn's vfork, ru_maxrss counts this process's. */
void run_cat(const struct model *m, struct figure *f)
{
	char *argv[] = { "cat", (char *)m->path, NULL };
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int status, err;
	double t0 = now_seconds();

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	err = posix_spawn(&pid, "/bin/cat", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (err) {
		f->skipped = true;
		snprintf(f->why, sizeof f->why, "cannot run /bin/cat: %s", strerror(err));
		return;
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		f->skipped = true;
		snprintf(f->why, sizeof f->why, "/bin/cat %.200s failed", m->path);
		return;
	}
	record(f, now_seconds() - t0, 0);
	f->no_rss = true;
}

/* What a program does without a loader: malloc the file's size and read()
 * the whole file into it. */
void run_naive(const struct model *m, struct figure *f)
{
	double t0;
	char *buf;
	uint64_t done = 0;
	int fd;

	peak_start();
	t0 = now_seconds();
	buf = malloc(m->size);
	fd = open(m->path, O_RDONLY | O_CLOEXEC);
	if (!buf || fd < 0) {
		fprintf(stderr, "loadbench: naive loader: %s: %s\n", m->path, strerror(errno));
		exit(2);
	}
	while (done < m->size) {
		ssize_t n = read(fd, buf + done, m->size - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "loadbench: naive loader: %s: short read\n", m->path);
			exit(2);
		}
		done += (uint64_t)n;
	}
	close(fd);
	double t = now_seconds() - t0;

	record(f, t, peak_end());
	free(buf);
}

/* A fresh context each run, so every load is a miss.  path is a file or a
 * set's index.  False (load_error says why) when the load fails. */
bool run_zero_copy(const char *path, struct figure *load_f, struct figure *touch_f)
{
	devcache_ctx_t *ctx = open_ctx(NULL);
	devcache_device_t *host = device(ctx, "host");
	devcache_cache_stats_t cs;
	devcache_model_t *model;
	double t0;
	bool ok;

	peak_start();
	t0 = now_seconds();
	ok = try_load(ctx, path, host, NULL, &model);
	double t = now_seconds() - t0;
	uint64_t peak = peak_end();

	if (!ok) {
		devcache_close(ctx);
		return false;
	}
	record(load_f, t, peak);
	devcache_cache_stats(ctx, &cs);
	if (cs.misses != 1 || cs.hits != 0) {
		devcache_model_release(model);
		devcache_close(ctx);
		return fault("zero-copy load of %s was not a miss", path);
	}
	peak_start();
	t0 = now_seconds();
	touch(model);
	t = now_seconds() - t0;
	record(touch_f, t, peak_end());
	devcache_model_release(model);
	devcache_close(ctx);
	return true;
}

static bool staged_load(devcache_ctx_t *ctx, devcache_device_t *dev, const char *path,
			struct figure *f)
{
	devcache_model_t *model;
	uint64_t used, budget, peak;
	double t0;
	bool ok;

	peak_start();
	t0 = now_seconds();
	ok = try_load(ctx, path, dev, NULL, &model);
	double t = now_seconds() - t0;

	peak = peak_end();
	if (!ok)
		return false;
	record(f, t, peak);
	if (devcache_cache_device_usage(ctx, dev, &used, &budget))
		bench_fail("devcache_cache_device_usage", DEVCACHE_EINVAL);
	f->dev_bytes = used;
	if (peak > used && peak - used > f->over)
		f->over = peak - used;
	ok = staged_matches(model);
	devcache_model_release(model);
	return ok || fault("the staged copy of %s differs from the file", path);
}

/* The staging path onto benchdev:0: a first load into fresh device memory
 * (the emulated device's pages are faulted in by the copies), then, after
 * evicting it, a load into the block the allocator kept cached, as device
 * memory already in use is on a GPU. */
bool run_staged(const char *path, struct figure *cold, struct figure *warm_f)
{
	devcache_ctx_t *ctx = open_ctx(NULL);
	devcache_device_t *dev = device(ctx, "benchdev:0");
	bool ok = staged_load(ctx, dev, path, cold);

	if (ok && devcache_cache_evict_all(ctx) != 1)
		ok = fault("%s was not evicted", path);
	ok = ok && staged_load(ctx, dev, path, warm_f);
	devcache_close(ctx);
	return ok;
}

/* ---- the report ------------------------------------------------------------------------- */

bool missed;

void print_target(const char *id, const char *verdict, const char *fmt, ...)
{
	va_list ap;

	missed |= strcmp(verdict, "MISS") == 0;
	printf("TARGET %-28s %s  ", id, verdict);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

/* The head of a table of loads; the GB/s are of what (the file, the upload). */
void print_head(const char *per)
{
	char unit[32];

	snprintf(unit, sizeof unit, "(%s)", per);
	printf("%-46s %10s %10s %10s\n", "loader (median of runs; peak RSS: highest)", "time ms",
	       "GB/s", "peak RSS");
	printf("%-46s %10s %10s %10s\n", "", "", unit, "MiB");
}

void print_row(const char *label, const struct figure *f, uint64_t bytes,
	       const char *rss_note)
{
	if (f->skipped) {
		printf("%-46s SKIP  %s\n", label, f->why);
		return;
	}
	double t = median(f);

	printf("%-46s %10.2f %10.2f ", label, t * 1e3, (double)bytes / t / 1e9);
	if (f->no_rss)
		printf("%10s  (another process)\n", "-");
	else
		printf("%10.1f%s\n", mib(f->peak), rss_note ? rss_note : "");
}

uint64_t ring_bytes(void)
{
	devcache_ctx_t *ctx = open_ctx(NULL);
	char n[64], size[64];
	uint64_t ring;

	if (devcache_config_get(ctx, "staging_buffers", n, sizeof n, NULL) ||
	    devcache_config_get(ctx, "staging_buffer_size", size, sizeof size, NULL))
		bench_fail("devcache_config_get", DEVCACHE_ENOENT);
	char *unit;
	double v = strtod(size, &unit);
	uint64_t mult = *unit == 'K' ? 1024 : *unit == 'M' ? MIB : *unit == 'G' ? GIB : 1;

	ring = (uint64_t)strtoull(n, NULL, 10) * (uint64_t)(v * (double)mult);
	printf("staging ring: staging_buffers %s x staging_buffer_size %s = %.0f MiB%s\n", n, size,
	       mib(ring), extra_options ? "" : " (the defaults)");
	devcache_close(ctx);
	return ring;
}
