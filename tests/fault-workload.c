/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fault-workload.c - the fault matrices' workload, run from a fresh context, one vendor call failing. */
#include "tap.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <devcache.h>

#include "fault-workload.h"
#include "model-writer.h"

/* Whether a matrix's loads run on more than one thread (fault-workload.h says what changes). */
bool threaded(const char *options)
{
	return strstr(options, "load_workers:2") != NULL;
}

static char dir[256];
static char set_path[512], big_path[512];

/* The set, three shards; the model loaded partly, one file. */
static const struct mw_tensor set_tensors[] = {
	{"embed", 40000, 0}, {"layer.0.q", 4097, 0}, {"layer.0.up", 70003, 1},
	{"layer.0.down", 1, 1}, {"head", 30001, 2},
};
static const struct mw_tensor big_tensors[] = {
	{"t0", 40000, 0}, {"t1", 40000, 0}, {"t2", 40000, 0}, {"t3", 40000, 0},
};
#define SET_SEED 41u
#define BIG_SEED 42u

static void log_to_run(void *user, enum devcache_log_level level, const char *message)
{
	struct run *r = user;
	int n;

	(void)level;
	n = snprintf(r->log + r->log_len, sizeof r->log - r->log_len, "%s\n", message);
	if (n > 0)
		r->log_len += (size_t)n < sizeof r->log - r->log_len ? (size_t)n
								 : sizeof r->log - r->log_len - 1;
}

/* ---- opening ------------------------------------------------------------------ */

/* The backend module, from the directories of TEST_BACKENDS, held loaded
 * while its matrix runs: the contexts then find it mapped.  NULL if it is
 * not built. */
void *backend_hold(const char *name)
{
	char *dirs = strdup(test_env("TEST_BACKENDS")), *save = NULL, path[4096];
	void *lib = NULL;

	assert_non_null(dirs);
	for (char *d = strtok_r(dirs, ":", &save); d && !lib; d = strtok_r(NULL, ":", &save)) {
		snprintf(path, sizeof path, "%s/%s.so", d, name);
		if (access(path, R_OK) == 0 && !(lib = dlopen(path, RTLD_NOW)))
			fail_msg("%s: %s", path, dlerror());
	}
	free(dirs);
	return lib;
}

static int open_ctx(struct run *r, devcache_ctx_t **ctx_p)
{
	char opts[8192];
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV,
				     .options = opts,
				     .log_fn = log_to_run,
				     .log_user = r};

	/* The smallest staging buffers, so that a load makes several copies;
	 * room on the device for the set (142 KiB) and half of the other
	 * model (two of its four 40 KB tensors); the smallest large segments,
	 * as the fake's device memory is host memory to fill and clear. */
	snprintf(opts, sizeof opts,
		 "log_level:warning,backend_path:%s,backends:%s,%s_library:%s/%s,"
		 "staging_buffer_size:64K,staging_buffers:2,load_workers:1,large_segment_size_mb:2,"
		 "max_cache_vram:240K,max_cache_ram:64M,partial_loading:true,keep_ram_copy:true%s",
		 test_env("TEST_BACKENDS"), r->v->backend, r->v->backend, test_env("TEST_FAKES"),
		 r->v->fake, r->options);
	return devcache_open_ex(ctx_p, &args);
}

bool fake_controls(const struct vendor *v, struct fake *f)
{
	char path[4096], name[64];

	snprintf(path, sizeof path, "%s/%s", test_env("TEST_FAKES"), v->fake);
	/* Loaded here first, it is the copy the backend's dlopen() finds. */
	if (!(f->lib = dlopen(path, RTLD_NOW)))
		return false;
#define CONTROL(field, what)                                                                       \
	snprintf(name, sizeof name, "fake_%s_%s", v->backend, what);                               \
	*(void **)&f->field = dlsym(f->lib, name);
	CONTROL(inject, "fail")
	CONTROL(calls, "calls")
	CONTROL(function, "function")
	CONTROL(live, "live")
	CONTROL(misuses, "misuses")
	CONTROL(context_current, "context_current")
#undef CONTROL
	return f->inject && f->calls && f->function && f->live && f->misuses;
}

/* ---- the workload ------------------------------------------------------------- */

/* Notes whether the fault came in the step just taken. */
static void mark(struct run *r, const char *step)
{
	if (r->function && !r->fired_in && r->f->calls(r->function) - r->calls0 >= r->nth)
		r->fired_in = step;
}

/* A step's failure, with its message; only the first is kept. */
static void failed(struct run *r, const char *step, int rc)
{
	if (r->step)
		return;
	r->step = step;
	r->rc = rc;
	snprintf(r->error, sizeof r->error, "%s", devcache_last_error());
}

/* Runs one step; a failure ends the workload. */
#define STEP(r, name, call)                                                                        \
	do {                                                                                       \
		int rc_ = (call);                                                                  \
		mark((r), (name));                                                                 \
		if (rc_) {                                                                         \
			failed((r), (name), rc_);                                                  \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)

/* A step of the cleanup, which goes on whatever fails. */
#define FINISH(r, name, call)                                                                      \
	do {                                                                                       \
		int rc_ = (call);                                                                  \
		mark((r), (name));                                                                 \
		if (rc_)                                                                           \
			failed((r), (name), rc_);                                                  \
	} while (0)

/* What the workload writes to the device, and every tensor's bytes, made
 * once: a run is short, and there are a thousand.  BIG is for the large
 * pool; only COPY bytes of it travel, at an offset. */
enum { BIG = (1 << 20) + 4096, SMALL = 4096, COPY = 65536 + 3, AT = (1 << 19) + 5 };
static unsigned char *pattern;
static unsigned char *expected[sizeof set_tensors / sizeof *set_tensors +
			       sizeof big_tensors / sizeof *big_tensors];

static void make_expected(void)
{
	size_t k = 0;

	assert_non_null(pattern = malloc(COPY));
	for (size_t i = 0; i < COPY; i++)
		pattern[i] = (unsigned char)((i * 131 + (i >> 12)) & 0xff);
	for (size_t i = 0; i < sizeof set_tensors / sizeof *set_tensors; i++, k++) {
		assert_non_null(expected[k] = malloc(set_tensors[i].size));
		for (size_t j = 0; j < set_tensors[i].size; j++)
			expected[k][j] = mw_byte(set_tensors[i].name, j, SET_SEED);
	}
	for (size_t i = 0; i < sizeof big_tensors / sizeof *big_tensors; i++, k++) {
		assert_non_null(expected[k] = malloc(big_tensors[i].size));
		for (size_t j = 0; j < big_tensors[i].size; j++)
			expected[k][j] = mw_byte(big_tensors[i].name, j, BIG_SEED);
	}
}

/* Tensor name's bytes, of the set or of the other model. */
static const unsigned char *expected_of(const char *name, size_t size, bool of_set)
{
	size_t n_set = sizeof set_tensors / sizeof *set_tensors;
	const struct mw_tensor *t = of_set ? set_tensors : big_tensors;
	size_t n = of_set ? n_set : sizeof big_tensors / sizeof *big_tensors;

	for (size_t i = 0; i < n; i++)
		if (strcmp(t[i].name, name) == 0 && t[i].size == size)
			return expected[(of_set ? 0 : n_set) + i];
	fail_msg("no tensor %s of %zu bytes was written", name, size);
	return NULL;
}

/* Every tensor of m where it is, against what the writer wrote: a copy
 * from the device that fails is the run's failure (its rc), a wrong byte
 * the test's. */
static int check_model(struct run *r, devcache_device_t *dev, devcache_model_t *m, bool of_set)
{
	const devcache_model_file_t *mf = devcache_model_file(m);
	static unsigned char got[1 << 17]; /* the largest tensor; not malloc()ed a thousand times */
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < devcache_model_file_tensor_count(mf); i++) {
		devcache_tensor_info_t info;
		void *data;

		if ((rc = devcache_model_tensor_at(m, i, &info, &data)))
			break;
		assert_true(info.size <= sizeof got);
		if (info.place == DEVCACHE_PLACE_DEVICE)
			rc = devcache_copy_to_host(dev, got, data, info.size, NULL);
		else
			rc = devcache_model_tensor_copy(m, info.name, got, info.size);
		const unsigned char *want = expected_of(info.name, info.size, of_set);

		for (size_t j = 0; rc == 0 && j < info.size; j++)
			if (got[j] != want[j])
				fail_msg("%s: %s: tensor %s byte %zu is %u, not %u", r->v->backend,
					 r->label, info.name, j, got[j], want[j]);
	}
	return rc;
}

/* Whether the tensors of m are where they should be: mask bit i, tensor i on the device. */
static int placed(devcache_model_t *m, unsigned mask)
{
	for (size_t i = 0; i < 4; i++) {
		devcache_tensor_info_t info;
		void *data;
		int rc = devcache_model_tensor_at(m, i, &info, &data);

		if (rc)
			return rc;
		assert_int_equal(info.place,
				 mask >> i & 1 ? DEVCACHE_PLACE_DEVICE : DEVCACHE_PLACE_HOST);
	}
	return 0;
}

/* A step that must fail with out of memory: any other result is the
 * run's failure; the message is kept, for it may name the fault. */
static int expect_enomem(struct run *r, int rc)
{
	size_t n = strlen(r->expected);

	if (rc != DEVCACHE_ENOMEM)
		return rc ? rc : -1;
	snprintf(r->expected + n, sizeof r->expected - n, "%s\n", devcache_last_error());
	return 0;
}

/* A copy and a read of the device's memory from a thread of its own,
 * which the vendor's runtime has never seen. */
struct newcomer {
	devcache_device_t *dev;
	void *dst;
	const void *src;
	devcache_stream_t stream;
	int rc;
	char error[1024];
};

static void *newcomer_main(void *arg)
{
	struct newcomer *nc = arg;
	devcache_device_info_t info;

	if ((nc->rc = devcache_copy_to_device(nc->dev, nc->dst, nc->src, SMALL, nc->stream)) == 0)
		nc->rc = devcache_device_info(nc->dev, &info);
	if (nc->rc)
		snprintf(nc->error, sizeof nc->error, "%s", devcache_last_error());
	return NULL;
}

static void from_new_thread(struct newcomer *nc)
{
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, newcomer_main, nc), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
}

/* Everything but the open and the close; what it holds is given back
 * whether it fails or not. */
static void workload(struct run *r, devcache_ctx_t *ctx, devcache_device_t *dev)
{
	devcache_stream_t s1 = NULL, s2 = NULL;
	void *p[3] = {NULL, NULL, NULL}, *pinned = NULL;
	devcache_model_t *set = NULL, *big = NULL;
	const unsigned char *in = pattern;
	unsigned char *out = malloc(COPY);
	const char *t3[] = {"t3"}, *t1[] = {"t1"};
	devcache_load_result_t res;
	devcache_load_args_t args = {.struct_size = sizeof args, .result = &res};
	devcache_device_info_t info;
	bool foreign = false;
	void *huge = NULL;

	assert_non_null(out);
	/* The caching allocator, on two streams. */
	STEP(r, "stream_create", devcache_stream_create(dev, &s1));
	STEP(r, "stream_create", devcache_stream_create(dev, &s2));
	STEP(r, "alloc", devcache_alloc(dev, BIG, s1, &p[0]));
	STEP(r, "alloc", devcache_alloc(dev, SMALL, s1, &p[1]));
	STEP(r, "alloc", devcache_alloc(dev, SMALL, s2, &p[2]));
	STEP(r, "copy_to_device", devcache_copy_to_device(dev, (char *)p[0] + AT, in, COPY, s1));
	STEP(r, "copy_to_device", devcache_copy_to_device(dev, p[2], in, SMALL, s2));
	STEP(r, "copy_to_host", devcache_copy_to_host(dev, out, (char *)p[0] + AT, COPY, s1));
	if (memcmp(in, out, COPY) != 0)
		fail_msg("%s: %s: a copy came back wrong", r->v->backend, r->label);
	STEP(r, "record_stream", devcache_record_stream(dev, p[0], s2));
	STEP(r, "free", devcache_free(dev, p[0]));
	p[0] = NULL;
	STEP(r, "free", devcache_free(dev, p[1]));
	p[1] = NULL;
	STEP(r, "stream_synchronize", devcache_stream_synchronize(dev, s2));
	STEP(r, "alloc", devcache_alloc(dev, BIG, s1, &p[0]));
	STEP(r, "free", devcache_free(dev, p[0]));
	p[0] = NULL;
	STEP(r, "host_alloc", devcache_host_alloc(dev, 100000, &pinned));
	STEP(r, "host_free", devcache_host_free(dev, pinned));
	pinned = NULL;

	/* What the device has free, from this thread and from a new one;
	 * where the vendor has contexts, a copy made while one of the
	 * program's own is current; a request larger than the device, whose
	 * message reads the free memory too. */
	STEP(r, "device_info", devcache_device_info(dev, &info));
	struct newcomer nc = {.dev = dev, .dst = p[2], .src = in, .stream = s2};
	from_new_thread(&nc);
	mark(r, "new thread");
	if (nc.rc) {
		failed(r, "new thread", nc.rc);
		snprintf(r->error, sizeof r->error, "%s", nc.error); /* the newcomer's, not ours */
		goto out;
	}
	if (r->f->context_current) {
		r->f->context_current(1); /* device 1's primary context, which the library never uses */
		foreign = true;
		STEP(r, "under another context",
		     devcache_copy_to_device(dev, (char *)p[2] + 1, in, SMALL - 1, s2));
		STEP(r, "under another context", devcache_copy_to_host(dev, out, p[2], SMALL, s2));
		if (memcmp(in, out, 1) != 0 || memcmp(in, out + 1, SMALL - 1) != 0)
			fail_msg("%s: %s: a copy came back wrong", r->v->backend, r->label);
		r->f->context_current(0);
		foreign = false;
	}
	STEP(r, "out of memory", expect_enomem(r, devcache_alloc(dev, (size_t)1 << 30, s1, &huge)));

	/* The set, whole, on the device; kept locked while the other model
	 * loads partly beside it, on a stream of ours. */
	STEP(r, "load set", devcache_model_load(ctx, set_path, dev, NULL, &set));
	STEP(r, "check set", check_model(r, dev, set, true));
	args.stream = s1;
	STEP(r, "load partly", devcache_model_load(ctx, big_path, dev, &args, &big));
	STEP(r, "check partly", placed(big, 0x3));
	STEP(r, "check partly", check_model(r, dev, big, false));
	STEP(r, "make_resident", devcache_model_make_resident(big, t3, 1, s1));
	STEP(r, "check resident", placed(big, 0xa));
	STEP(r, "move_to_host", devcache_model_move_to_host(big, t1, 1));
	STEP(r, "check resident", placed(big, 0x8));
	STEP(r, "check resident", check_model(r, dev, big, false));
	devcache_model_release(big);
	big = NULL;
	devcache_model_release(set);
	set = NULL;

	/* Evicted, the set is kept in RAM (the partial model is dropped), and
	 * comes back from there. */
	size_t evicted = devcache_cache_evict_all(ctx);
	mark(r, "evict_all");
	if (evicted != 2)
		fail_msg("%s: %s: evict_all did not evict both models", r->v->backend, r->label);
	devcache_cache_stats_t cs;
	STEP(r, "cache_stats", devcache_cache_stats(ctx, &cs));
	args.stream = NULL;
	STEP(r, "reload from RAM", devcache_model_load(ctx, set_path, dev, &args, &set));
	/* No RAM copy only where copying it failed, which is logged. */
	assert_int_equal(res.from_ram, cs.ram_copies == 1);
	STEP(r, "check reload", check_model(r, dev, set, true));
	devcache_model_release(set);
	set = NULL;
	/* A model manager's steps: offload it to RAM and back, then make
	 * room for the whole budget, which offloads it again. */
	STEP(r, "offload", devcache_cache_offload(ctx, set_path, dev));
	STEP(r, "reload from RAM", devcache_model_load(ctx, set_path, dev, &args, &set));
	STEP(r, "check reload", check_model(r, dev, set, true));
	devcache_model_release(set);
	set = NULL;
	STEP(r, "make_room", devcache_cache_make_room(ctx, dev, 240u << 10, NULL));
	devcache_cache_evict_all(ctx); /* to RAM */
	mark(r, "evict_all");
	devcache_cache_evict_all(ctx); /* and out */
	mark(r, "evict_all");
	STEP(r, "empty_cache", devcache_empty_cache(dev));
	STEP(r, "host_empty_cache", devcache_host_empty_cache(dev));
out:
	if (foreign)
		r->f->context_current(0); /* as every run finds it */
	if (huge)
		FINISH(r, "free", devcache_free(dev, huge));
	if (big)
		devcache_model_release(big);
	if (set)
		devcache_model_release(set);
	mark(r, "release");
	for (int i = 0; i < 3; i++)
		if (p[i])
			FINISH(r, "free", devcache_free(dev, p[i]));
	if (pinned)
		FINISH(r, "host_free", devcache_host_free(dev, pinned));
	if (s1)
		FINISH(r, "stream_destroy", devcache_stream_destroy(dev, s1));
	if (s2)
		FINISH(r, "stream_destroy", devcache_stream_destroy(dev, s2));
	free(out);
}

/* After a failure, the same context loads the set from its files, byte-exact. */
static void still_usable(struct run *r, devcache_ctx_t *ctx, devcache_device_t *dev)
{
	devcache_model_t *m;
	int rc;

	devcache_cache_evict_all(ctx);
	devcache_cache_evict_all(ctx);
	if ((rc = devcache_model_load(ctx, set_path, dev, NULL, &m)))
		fail_msg("%s: %s: after the failure, a load fails: %s", r->v->backend, r->label,
			 devcache_last_error());
	if ((rc = check_model(r, dev, m, true)))
		fail_msg("%s: %s: after the failure, a loaded model cannot be read: %s",
			 r->v->backend, r->label, devcache_last_error());
	devcache_model_release(m);
	devcache_cache_evict_all(ctx);
	devcache_cache_evict_all(ctx);
}


/* Why the backend has no device, from its entry in the context. */
static void note_reason(struct run *r, devcache_ctx_t *ctx)
{
	devcache_backend_info_t b;
	size_t n = strlen(r->error);

	for (size_t i = 0; i < devcache_backend_count(ctx); i++)
		if (devcache_backend_info(ctx, i, &b) == 0 && strcmp(b.name, r->v->backend) == 0)
			snprintf(r->error + n, sizeof r->error - n, " [%s]", b.reason);
}

/* One run from a fresh context, with the nth call of function failing
 * (function NULL: none). */
void one_run(struct run *r, const char *function, unsigned nth)
{
	devcache_ctx_t *ctx = NULL;
	devcache_device_t *dev = NULL;
	int rc;

	r->function = function;
	r->nth = nth;
	r->calls0 = function ? r->f->calls(function) : 0;
	r->fired_in = NULL;
	r->step = NULL;
	r->rc = 0;
	r->error[0] = r->log[0] = r->expected[0] = '\0';
	r->log_len = 0;
	if (function)
		r->f->inject(function, nth, r->v->code);
	rc = open_ctx(r, &ctx);
	mark(r, "open");
	if (rc) {
		failed(r, "open", rc);
		ctx = NULL;
	} else if ((rc = devcache_device_get(ctx, r->v->device, &dev))) {
		/* A backend that failed to start has no device, and says why. */
		failed(r, "device_get", rc);
		note_reason(r, ctx);
	} else {
		workload(r, ctx, dev);
	}
	if (r->fired_in && dev)
		still_usable(r, ctx, dev);
	if (ctx)
		devcache_close(ctx);
	mark(r, "close");
	if (function) {
		r->f->inject(function, 0, 0);
		if (!r->fired_in && !threaded(r->options))
			fail_msg("%s: %s: the workload made fewer calls than when it ran clean",
				 r->v->backend, r->label);
	}
}

int setup(void **state)
{
	(void)state;
	if (test_tmpdir_make(dir, sizeof dir, "fault-matrix"))
		return -1;
	mw_sharded(dir, "set", set_tensors, sizeof set_tensors / sizeof *set_tensors, 3, SET_SEED, 0,
		   set_path, sizeof set_path);
	snprintf(big_path, sizeof big_path, "%s/big.safetensors", dir);
	mw_safetensors(big_path, big_tensors, sizeof big_tensors / sizeof *big_tensors, BIG_SEED,
		       NULL);
	make_expected();
	return 0;
}

int teardown(void **state)
{
	(void)state;
	free(pattern);
	for (size_t i = 0; i < sizeof expected / sizeof *expected; i++)
		free(expected[i]);
	return test_tmpdir_remove(dir);
}
