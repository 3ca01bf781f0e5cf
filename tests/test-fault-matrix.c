/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-fault-matrix.c - a scripted workload run on each fake runtime once per vendor call it makes, that call failing: a clean error naming it, nothing leaked or misused, a context that still loads. */
#include "tap.h"

#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <devcache.h>

#include "model-writer.h"

/*
 * The workload (open, allocate on two streams, read the free memory from
 * this thread and from a new one, copy under a context of the program's
 * own where the vendor has contexts, ask for more than the device has,
 * load a sharded set, load a model partly and move its tensors, evict to
 * RAM and reload from there, evict everything, empty the caches, close)
 * is run clean to count the calls it makes of every function the fake
 * exports, twice, to see that the counts hold; then, from a fresh context
 * each time, once for every call: the Nth call of function F fails, for
 * every F and every N up to F's count.  One loader thread keeps the calls
 * in one order; the matrices with two load workers fail the functions
 * whose counts do not vary, met by whichever thread comes to them.  The calls that only describe an error fail in a pass of
 * their own, with each F's first call.  A last test reads each backend's
 * source for the vendor functions it calls, and fails if one is failed
 * by no matrix: a new call site needs a step that reaches it.
 *
 * A run must either fail a step with an error that names F, or go on
 * with every byte right: saying so in a log message that names F (what
 * fails while the context closes can only be said so), or silently where
 * the library may (the tolerated lists below say why).  After a failure
 * the same context must load a model byte-exact.  Once it is closed, the
 * fake must hold no more objects than before, but for what a refused
 * release leaves (the object, and what holds it), and must have refused
 * no call as a misuse (an unknown handle, a double free, a bad argument).
 *
 * TEST_FAULT_ONLY=FUNCTION:N runs that one fault alone, with its messages.
 */

/* A call whose failure the library tolerates without a word, and why:
 * function failing in step (NULL: in any). */
struct tolerated {
	const char *function;
	const char *step;
	const char *why;
};

struct vendor {
	const char *backend; /* "cuda" */
	const char *device;  /* "cuda:0" */
	const char *fake;    /* the fake runtime, in TEST_FAKES */
	int code;            /* what every injected failure returns */
	const struct tolerated *tolerated;
	/* Calls that give an object back: failing, they leave it with the
	 * runtime, and the library can only say so. */
	const char *const *releases;
	size_t cascade; /* the most objects one refused release can leave */
	/* Called only to describe another call's failure: failed, in a pass
	 * of their own, together with each function of the workload. */
	const char *const *describers;
	/* Called by the backend, and never failed here: why each cannot be. */
	const struct tolerated *unfailed;
};

/* Why a block used on another stream may be freed without an event. */
#define WAITS "the allocator, with no event to record on the other stream, waits for it instead"

static const struct tolerated cuda_tolerated[] = {
	{"cuDriverGetVersion", "open", "read for a debug message only"},
	{"cuDeviceGetPCIBusId", "open", "a device that cannot say has no bus id, as one off PCI"},
	{"cuDeviceGetAttribute", "open",
	 "asked only whether the device maps memory: one that cannot say is taken not to"},
	{"cuMemGetAllocationGranularity", "open", "the same probe"},
	{"cuCtxGetCurrent", "free", WAITS},
	{"cuEventCreate", "free", WAITS},
	{"cuEventRecord", "free", WAITS},
	{NULL, NULL, NULL},
};
static const char *const cuda_releases[] = {
	"cuMemFree_v2", "cuMemFreeHost", "cuStreamDestroy_v2", "cuEventDestroy_v2",
	"cuDevicePrimaryCtxRelease_v2", "cuMemRelease", "cuMemUnmap", "cuMemAddressFree",
	"cuMemHostUnregister", NULL,
};

static const char *const cuda_describers[] = {"cuGetErrorString", "cuGetErrorName", NULL};
static const struct tolerated none[] = {{NULL, NULL, NULL}};

static const struct tolerated hip_tolerated[] = {
	{"hipRuntimeGetVersion", "open",
	 "it names the virtual-memory ABI: a runtime that cannot say is taken not to map memory"},
	{"hipDeviceGetAttribute", "open",
	 "asked only whether the device maps memory: ROCm 5.2 cannot say, and is asked the next"},
	{"hipMemGetAllocationGranularity", "open",
	 "the same probe: a device that cannot say is taken not to map memory"},
	{"hipDeviceGetPCIBusId", "open", "a device that cannot say has no bus id, as one off PCI"},
	{"hipSetDevice", "free", WAITS},
	{"hipEventCreateWithFlags", "free", WAITS},
	{"hipEventRecord", "free", WAITS},
	{NULL, NULL, NULL},
};
static const char *const hip_releases[] = {
	"hipFree", "hipHostFree", "hipStreamDestroy", "hipEventDestroy", "hipHostUnregister",
	"hipMemRelease", "hipMemUnmap", "hipMemAddressFree", NULL,
};

static const char *const no_describers[] = {NULL};
static const struct tolerated hip_unfailed[] = {
	{"hipGetErrorString", NULL, "returns a string: the API gives it no way to fail"},
	{"hipGetErrorName", NULL, "returns a string: the API gives it no way to fail"},
	{NULL, NULL, NULL},
};

static const struct tolerated ze_tolerated[] = {
	{"zeDevicePciGetPropertiesExt", "open", "a device that cannot say has no bus id"},
	{"zeDeviceGetCommandQueueGroupProperties", "open",
	 "copies then go to the first queue group, which every device has"},
	{"zeEventCreate", "free", WAITS},
	{"zeEventHostReset", "free", WAITS},
	{"zeCommandListAppendBarrier", "free", WAITS},
	{NULL, NULL, NULL},
};
static const char *const ze_releases[] = {
	"zeMemFree", "zeContextDestroy", "zeCommandListDestroy", "zeEventPoolDestroy",
	"zeEventDestroy", "zePhysicalMemDestroy", "zeVirtualMemFree", "zeVirtualMemUnmap", NULL,
};

/* Each vendor's code for a fault any call may report once the device has
 * failed: an illegal address, or a lost device. */
static const struct vendor vendors[] = {
	{"cuda", "cuda:0", "libfake-cuda.so", 700 /* CUDA_ERROR_ILLEGAL_ADDRESS */, cuda_tolerated,
	 cuda_releases, 3 /* a mapping, its memory, its address range */, cuda_describers, none},
	{"hip", "hip:0", "libfake-hip.so", 700 /* hipErrorIllegalAddress */, hip_tolerated,
	 hip_releases, 3 /* a mapping, its memory, its address range */, no_describers,
	 hip_unfailed},
	{"ze", "ze:0", "libfake-ze.so", 0x70000001 /* ZE_RESULT_ERROR_DEVICE_LOST */, ze_tolerated,
	 ze_releases, 3 /* an event, its pool, their context */, no_describers, none},
	/* The same module on the fake ROCm 6, whose hipMemAllocationProp is
	 * laid out otherwise: its virtual-memory paths fail cleanly too. */
	{"hip", "hip:0", "libfake-hip6.so", 700 /* hipErrorIllegalAddress */, hip_tolerated,
	 hip_releases, 3 /* a mapping, its memory, its address range */, no_describers,
	 hip_unfailed},
};

/* One matrix: a vendor, and the options that choose the allocator's paths. */
struct matrix {
	const struct vendor *v;
	const char *options; /* appended to the context's */
};

/* Expandable segments map pages where plain ones allocate: other calls,
 * other error paths.  The HIP matrices run on the fake ROCm 5.2, and with
 * expandable segments on the fake ROCm 6 as well. */
static const struct matrix matrices[] = {
	{&vendors[0], ""},
	{&vendors[1], ""},
	{&vendors[2], ""},
	{&vendors[0], ",expandable_segments:True"},
	{&vendors[2], ",expandable_segments:True"},
	{&vendors[1], ",expandable_segments:True"},
	{&vendors[0], ",load_workers:2"},
	{&vendors[1], ",load_workers:2"},
	{&vendors[2], ",load_workers:2"},
	{&vendors[3], ",expandable_segments:True"},
};

/* Whether a matrix's loads run on more than one thread: then the calls
 * that wait (an event's query or synchronisation) and the ones a new
 * thread makes first (cuCtxSetCurrent) vary in number from run to run,
 * and only the functions called as often in three clean runs are failed
 * (the one-worker matrices fail the others); which thread meets the
 * fault varies, which is the point.  Even those may be called less often
 * in a run where the threads meet otherwise: a fault that does not strike
 * leaves a clean run, counted as missed, and most must strike. */
static bool threaded(const char *options)
{
	return strstr(options, "load_workers:2") != NULL;
}

/* The fake's controls: fake_<vendor>_fail, _calls, _function, _live,
 * _misuses, and where the vendor has contexts, _context_current. */
struct fake {
	void *lib;
	void (*inject)(const char *, unsigned, int);
	unsigned long (*calls)(const char *);
	const char *(*function)(unsigned);
	size_t (*live)(void);
	unsigned long (*misuses)(const char *);
	void (*context_current)(int);
};

/* Or'ed into a fault's nth: every call from the nth on fails (fake-controls.h). */
#define FAIL_ON 0x80000000u

/* What one run saw. */
struct run {
	const struct vendor *v;
	const char *options;
	struct fake *f;
	const char *function; /* the fault: the nth call from calls0 of function fails */
	unsigned nth;
	unsigned long calls0;
	const char *fired_in; /* the step in which it did, once it did */
	char label[128];     /* the fault, for messages: "cuMemAlloc_v2 #3 failing" */
	const char *step;    /* the step that failed, or NULL */
	int rc;
	char error[1024];    /* its detail message */
	char expected[2048]; /* the messages of the calls that were to fail, and did */
	char log[8192];      /* what the library logged, one message a line */
	size_t log_len;
};

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
static void *backend_hold(const char *name)
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

static bool fake_controls(const struct vendor *v, struct fake *f)
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

/* ---- the matrix --------------------------------------------------------------- */

/* The function's name as the backend writes it: without the _v2 that
 * cuda.h's renaming gives the exported name. */
static void written_name(const char *function, char *buf, size_t size)
{
	char *v;

	snprintf(buf, size, "%s", function);
	if ((v = strrchr(buf, '_')) && v[1] == 'v' && v[2] >= '0' && v[2] <= '9')
		*v = '\0';
}

/* Why the library may fail function in step without a word, or NULL. */
static const char *tolerated_why(const struct vendor *v, const char *function, const char *step)
{
	for (const struct tolerated *t = v->tolerated; t->function; t++)
		if (strcmp(t->function, function) == 0 && (!t->step || strcmp(t->step, step) == 0))
			return t->why;
	return NULL;
}

static bool gives_back(const struct vendor *v, const char *function)
{
	for (const char *const *f = v->releases; *f; f++)
		if (strcmp(*f, function) == 0)
			return true;
	return false;
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
static void one_run(struct run *r, const char *function, unsigned nth)
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

/* ---- every call site ---------------------------------------------------------- */

/* The functions failed in some matrix, by vendor, as the backend writes
 * their names; and the vendors whose matrices ran. */
enum { MAX_COVERED = 256 };
static char covered[sizeof vendors / sizeof *vendors][MAX_COVERED][64];
static unsigned n_covered[sizeof vendors / sizeof *vendors];
static bool vendor_ran[sizeof vendors / sizeof *vendors];

/* The first vendor of v's backend: the one that keeps what the matrices
 * of every runtime of that backend covered. */
static size_t canon(const struct vendor *v)
{
	size_t vi = 0;

	while (strcmp(vendors[vi].backend, v->backend) != 0)
		vi++;
	return vi;
}

static bool is_covered(const struct vendor *v, const char *name)
{
	size_t vi = canon(v);

	for (unsigned i = 0; i < n_covered[vi]; i++)
		if (strcmp(covered[vi][i], name) == 0)
			return true;
	return false;
}

static void covered_add(const struct vendor *v, const char *function)
{
	size_t vi = canon(v);
	char name[64];

	written_name(function, name, sizeof name);
	if (is_covered(v, name))
		return;
	assert_true(n_covered[vi] < MAX_COVERED);
	snprintf(covered[vi][n_covered[vi]++], sizeof covered[vi][0], "%s", name);
}

static bool describes(const struct vendor *v, const char *function)
{
	for (const char *const *d = v->describers; *d; d++)
		if (strcmp(*d, function) == 0)
			return true;
	return false;
}

/* How the runs ended. */
struct tally {
	unsigned functions, runs, failed, recovered, tolerated, at_close;
	unsigned unstable; /* functions left out, their counts varying (threaded()) */
	unsigned missed;   /* runs whose fault did not strike (threaded()) */
	unsigned wrong; /* runs that broke a rule, each said as it is found */
};

/* A rule broken: said at once, and the matrix goes on to show them all. */
#define WRONG(t, ...)                                                                              \
	do {                                                                                       \
		print_message("# " __VA_ARGS__);                                                   \
		print_message("\n");                                                               \
		(t)->wrong++;                                                                      \
	} while (0)

/* The run with the nth call of function failing, and its checks; also
 * says what else is made to fail, for the messages. */
static void one_fault(struct run *r, const char *function, unsigned nth, const char *also,
		      struct tally *t)
{
	char name[128];
	size_t live0 = r->f->live(), kept;
	unsigned long misuses0 = r->f->misuses(NULL);
	bool said;

	snprintf(r->label, sizeof r->label, "%s #%u failing%s", function, nth, also);
	written_name(function, name, sizeof name);
	one_run(r, function, nth);
	t->runs++;
	said = false;
	if (!r->fired_in) {
		/* A clean run (threaded() only: one_run() fails the others). */
		t->missed++;
		goto left;
	}
	said = strstr(r->error, name) || strstr(r->log, name) || strstr(r->expected, name);
	if (r->step) {
		/* The step that failed says which call did. */
		if (!said)
			WRONG(t, "%s: %s in %s: %s failed (%d) with \"%s\", logging \"%s\": neither names %s",
			      r->v->backend, r->label, r->fired_in, r->step, r->rc, r->error, r->log,
			      name);
		t->failed++;
	} else if (tolerated_why(r->v, function, r->fired_in)) {
		t->tolerated++;
	} else if (said) {
		/* Recovered from, and said so; the bytes were checked. */
		if (strcmp(r->fired_in, "close") == 0)
			t->at_close++;
		else
			t->recovered++;
	} else {
		WRONG(t, "%s: %s in %s: the workload went on as if it had succeeded, and nothing said so",
		      r->v->backend, r->label, r->fired_in);
	}
left:
	/* A call that gives an object back and fails leaves that one with
	 * the runtime, and what holds it; so does one that fails on the way
	 * to it, which the library says it was refused. */
	kept = said && (gives_back(r->v, function) || strstr(r->log, "refused to") ||
			(r->step && strcmp(r->step, "stream_destroy") == 0))
		       ? r->v->cascade
		       : 0;
	if (r->f->live() > live0 + kept)
		WRONG(t, "%s: %s in %s: %zu runtime objects live after close, %zu before; step %s: %s",
		      r->v->backend, r->label, r->fired_in, r->f->live(), live0,
		      r->step ? r->step : "none", r->error);
	if (r->f->misuses(NULL) != misuses0)
		WRONG(t, "%s: %s in %s: the fake refused %lu call(s) as misuse (see its messages); step %s: %s",
		      r->v->backend, r->label, r->fired_in, r->f->misuses(NULL) - misuses0,
		      r->step ? r->step : "none", r->error);
}

/* A clean run, whose log must be empty and which must leave nothing. */
static void clean_run(struct run *r)
{
	snprintf(r->label, sizeof r->label, "no fault");
	one_run(r, NULL, 0);
	if (r->step)
		fail_msg("%s: the workload fails with no fault: %s: %s", r->v->backend, r->step,
			 r->error);
	if (r->log_len)
		fail_msg("%s: the workload logs with no fault: %s", r->v->backend, r->log);
}

static void fault_matrix(const struct matrix *mx)
{
	const struct vendor *v = mx->v;
	struct fake f = {0};
	struct run r = {.v = v, .options = mx->options, .f = &f};
	struct tally t = {0};
	char path[4096];
	enum { MAX_FUNCTIONS = 256 };
	unsigned long before[MAX_FUNCTIONS], count[MAX_FUNCTIONS], again[MAX_FUNCTIONS];
	unsigned n = 0;
	const char *only = getenv("TEST_FAULT_ONLY");

	void *backend = backend_hold(v->backend);

	if (!backend)
		skip_because("the %s backend is not built (configure found no headers for it)",
			     v->backend);
	snprintf(path, sizeof path, "%s/%s", test_env("TEST_FAKES"), v->fake);
	if (access(path, R_OK) != 0) {
		dlclose(backend);
		skip_because("the fake runtime %s is not built", v->fake);
	}
	assert_true(fake_controls(v, &f));
	vendor_ran[canon(v)] = vendor_ran[canon(v)] || !only;
	/* What runs before left with the fake, refused releases, stays. */
	size_t live0 = f.live();
	unsigned long misuses0 = f.misuses(NULL);
	/* The first run leaves what a thread keeps (its current context) set
	 * up as every later run finds it. */
	clean_run(&r);
	assert_int_equal(f.live(), live0);
	assert_int_equal(f.misuses(NULL), misuses0);
	/* What the workload calls, counted twice: the same both times. */
	for (n = 0; f.function(n); n++) {
		assert_true(n < MAX_FUNCTIONS);
		before[n] = f.calls(f.function(n));
	}
	clean_run(&r);
	for (unsigned i = 0; i < n; i++) {
		count[i] = f.calls(f.function(i)) - before[i];
		before[i] = f.calls(f.function(i));
	}
	clean_run(&r);
	for (unsigned i = 0; i < n; i++) {
		again[i] = f.calls(f.function(i)) - before[i];
		before[i] = f.calls(f.function(i));
		if (again[i] != count[i] && !threaded(mx->options))
			fail_msg("%s: the workload calls %s %lu times, then %lu", v->backend,
				 f.function(i), count[i], again[i]);
	}
	if (threaded(mx->options)) {
		clean_run(&r);
		for (unsigned i = 0; i < n; i++) {
			unsigned long third = f.calls(f.function(i)) - before[i];

			if (count[i] && (again[i] != count[i] || third != count[i])) {
				print_message("# %s%s: %s is called %lu, %lu and %lu times: left to "
					      "the one-worker matrix\n",
					      v->backend, mx->options, f.function(i), count[i],
					      again[i], third);
				count[i] = 0;
				t.unstable++;
			}
		}
	}
	assert_int_equal(f.live(), live0);
	for (unsigned i = 0; i < n; i++) {
		if (!count[i])
			continue;
		t.functions++;
		for (unsigned long k = 1; k <= count[i]; k++) {
			char which[160];

			/* TEST_FAULT_ONLY=function:n runs that one alone. */
			snprintf(which, sizeof which, "%s:%lu", f.function(i), k);
			if (only && strcmp(only, which) != 0)
				continue;
			one_fault(&r, f.function(i), (unsigned)k, "", &t);
			if (only)
				print_message("# error: %s\n# log: %s\n", r.error, r.log);
		}
	}
	if (!only)
		for (unsigned i = 0; i < n; i++)
			if (count[i])
				covered_add(v, f.function(i));
	if (threaded(mx->options)) {
		assert_true(t.functions > 0); /* the copies, at least, are failed */
		if (t.missed * 10 > t.runs)
			fail_msg("%s%s: %u of %u faults did not strike", v->backend, mx->options,
				 t.missed, t.runs);
	}
	/* The calls that describe an error, failing with the call whose
	 * error they describe: each function's first call fails, and every
	 * describer's; the error must still name the function. */
	unsigned described = 0;
	for (unsigned i = 0; i < n && !only && *v->describers && !threaded(mx->options); i++) {
		if (!count[i] || describes(v, f.function(i)))
			continue;
		unsigned long calls0 = 0, calls1 = 0;

		for (const char *const *d = v->describers; *d; d++) {
			calls0 += f.calls(*d);
			f.inject(*d, FAIL_ON | 1, v->code);
		}
		one_fault(&r, f.function(i), 1, ", and every description of an error", &t);
		for (const char *const *d = v->describers; *d; d++) {
			f.inject(*d, 0, 0);
			calls1 += f.calls(*d);
		}
		described++;
		if (calls1 == calls0)
			continue;
		for (const char *const *d = v->describers; *d; d++)
			covered_add(v, *d);
	}
	print_message("# %s%s (%s): %u functions called, %u runs each failing one call (%u with "
		      "the descriptions of errors failing too): %u failed, %u recovered with a "
		      "message, %u tolerated, %u reported at close, %u did not strike\n",
		      v->backend, mx->options, v->fake, t.functions, t.runs, described, t.failed, t.recovered,
		      t.tolerated, t.at_close, t.missed);
	if (t.wrong)
		fail_msg("%s: %u of %u runs broke a rule (listed above)", v->backend, t.wrong,
			 t.runs);
	dlclose(f.lib);
	dlclose(backend);
}

static int setup(void **state)
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

static int teardown(void **state)
{
	(void)state;
	free(pattern);
	for (size_t i = 0; i < sizeof expected / sizeof *expected; i++)
		free(expected[i]);
	return test_tmpdir_remove(dir);
}

#define MATRIX(name, i)                                                                            \
	static void name(void **state)                                                             \
	{                                                                                          \
		(void)state;                                                                       \
		fault_matrix(&matrices[i]);                                                        \
	}
MATRIX(every_cuda_call_fails_cleanly, 0)
MATRIX(every_hip_call_fails_cleanly, 1)
MATRIX(every_ze_call_fails_cleanly, 2)
MATRIX(every_cuda_call_fails_cleanly_with_expandable_segments, 3)
MATRIX(every_ze_call_fails_cleanly_with_expandable_segments, 4)
MATRIX(every_hip_call_fails_cleanly_with_expandable_segments, 5)
MATRIX(every_cuda_call_fails_cleanly_with_two_load_workers, 6)
MATRIX(every_hip_call_fails_cleanly_with_two_load_workers, 7)
MATRIX(every_ze_call_fails_cleanly_with_two_load_workers, 8)
MATRIX(every_rocm6_hip_call_fails_cleanly_with_expandable_segments, 9)

/* Why the backend calls function and no matrix fails it, or NULL. */
static const char *unfailed_why(const struct vendor *v, const char *function)
{
	for (const struct tolerated *u = v->unfailed; u->function; u++)
		if (strcmp(u->function, function) == 0)
			return u->why;
	return NULL;
}

/* Every vendor function that the backend's source calls ("->cuMemAlloc("),
 * failed in one of the vendor's matrices above, or said why it cannot be:
 * a call site added to a backend without a step of the workload that
 * reaches it fails here. */
static void every_call_site_of_every_backend_is_failed(void **state)
{
	unsigned checked = 0, missing = 0;

	(void)state;
	if (getenv("TEST_FAULT_ONLY"))
		skip_because("TEST_FAULT_ONLY runs one fault, not every call site");
	for (size_t vi = 0; vi < sizeof vendors / sizeof *vendors; vi++) {
		const struct vendor *v = &vendors[vi];
		const char *prefix = strcmp(v->backend, "cuda") == 0 ? "cu" : v->backend;
		char path[4096], *src;

		if (!vendor_ran[vi])
			continue;
		snprintf(path, sizeof path, "%s/../backends/%s/%s.c", test_env("TEST_SRCDIR"),
			 v->backend, v->backend);
		src = test_slurp_must(path);
		for (char *p = strstr(src, "->"); p; p = strstr(p + 2, "->")) {
			char name[64];
			size_t n = 0;
			const char *q = p + 2;

			while (n + 1 < sizeof name && (isalnum((unsigned char)q[n]) || q[n] == '_'))
				n++;
			if (q[n] != '(' || strncmp(q, prefix, strlen(prefix)) != 0 ||
			    !isupper((unsigned char)q[strlen(prefix)]))
				continue;
			memcpy(name, q, n);
			name[n] = '\0';
			checked++;
			if (is_covered(v, name) || unfailed_why(v, name))
				continue;
			print_message("# %s: the backend calls %s (%s), which no matrix fails\n",
				      v->backend, name, path);
			missing++;
		}
		free(src);
	}
	if (!checked)
		skip_because("no vendor backend is built (configure found no headers for one)");
	if (missing)
		fail_msg("%u call sites of the backends are not failed by the workload (listed above)",
			 missing);
}

int main(void)
{
	/* Small devices: expandable segments reserve address space for all
	 * of one, which a sanitizer's shadow memory then covers.  What the
	 * refused releases of a matrix leave (about 30 MiB) stays allocated
	 * in the fake for the rest of the program: room for three matrices
	 * of one vendor. */
	setenv("FAKE_CUDA_MEMORY_MB", "192", 0);
	setenv("FAKE_HIP_MEMORY_MB", "192", 0);
	setenv("FAKE_ZE_MEMORY_MB", "192", 0);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(every_cuda_call_fails_cleanly, setup, teardown),
		cmocka_unit_test_setup_teardown(every_hip_call_fails_cleanly, setup, teardown),
		cmocka_unit_test_setup_teardown(every_ze_call_fails_cleanly, setup, teardown),
		cmocka_unit_test_setup_teardown(every_cuda_call_fails_cleanly_with_expandable_segments,
						setup, teardown),
		cmocka_unit_test_setup_teardown(every_ze_call_fails_cleanly_with_expandable_segments,
						setup, teardown),
		cmocka_unit_test_setup_teardown(every_hip_call_fails_cleanly_with_expandable_segments,
						setup, teardown),
		cmocka_unit_test_setup_teardown(every_cuda_call_fails_cleanly_with_two_load_workers,
						setup, teardown),
		cmocka_unit_test_setup_teardown(every_hip_call_fails_cleanly_with_two_load_workers,
						setup, teardown),
		cmocka_unit_test_setup_teardown(every_ze_call_fails_cleanly_with_two_load_workers,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			every_rocm6_hip_call_fails_cleanly_with_expandable_segments, setup, teardown),
		cmocka_unit_test(every_call_site_of_every_backend_is_failed),
	};

	return RUN_TAP(tests);
}
