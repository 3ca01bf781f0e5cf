/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-host-faults.c - every allocation, file read and load worker of a scripted workload failed in turn: a clean error, nothing leaked, and the context loads byte-exact afterwards. */
#include "config.h"

#include "tap.h"
#include "model-writer.h"
#include "interpose.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <devcache.h>

/*
 * The workload (workload()): open a context on the host and the test
 * module's device good:0; load a safetensors file, a GGUF file and a GGUF
 * split of two files on the host; load a sharded safetensors set (its
 * index JSON) and the GGUF file onto good:0 through the staging ring,
 * three load workers reading 64 KiB chunks, under a device budget that
 * holds one of the two, so that the GGUF file evicts the set to RAM and
 * loading the set again copies it back; read every tensor back through its pointer and through
 * devcache_model_tensor_copy(); allocate and free on both devices; print
 * the statistics, summaries and snapshot; evict everything; close.  Three
 * variants: host models mapped (mmap); host models read into memory and
 * the uploads read with O_DIRECT (direct_io); and a device budget that
 * holds neither the set nor the GGUF file, so that both load partially
 * and tensors are moved to the device and back, with host models mapped
 * writable and memory use logged (partial).
 *
 * Each library call runs inside the window of tests/interpose.c, the
 * test's own checks outside it.  A sweep runs the workload clean to count
 * the calls of one kind (twice: the first run fills libc's one-time
 * caches), then once for each N, the Nth call failing.  Either the
 * workload goes through, every tensor byte-exact (an allocation the
 * library can do without, a retried read), or the call that met the fault
 * fails: a DEVCACHE_E* code and a detail message of its own, which a judge
 * per kind of fault reads.  Then, with nothing failing any more, the same
 * context loads the model that failed and the others, byte-exact; once
 * everything is evicted the caches' and the allocators' use is back to
 * zero; and once the context is closed no block that the library, json-c
 * or the backend allocated is left, and no file descriptor.
 *
 * The mmap and direct_io variants take the staging settings from two
 * configuration files, the user's and DEVCACHE_CONF's, so that their
 * reads and allocations are in the sweeps too.
 *
 * To look at one sweep closely: TEST_VERBOSE=1 prints each failure's
 * message, TEST_FAULT=N runs the Nth fault of each sweep alone.
 */

#define SEED_ST 11
#define SEED_GGUF 12
#define SEED_SET 13
#define SEED_SPLIT 14
/* Sweeps longer than this are sampled past their first SWEEP_HEAD calls. */
#define SWEEP_MAX 5000
#define SWEEP_HEAD 200
#define COUNT(a) (sizeof(a) / sizeof *(a))

struct model {
	const char *what;
	char path[512];
	const struct mw_tensor *t;
	size_t n;
	unsigned seed;
};

/* Small, but the GGUF file and the set's first shard are more than one
 * 64 KiB staging buffer, so that their uploads start load workers. */
static const struct mw_tensor st_tensors[] = {
	{"embed.weight", 30000, 0}, {"norm.bias", 255, 0}, {"head.weight", 5003, 0}};
static const struct mw_tensor gguf_tensors[] = {
	{"blk.0.attn_q.weight", 70000, 0}, {"blk.0.ffn.weight", 10000, 0}, {"output_norm", 77, 0}};
static const struct mw_tensor set_tensors[] = {
	{"a.weight", 80000, 0}, {"b.weight", 20001, 1}, {"c.bias", 3, 1}, {"d.weight", 10000, 2}};

static const struct mw_tensor split_tensors[] = {
	{"tok_embd.weight", 3000, 0}, {"blk.0.w", 2000, 1}, {"output.weight", 1000, 1}};

static char dir[256];
static struct model st = {"the safetensors file", "", st_tensors, COUNT(st_tensors), SEED_ST};
static struct model gguf = {"the GGUF file", "", gguf_tensors, COUNT(gguf_tensors), SEED_GGUF};
static struct model set = {"the sharded set", "", set_tensors, COUNT(set_tensors), SEED_SET};
static struct model split = {"the GGUF split", "", split_tensors, COUNT(split_tensors), SEED_SPLIT};

struct variant {
	const char *name;
	const char *options;
	unsigned host_flags; /* devcache_load_args_t.flags of host loads */
	/* Part of the options come from configuration files: the user's
	 * (XDG_CONFIG_HOME) and DEVCACHE_CONF's, which setup() writes. */
	bool files;
};

/* The budget on good:0 holds the set or the GGUF file, not both; in the
 * partial variant, neither. */
static const struct variant mapped = {"mmap", "mmap:true,direct_io:false,max_cache_vram:150K", 0,
				      true};
static const struct variant direct = {"direct_io", "mmap:false,direct_io:true,max_cache_vram:150K",
				      0, true};
static const struct variant partial = {
	"partial",
	"mmap:true,partial_loading:true,max_cache_vram:60K,log_memory_usage:true",
	DEVCACHE_LOAD_WRITABLE};

#define GET_DEV "devcache_device_get good:0"
#define RESIDENT "devcache_model_make_resident"
#define TO_HOST "devcache_model_move_to_host"

/* Where the test's copies of tensors and the summaries go: static, so that
 * nothing in the window allocates for the test. */
static unsigned char copy_buf[128 << 10];
static char sink_buf[1 << 16];
static FILE *sink;
/* What devcache_last_error() says before each call: a message that no
 * failure of the call can leave. */
static char sentinel[256];

static void log_nothing(void *user, enum devcache_log_level level, const char *message)
{
	(void)user, (void)level, (void)message;
}

static void set_sentinel(void)
{
	devcache_model_t *m;

	devcache_model_load(NULL, NULL, NULL, NULL, &m);
}

/* One run of the workload. */
struct run {
	const struct variant *v;
	devcache_ctx_t *ctx;
	devcache_device_t *host, *dev;
	int rc;                      /* the failed call's code; 0: none failed */
	const char *step;            /* and what it was */
	char why[1024];              /* its detail message */
	const struct model *failed;  /* the model it was loading, if any */
	devcache_device_t *failed_on;
	bool from_ram;               /* the set's second load was a copy from RAM */
	bool partial;                /* a model loaded partially */
};

static bool failed(struct run *r, const char *step)
{
	r->step = step;
	snprintf(r->why, sizeof r->why, "%s", devcache_last_error());
	return false;
}

/* expr, a library call returning 0 or an error, in the window. */
#define CALL(r, step, expr)                                                                    \
	(set_sentinel(), ip_window(true), (r)->rc = (expr), ip_window(false),                    \
	 (r)->rc ? failed((r), (step)) : true)

/* A call whose result is not judged, in the window. */
#define IN_WINDOW(stmt)                                                                        \
	do {                                                                                   \
		ip_window(true);                                                               \
		stmt;                                                                          \
		ip_window(false);                                                              \
	} while (0)

/* Every tensor of m: the bytes its pointer shows (host memory on both
 * devices: good's device memory is this process's), and a copy through
 * devcache_model_tensor_copy(), which reads a mapped file with pread(). */
static bool check_model(struct run *r, devcache_model_t *m, const struct model *mo,
			const char *step)
{
	for (size_t i = 0; i < mo->n; i++) {
		devcache_tensor_info_t info;
		void *data;

		assert_int_equal(devcache_model_tensor(m, mo->t[i].name, &info, &data), 0);
		assert_int_equal(info.size, mo->t[i].size);
		mw_check(mo->t[i].name, data, info.size, mo->seed);
		memset(copy_buf, 0, info.size);
		if (!CALL(r, step,
			  devcache_model_tensor_copy(m, mo->t[i].name, copy_buf, info.size)))
			return false;
		mw_check(mo->t[i].name, copy_buf, info.size, mo->seed);
	}
	return true;
}

/* A partial model's last tensor to the device, everything back to the
 * host, its second tensor to the device (each fits the partial variant's
 * budget); every tensor checked after each move. */
static bool move_tensors(struct run *r, devcache_model_t *m, const struct model *mo)
{
	const char *last = mo->t[mo->n - 1].name, *second = mo->t[1].name;

	r->partial = true;
	return CALL(r, RESIDENT, devcache_model_make_resident(m, &last, 1, NULL)) &&
	       check_model(r, m, mo, RESIDENT) &&
	       CALL(r, TO_HOST, devcache_model_move_to_host(m, NULL, 0)) &&
	       check_model(r, m, mo, TO_HOST) &&
	       CALL(r, RESIDENT, devcache_model_make_resident(m, &second, 1, NULL)) &&
	       check_model(r, m, mo, RESIDENT);
}

static bool load(struct run *r, const struct model *mo, devcache_device_t *dev, const char *step)
{
	devcache_model_t *m = NULL;
	devcache_load_result_t res;
	devcache_load_args_t args = {.struct_size = sizeof args, .result = &res,
				     .flags = dev == r->host ? r->v->host_flags : 0};
	devcache_model_info_t info;
	bool ok;

	r->failed = mo;
	r->failed_on = dev;
	if (!CALL(r, step, devcache_model_load(r->ctx, mo->path, dev, &args, &m))) {
		assert_null(m);
		return false;
	}
	if (mo == &set && res.hit)
		r->from_ram = res.from_ram;
	assert_int_equal(devcache_model_info(m, &info), 0);
	ok = check_model(r, m, mo, step) && (!info.partial || move_tensors(r, m, mo));
	IN_WINDOW(devcache_model_release(m));
	if (ok)
		r->failed = NULL;
	return ok;
}

static bool allocate(struct run *r)
{
	void *a = NULL, *b = NULL, *h = NULL, *p = NULL;
	bool ok = CALL(r, "devcache_alloc on good:0", devcache_alloc(r->dev, 1000, NULL, &a)) &&
		  CALL(r, "devcache_alloc on good:0", devcache_alloc(r->dev, 3 << 20, NULL, &b)) &&
		  CALL(r, "devcache_host_alloc", devcache_host_alloc(r->dev, 4096, &h)) &&
		  CALL(r, "devcache_alloc on host", devcache_alloc(r->host, 5000, NULL, &p));

	/* The blocks are there to be written, at both ends. */
	if (a)
		((char *)a)[0] = ((char *)a)[999] = 1;
	if (b)
		((char *)b)[0] = ((char *)b)[(3 << 20) - 1] = 2;
	if (p)
		((char *)p)[0] = ((char *)p)[4999] = 3;
	IN_WINDOW({
		if (a)
			devcache_free(r->dev, a);
		if (b)
			devcache_free(r->dev, b);
		if (h)
			devcache_host_free(r->dev, h);
		if (p)
			devcache_free(r->host, p);
	});
	return ok;
}

static bool report(struct run *r)
{
	devcache_stats_t s;
	devcache_cache_stats_t cs;
	bool ok = CALL(r, "devcache_stats", devcache_stats(r->dev, &s)) &&
		  CALL(r, "devcache_host_stats", devcache_host_stats(r->dev, &s)) &&
		  CALL(r, "devcache_summary", devcache_summary(r->dev, sink)) &&
		  CALL(r, "devcache_snapshot", devcache_snapshot(r->dev, sink)) &&
		  CALL(r, "devcache_cache_summary", devcache_cache_summary(r->ctx, sink)) &&
		  CALL(r, "devcache_cache_stats", devcache_cache_stats(r->ctx, &cs));

	fflush(sink);
	return ok;
}

/* A context that opened took every setting of the files: a file read
 * short, or cut where memory ran out, is an error, never a file skipped
 * or half read.  Outside the window. */
static void check_files_applied(devcache_ctx_t *ctx)
{
	static const struct {
		const char *name, *value, *origin;
	} want[] = {
		{"load_workers", "3", "xdg/devcache/devcache.conf:2"},
		{"staging_buffer_size", "64K", "xdg/devcache/devcache.conf:3"},
		{"staging_buffers", "3", "extra.conf:2"},
		{"keep_ram_copy", "true", "extra.conf:3"},
	};

	for (size_t i = 0; i < COUNT(want); i++) {
		char value[64];
		const char *origin = NULL;

		assert_int_equal(devcache_config_get(ctx, want[i].name, value, sizeof value, &origin),
				 0);
		assert_non_null(origin);
		if (strcmp(value, want[i].value) != 0 ||
		    strlen(origin) < strlen(want[i].origin) ||
		    strcmp(origin + strlen(origin) - strlen(want[i].origin), want[i].origin) != 0)
			fail_msg("%s is %s from %s, not %s from %s: a configuration file was not "
				 "read whole",
				 want[i].name, value, origin, want[i].value, want[i].origin);
	}
}

static void workload(struct run *r)
{
	char opts[2048];
	devcache_open_args_t args = {.struct_size = sizeof args, .options = opts,
				     .log_fn = log_nothing,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV};

	/* With files, the configuration files give the staging settings
	 * (conf_user, conf_extra), read through the environment. */
	if (r->v->files)
		args.flags = 0;
	snprintf(opts, sizeof opts, "log_level:info,backend_path:%s,backends:good,%s%s",
		 test_env("TEST_MODULES"),
		 r->v->files ? ""
			     : "load_workers:3,staging_buffer_size:64K,staging_buffers:3,"
			       "keep_ram_copy:true,",
		 r->v->options);
	if (!CALL(r, "devcache_open_ex", devcache_open_ex(&r->ctx, &args))) {
		r->ctx = NULL;
		return;
	}
	if (r->v->files)
		check_files_applied(r->ctx);
	if (!CALL(r, "devcache_device_get host", devcache_device_get(r->ctx, "host", &r->host)) ||
	    !CALL(r, GET_DEV, devcache_device_get(r->ctx, "good:0", &r->dev)))
		return;
	if (!load(r, &st, r->host, "load the safetensors file on host") ||
	    !load(r, &gguf, r->host, "load the GGUF file on host") ||
	    !load(r, &split, r->host, "load the GGUF split on host") ||
	    !load(r, &set, r->dev, "load the set on good:0") ||
	    !load(r, &gguf, r->dev, "load the GGUF file on good:0 (the set to RAM)") ||
	    !load(r, &set, r->dev, "load the set on good:0 again (from RAM)") || !allocate(r) ||
	    !report(r))
		return;
	IN_WINDOW(devcache_cache_evict_all(r->ctx));
}

/* The caches and the allocators hold nothing once everything is evicted:
 * a failed call gave back all it had charged and allocated. */
static void assert_empty(struct run *r)
{
	devcache_cache_stats_t cs;
	devcache_stats_t s;
	uint64_t used, budget;

	devcache_cache_evict_all(r->ctx);
	assert_int_equal(devcache_cache_stats(r->ctx, &cs), 0);
	assert_int_equal(cs.models, 0);
	assert_int_equal(cs.locked_models, 0);
	assert_int_equal(cs.ram_copies, 0);
	assert_int_equal(cs.ram_used, 0);
	if (r->host) {
		assert_int_equal(devcache_cache_device_usage(r->ctx, r->host, &used, &budget), 0);
		assert_int_equal(used, 0);
		assert_int_equal(devcache_stats(r->host, &s), 0);
		assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].current, 0);
	}
	if (r->dev) {
		assert_int_equal(devcache_cache_device_usage(r->ctx, r->dev, &used, &budget), 0);
		assert_int_equal(used, 0);
		assert_int_equal(devcache_stats(r->dev, &s), 0);
		assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].current, 0);
		assert_int_equal(devcache_host_stats(r->dev, &s), 0);
		assert_int_equal(s.allocation[DEVCACHE_POOL_ALL].current, 0);
	}
}

/* With nothing failing: the model that failed loads where it failed, and
 * the others too, byte-exact, in the same context.  Only a context whose
 * good backend could not be loaded (the judges say when that may be) has
 * the host alone. */
static void recover(struct run *r)
{
	struct run again = *r;

	if (!again.host)
		assert_int_equal(devcache_device_get(r->ctx, "host", &again.host), 0);
	if (!again.dev && strcmp(r->step, GET_DEV) != 0)
		assert_int_equal(devcache_device_get(r->ctx, "good:0", &again.dev), 0);
	if (r->failed && !load(&again, r->failed, r->failed_on, "the load that failed, again"))
		fail_msg("after a failure of %s, loading %s again fails: %s", r->step,
			 r->failed->what, again.why);
	if (!load(&again, &st, again.host, "load the safetensors file on host") ||
	    !load(&again, &gguf, again.host, "load the GGUF file on host") ||
	    (again.dev && (!load(&again, &set, again.dev, "load the set on good:0") ||
			   !load(&again, &gguf, again.dev, "load the GGUF file on good:0"))))
		fail_msg("after a failure of %s, %s fails: %s", r->step, again.step, again.why);
	r->host = again.host;
	r->dev = again.dev;
}

static size_t count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	size_t n = 0;

	assert_non_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* How the runs of a sweep went: how many failed at each step. */
struct tally {
	unsigned long runs, struck, failed;
	const char *steps[32];
	unsigned long at[32];
};

static void tally_step(struct tally *t, const char *step)
{
	size_t i = 0;

	while (i < COUNT(t->steps) - 1 && t->steps[i] && strcmp(t->steps[i], step) != 0)
		i++;
	t->steps[i] = step;
	t->at[i]++;
}

/* What a run must have done under each kind of fault (rc 0: it went
 * through). */
typedef void judge_fn(const struct run *r, const struct ip_fault *f);

/* A new context has every device and loads onto each, byte-exact. */
static void open_again(const struct variant *v, const struct run *after)
{
	struct run fresh = {.v = v};
	char opts[2048];

	snprintf(opts, sizeof opts, "log_level:error,backend_path:%s,backends:good,%s",
		 test_env("TEST_MODULES"), v->options);
	if (!CALL(&fresh, "devcache_open", devcache_open(&fresh.ctx, opts)) ||
	    !CALL(&fresh, "devcache_device_get host",
		  devcache_device_get(fresh.ctx, "host", &fresh.host)) ||
	    !CALL(&fresh, GET_DEV, devcache_device_get(fresh.ctx, "good:0", &fresh.dev)) ||
	    !load(&fresh, &st, fresh.host, "load the safetensors file on host") ||
	    !load(&fresh, &set, fresh.dev, "load the set on good:0"))
		fail_msg("after a failure of %s, %s fails in a new context: %s", after->step,
			 fresh.step, fresh.why);
	assert_empty(&fresh);
	IN_WINDOW(devcache_close(fresh.ctx));
}

/* One run with fault f armed (NULL: clean); the context closed and
 * everything checked. */
static void one_run(const struct variant *v, const struct ip_fault *f, judge_fn *judge,
		    struct tally *t)
{
	struct run r = {.v = v};
	size_t fds = count_fds();

	ip_reset();
	ip_forget();
	if (f)
		ip_arm(f);
	workload(&r);
	unsigned long struck = ip_fired();

	ip_disarm();
	if (r.rc) {
		assert_in_range(r.rc, DEVCACHE_ERROR_MIN, -1);
		/* The message the thread had before, even wrapped, is not one. */
		if (!r.why[0] || strstr(r.why, sentinel))
			fail_msg("%s failed (%s) and left no message of its own: \"%s\"", r.step,
				 devcache_strerror(r.rc), r.why);
		if (!struck)
			fail_msg("%s failed with no fault struck: %s", r.step, r.why);
		if (getenv("TEST_VERBOSE"))
			print_message("# fault %lu: %s: %s: %s\n", f->nth, r.step,
				      devcache_strerror(r.rc), r.why);
		t->failed++;
		tally_step(t, r.step);
	}
	if (judge && struck)
		judge(&r, f);
	if (r.ctx) {
		if (r.rc)
			recover(&r);
		assert_empty(&r);
		IN_WINDOW(devcache_close(r.ctx));
	}
	/* devcache_open_ex() failed, or good:0 could not be had: the next
	 * context has everything. */
	if (!r.ctx || !r.dev)
		open_again(v, &r);
	t->runs++;
	t->struck += struck > 0;
	size_t leaks = ip_leaks(stdout);
	if (leaks)
		fail_msg("%s, fault %lu of kind %d: %zu block(s) leaked (listed above) after %s",
			 v->name, f ? f->nth : 0, f ? (int)f->kind : -1, leaks,
			 r.rc ? r.step : "a run that went through");
	assert_false(ip_overflowed());
	if (count_fds() != fds)
		fail_msg("%s, fault %lu of kind %d: %zu descriptor(s) open before, %zu after %s",
			 v->name, f ? f->nth : 0, f ? (int)f->kind : -1, fds, count_fds(),
			 r.rc ? r.step : "a run that went through");
}

/* The calls of kind a clean workload makes: the second of two runs, the
 * first filling libc's caches. */
static unsigned long count_calls(const struct variant *v, enum ip_kind kind)
{
	struct tally t = {0};

	one_run(v, NULL, NULL, &t);
	one_run(v, NULL, NULL, &t);
	return ip_calls(kind);
}

/* Fail each call of kind in turn (sampled past SWEEP_HEAD when there are
 * more than SWEEP_MAX). */
static void sweep(const struct variant *v, const struct ip_fault *base, judge_fn *judge,
		  const char *what)
{
	unsigned long calls = count_calls(v, base->kind);
	unsigned long stride =
		calls > SWEEP_MAX ? (calls - SWEEP_HEAD) / (SWEEP_MAX - SWEEP_HEAD) + 1 : 1;
	const char *only = getenv("TEST_FAULT");
	struct tally t = {0};

	if (calls == 0)
		fail_msg("%s: the workload makes no call of kind %d: is it interposed?", v->name,
			 (int)base->kind);
	for (unsigned long n = 1; n <= calls; n += n < SWEEP_HEAD ? 1 : stride) {
		struct ip_fault f = *base;

		if (only && *only && strtoul(only, NULL, 10) != n)
			continue;
		f.nth = n;
		one_run(v, &f, judge, &t);
	}
	print_message("# %s, %s: %lu calls, %lu failed in turn (%s), %lu of them struck; "
		      "%lu went through, %lu failed cleanly:\n",
		      v->name, what, calls, t.runs, stride > 1 ? "sampled" : "every one", t.struck,
		      t.struck - t.failed, t.failed);
	for (size_t i = 0; i < COUNT(t.steps) && t.steps[i]; i++)
		print_message("#   %5lu at %s\n", t.at[i], t.steps[i]);
	/* Nearly every N strikes: a count that moved from run to run would
	 * leave a fault past the end now and then. */
	assert_true(t.struck * 10 >= t.runs * 9);
}

/* ---- the judges ------------------------------------------------------------------- */

/* The base name of path, which a message about the file names. */
static const char *base_name(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash ? slash + 1 : path;
}

/* An allocation failed: the call fails saying so, naming the file it was
 * loading, never calling the file malformed; only a module that dlopen()
 * could not load leaves a context without its device. */
static void judge_alloc(const struct run *r, const struct ip_fault *f)
{
	(void)f;
	if (!r->rc)
		return;
	if (r->rc == DEVCACHE_EFORMAT)
		fail_msg("%s: an allocation failed, and the file is called malformed: %s", r->step,
			 r->why);
	if (r->rc == DEVCACHE_ENOMEM)
		assert_contains(r->why, "memory");
	if (r->failed)
		assert_contains(r->why, base_name(r->failed->path));
	if (strcmp(r->step, GET_DEV) == 0)
		assert_contains(r->why, "cannot load module");
}

/* EIO and ENOSPC: the load fails with DEVCACHE_EIO, naming the file and
 * the error. */
static void judge_read_error(const struct run *r, const struct ip_fault *f)
{
	if (!r->rc)
		fail_msg("%s: a read failed with %s, and the workload went through", r->v->name,
			 strerror(f->err));
	if (r->rc != DEVCACHE_EIO)
		fail_msg("%s: a read failed with %s: %s, not DEVCACHE_EIO: %s", r->step,
			 strerror(f->err), devcache_strerror(r->rc), r->why);
	assert_contains(r->why, base_name(ip_fired_file()));
	assert_contains(r->why, strerror(f->err));
}

/* EINTR, a short read, a worker not started: nothing fails. */
static void judge_none(const struct run *r, const struct ip_fault *f)
{
	if (r->rc)
		fail_msg("%s failed after %s: %s", r->step,
			 f->kind == IP_THREAD ? "pthread_create failed"
			 : f->err	      ? "a read was interrupted (EINTR)"
					      : "a short read",
			 r->why);
}

/* ---- the tests -------------------------------------------------------------------- */

/* The workload itself goes through, reaches every path the sweeps aim at,
 * and leaks nothing. */
static void clean_workload(void **state)
{
	struct run r = {.v = &direct};
	struct tally t = {0};

	(void)state;
	one_run(&mapped, NULL, NULL, &t);
	one_run(&mapped, NULL, NULL, &t);
	ip_reset();
	workload(&r);
	if (r.rc)
		fail_msg("%s: %s", r.step, r.why);
	assert_true(r.from_ram);
	assert_true(ip_calls(IP_THREAD) > 0); /* load workers started */
	assert_true(ip_calls(IP_READ) > 0);
	assert_true(ip_calls(IP_ALLOC) > 0 || !ip_have_alloc());
	assert_empty(&r);
	IN_WINDOW(devcache_close(r.ctx));
	print_message("# a clean run (direct_io): %lu allocations, %lu reads, %lu threads\n",
		      ip_calls(IP_ALLOC), ip_calls(IP_READ), ip_calls(IP_THREAD));
	r = (struct run){.v = &partial};
	workload(&r);
	if (r.rc)
		fail_msg("%s: %s", r.step, r.why);
	assert_true(r.partial);
	assert_empty(&r);
	IN_WINDOW(devcache_close(r.ctx));
}

static void alloc_failures(const struct variant *v)
{
	struct ip_fault f = {.kind = IP_ALLOC};

	if (!ip_have_alloc())
		skip_because("a sanitizer owns malloc; its leak check covers this build");
	sweep(v, &f, judge_alloc, "allocations");
}

/* (The mmap variant allocates as direct_io does: its sweep would find
 * nothing more.  Its mappings are writable in the partial variant.) */
static void alloc_failures_direct(void **state)
{
	(void)state;
	alloc_failures(&direct);
}

static void alloc_failures_partial(void **state)
{
	(void)state;
	alloc_failures(&partial);
}

static const struct variant *const variants[] = {&mapped, &direct, &partial};

static void read_errors_name_the_file(void **state)
{
	static const int errs[] = {EIO, ENOSPC};

	(void)state;
	for (size_t i = 0; i < COUNT(variants); i++)
		for (size_t e = 0; e < COUNT(errs); e++) {
			struct ip_fault f = {.kind = IP_READ, .err = errs[e]};

			sweep(variants[i], &f, judge_read_error, strerror(errs[e]));
		}
}

/* Each read interrupted in turn; "from the Nth on" would never end. */
static void interrupted_reads_are_retried(void **state)
{
	(void)state;
	for (size_t i = 0; i < COUNT(variants); i++) {
		struct ip_fault f = {.kind = IP_READ, .err = EINTR};

		sweep(variants[i], &f, judge_none, "reads interrupted (EINTR)");
	}
}

static void short_reads_are_continued(void **state)
{
	(void)state;
	for (size_t i = 0; i < COUNT(variants); i++) {
		struct ip_fault f = {.kind = IP_READ};

		sweep(variants[i], &f, judge_none, "short reads");
		f.from_nth = true;
		sweep(variants[i], &f, judge_none, "every read short from the Nth on");
	}
}

/* load_workers is a ceiling: a worker that cannot be started leaves its
 * share to the others and the calling thread (lib/staging.c). */
static void worker_threads_may_not_start(void **state)
{
	struct ip_fault f = {.kind = IP_THREAD};

	(void)state;
	sweep(&direct, &f, judge_none, "pthread_create fails");
	f.from_nth = true;
	sweep(&direct, &f, judge_none, "pthread_create fails from the Nth on");
}

/* A configuration file at dir/name, its folders made. */
static int write_conf(const char *name, const char *text)
{
	char path[1024], cmd[1200];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
	if (system(cmd) != 0 || !(f = fopen(path, "w")))
		return -1;
	fputs(text, f);
	return fclose(f);
}

static int setup(void **state)
{
	char path[1024];

	(void)state;
	if (test_tmpdir_make(dir, sizeof dir, "host-faults"))
		return -1;
	/* The files variants' staging settings, half in each file; the
	 * environment names them (the other variants read no file). */
	if (write_conf("xdg/devcache/devcache.conf",
		       "# the user's file\nload_workers = 3\nstaging_buffer_size = 64K\n") ||
	    write_conf("extra.conf", "# DEVCACHE_CONF\nstaging_buffers = 3\n"
				     "keep_ram_copy = true  # the set comes back from RAM\n"))
		return -1;
	snprintf(path, sizeof path, "%s/xdg", dir);
	setenv("XDG_CONFIG_HOME", path, 1);
	snprintf(path, sizeof path, "%s/extra.conf", dir);
	setenv("DEVCACHE_CONF", path, 1);
	snprintf(st.path, sizeof st.path, "%s/model.safetensors", dir);
	mw_safetensors(st.path, st_tensors, COUNT(st_tensors), SEED_ST, "{\"format\":\"pt\"}");
	snprintf(gguf.path, sizeof gguf.path, "%s/model.gguf", dir);
	mw_gguf(gguf.path, NULL, 0, gguf_tensors, COUNT(gguf_tensors), SEED_GGUF);
	mw_sharded(dir, "set", set_tensors, COUNT(set_tensors), 3, SEED_SET, 0, set.path,
		   sizeof set.path);
	mw_gguf_split(dir, "split", split_tensors, COUNT(split_tensors), 2, SEED_SPLIT, 0,
		      split.path, sizeof split.path);
	if (!(sink = fopen("/dev/null", "w")) || setvbuf(sink, sink_buf, _IOFBF, sizeof sink_buf))
		return -1;
	/* json-c 0.16 crashes when some of its own allocations fail (its
	 * tokener does not check an object key's strdup()): its allocations
	 * are followed for leaks, never failed. */
	void *json = dlsym(RTLD_DEFAULT, "json_tokener_new");
	if (json && !ip_spare(json))
		return -1;
	set_sentinel();
	snprintf(sentinel, sizeof sentinel, "%s", devcache_last_error());
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	fclose(sink);
	return test_tmpdir_remove(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(clean_workload),
		cmocka_unit_test(alloc_failures_direct),
		cmocka_unit_test(alloc_failures_partial),
		cmocka_unit_test(read_errors_name_the_file),
		cmocka_unit_test(interrupted_reads_are_retried),
		cmocka_unit_test(short_reads_are_continued),
		cmocka_unit_test(worker_threads_may_not_start),
	};

	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, setup, teardown);
}
