/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-alloc-pytorch.c - the caching allocator against an independent model of PyTorch's policy, event by event. */
#include "tap.h"

#include <dlfcn.h>
#include <glob.h>
#include <inttypes.h>
#include <stdbool.h>

#include <devcache.h>

#include "arena-base.h"
#include "first-fit.h"
#include "pytorch-model.h"
#include "pytorch-traces.h"
#include "trace-read.h"

/* Each case replays one trace under one setting: a generated one
 * (training, decoding, switching models), or one of the traces recorded
 * from PyTorch in bench/ (bench/README, section 2.1), which the hot path's
 * speed is measured on, on the arena test device, through libdevcache
 * and through tests/pytorch-model.c at once, and after every event
 * compares what PyTorch's memory_stats() would show: allocated, reserved
 * and requested bytes with their peaks, driver allocations and frees,
 * retries and out-of-memory errors.  The first difference fails the case
 * and names the event and both sides' figures.  The arena device and the
 * model's driver both hand out addresses first fit, so the addresses of
 * the blocks must agree too; where they part before any figure does, the
 * message says where. */

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

/* ---- settings ----------------------------------------------------------------- */

/* What a setting is there to test: the model must take these paths in
 * every trace, or the trace has drifted away from its purpose. */
enum {
	X_GC = 1,       /* garbage collection releases segments */
	X_OVERSIZE = 2, /* release_available_cached_blocks releases segments */
	X_OOM = 4,      /* the cache is flushed for a retry, and some allocations fail */
	X_FREE = 8,     /* memory goes back to the driver (segments, or pages unmapped) */
	X_STITCH = 16,  /* stitching on: the same until the model's first failure, then fewer */
	X_RETRY = 32,   /* the cache is flushed for a retry */
};

struct setting {
	const char *options; /* libdevcache's, which take PyTorch's keys */
	unsigned expect;     /* X_* */
};

static const struct setting settings[] = {
	{"", 0},
	{"max_split_size_mb:64", 0},
	{"max_split_size_mb:200", 0},
	{"roundup_power2_divisions:4", 0},
	{"roundup_power2_divisions:[256:1,512:2,1024:4,>:8]", 0},
	{"roundup_power2_divisions:[1:2,16:4,64:8,>:1]", 0},
	{"garbage_collection_threshold:0.6,memory_fraction:0.8", X_GC},
	{"garbage_collection_threshold:0.6", 0},
	{"memory_fraction:0.42", X_OOM | X_FREE},
	{"memory_fraction:0.42,max_split_size_mb:64", X_OVERSIZE | X_OOM | X_FREE},
	{"max_split_size_mb:200,roundup_power2_divisions:[256:1,512:2,1024:4,>:8],"
	 "garbage_collection_threshold:0.6,memory_fraction:0.9",
	 X_GC},
	{"expandable_segments:True", 0},
	{"expandable_segments:True,roundup_power2_divisions:4", 0},
	{"expandable_segments:True,garbage_collection_threshold:0.6,memory_fraction:0.8", 0},
	{"expandable_segments:True,expandable_stitching:False,memory_fraction:0.42",
	 X_OOM | X_FREE},
	{"expandable_segments:True,memory_fraction:0.42", X_OOM | X_FREE | X_STITCH},
	{"expandable_segments:True,max_split_size_mb:64,memory_fraction:0.3",
	 X_OOM | X_FREE | X_STITCH},
};

/* PyTorch's reading of roundup_power2_divisions: one number for every
 * interval, or pairs INTERVAL_MB:N, where the first pair also sets every
 * interval below its own, and >:N sets the last interval named and all
 * above. */
static void parse_divisions(const char *value, unsigned divisions[16])
{
	memset(divisions, 0, 16 * sizeof *divisions);
	if (*value != '[') {
		for (int i = 0; i < 16; i++)
			divisions[i] = (unsigned)strtoul(value, NULL, 10);
		return;
	}
	bool first = true;
	size_t last = 0;
	for (const char *p = value + 1; *p && *p != ']';) {
		const char *colon = strchr(p, ':');
		unsigned n;

		assert_non_null(colon);
		n = (unsigned)strtoul(colon + 1, NULL, 10);
		if (*p == '>') {
			for (size_t i = last; i < 16; i++)
				divisions[i] = n;
		} else {
			unsigned long interval = strtoul(p, NULL, 10);
			size_t index = 63 - (size_t)__builtin_clzll(interval);

			index = index > 15 ? 15 : index;
			if (first)
				for (size_t i = 0; i < index; i++)
					divisions[i] = n;
			first = false;
			divisions[index] = n;
			last = index;
		}
		p = colon + 1;
		p += strcspn(p, ",]");
		if (*p == ',')
			p++;
	}
}

/* The model's configuration from the same options, as PyTorch reads
 * PYTORCH_CUDA_ALLOC_CONF (memory_fraction stands for
 * set_per_process_memory_fraction). */
static struct ptm_config model_config(const char *options, uint64_t total, uint64_t base)
{
	struct ptm_config c = {.device_total = total, .max_split_size = SIZE_MAX,
			       .max_non_split_rounding = 20 * MiB, .address_base = base};
	const char *p = options;

	while (*p) {
		size_t klen = strcspn(p, ":");
		const char *v = p + klen + 1;
		size_t vlen = *v == '[' ? strcspn(v, "]") + 1 : strcspn(v, ",");
		char key[64], value[128];

		assert_true(p[klen] == ':' && klen < sizeof key && vlen < sizeof value);
		memcpy(key, p, klen);
		key[klen] = '\0';
		memcpy(value, v, vlen);
		value[vlen] = '\0';
		if (strcmp(key, "max_split_size_mb") == 0)
			c.max_split_size = (size_t)strtoull(value, NULL, 10) * MiB;
		else if (strcmp(key, "roundup_power2_divisions") == 0)
			parse_divisions(value, c.divisions);
		else if (strcmp(key, "garbage_collection_threshold") == 0)
			c.gc_threshold = strtod(value, NULL);
		else if (strcmp(key, "memory_fraction") == 0)
			c.fraction_set = true, c.memory_fraction = strtod(value, NULL);
		else if (strcmp(key, "expandable_segments") == 0)
			c.expandable = strcmp(value, "True") == 0;
		else if (strcmp(key, "expandable_stitching") == 0)
			; /* libdevcache's own: X_STITCH says what to expect */
		else
			fail_msg("the test reads no option %s", key);
		p = v + vlen;
		if (*p == ',')
			p++;
	}
	return c;
}

/* ---- the comparison -------------------------------------------------------------- */

/* What PyTorch's memory_stats() shows, and whether the last allocation
 * succeeded. */
enum figure {
	F_OK, F_ALLOCATED, F_ALLOCATED_PEAK, F_RESERVED, F_RESERVED_PEAK, F_REQUESTED,
	F_REQUESTED_PEAK, F_NUM_DEVICE_ALLOC, F_NUM_DEVICE_FREE, F_NUM_ALLOC_RETRIES, F_NUM_OOMS,
	F_COUNT
};

static const char *const figure_names[F_COUNT] = {
	"success of the allocation", "allocated_bytes", "allocated_bytes.peak", "reserved_bytes",
	"reserved_bytes.peak", "requested_bytes", "requested_bytes.peak", "num_device_alloc",
	"num_device_free", "num_alloc_retries", "num_ooms"};

static void lib_figures(devcache_device_t *dev, bool ok, int64_t f[F_COUNT])
{
	devcache_stats_t s;

	assert_int_equal(devcache_stats(dev, &s), 0);
	f[F_OK] = ok;
	f[F_ALLOCATED] = s.allocated_bytes[DEVCACHE_POOL_ALL].current;
	f[F_ALLOCATED_PEAK] = s.allocated_bytes[DEVCACHE_POOL_ALL].peak;
	f[F_RESERVED] = s.reserved_bytes[DEVCACHE_POOL_ALL].current;
	f[F_RESERVED_PEAK] = s.reserved_bytes[DEVCACHE_POOL_ALL].peak;
	f[F_REQUESTED] = s.requested_bytes[DEVCACHE_POOL_ALL].current;
	f[F_REQUESTED_PEAK] = s.requested_bytes[DEVCACHE_POOL_ALL].peak;
	f[F_NUM_DEVICE_ALLOC] = (int64_t)s.num_device_alloc;
	f[F_NUM_DEVICE_FREE] = (int64_t)s.num_device_free;
	f[F_NUM_ALLOC_RETRIES] = (int64_t)s.num_alloc_retries;
	f[F_NUM_OOMS] = (int64_t)s.num_ooms;
}

static void model_figures(const struct ptm *m, bool ok, int64_t f[F_COUNT])
{
	struct ptm_stats s;

	ptm_stats(m, &s);
	f[F_OK] = ok;
	f[F_ALLOCATED] = s.allocated;
	f[F_ALLOCATED_PEAK] = s.allocated_peak;
	f[F_RESERVED] = s.reserved;
	f[F_RESERVED_PEAK] = s.reserved_peak;
	f[F_REQUESTED] = s.requested;
	f[F_REQUESTED_PEAK] = s.requested_peak;
	f[F_NUM_DEVICE_ALLOC] = (int64_t)s.num_device_alloc;
	f[F_NUM_DEVICE_FREE] = (int64_t)s.num_device_free;
	f[F_NUM_ALLOC_RETRIES] = (int64_t)s.num_alloc_retries;
	f[F_NUM_OOMS] = (int64_t)s.num_ooms;
}

static void describe(const struct trace *t, size_t i, char *out, size_t size)
{
	const struct event *e = &t->ev[i];

	if (e->kind == EV_ALLOC)
		snprintf(out, size, "event %zu of %zu (alloc of tensor %" PRIu32 ", %" PRIu64
			 " bytes on stream %u)", i, t->n, e->id, e->size, (unsigned)e->stream);
	else if (e->kind == EV_FREE)
		snprintf(out, size, "event %zu of %zu (free of tensor %" PRIu32 ")", i, t->n, e->id);
	else
		snprintf(out, size, "event %zu of %zu (empty_cache)", i, t->n);
}

struct test_case {
	const struct trace *trace;
	const struct setting *setting;
	/* The paths (X_*) the model must take: the setting's for a generated
	 * trace, whose purpose they are; for a recorded one only those of
	 * the settings made for it (below). */
	unsigned expect;
	char name[192];
};

/* Where each figure, and the blocks' addresses, first differ. */
struct divergence {
	size_t at[F_COUNT + 1]; /* [F_COUNT]: addresses; SIZE_MAX: never */
	int64_t lib[F_COUNT + 1], model[F_COUNT + 1];
};

/* The message for a case that diverged: every figure that differs at the
 * first event where any does, then where each other one first differs. */
static void report(const struct trace *t, const struct divergence *d, uint64_t base, char *out,
		   size_t size)
{
	size_t first = SIZE_MAX, used = 0;
	char what[256];

	for (int k = 0; k < F_COUNT; k++)
		first = d->at[k] < first ? d->at[k] : first;
#define ADD(...) (used += (size_t)snprintf(out + used, used < size ? size - used : 0, __VA_ARGS__))
	if (first != SIZE_MAX) {
		describe(t, first, what, sizeof what);
		ADD("first difference at %s:", what);
		for (int k = 0; k < F_COUNT; k++)
			if (d->at[k] == first)
				ADD(" %s: libdevcache %" PRId64 ", model %" PRId64 ";", figure_names[k],
				    d->lib[k], d->model[k]);
		for (int k = 0; k < F_COUNT; k++)
			if (d->at[k] != first && d->at[k] != SIZE_MAX)
				ADD(" later, %s first differs at event %zu: libdevcache %" PRId64
				    ", model %" PRId64 ";",
				    figure_names[k], d->at[k], d->lib[k], d->model[k]);
	} else {
		ADD("every figure agrees at every event;");
	}
	if (d->at[F_COUNT] != SIZE_MAX) {
		describe(t, d->at[F_COUNT], what, sizeof what);
		ADD(" the blocks' addresses first differ at %s: libdevcache base+%#" PRIx64
		    ", model base+%#" PRIx64,
		    what, (uint64_t)d->lib[F_COUNT] - base, (uint64_t)d->model[F_COUNT] - base);
	}
#undef ADD
}

/* With stitching, a request fails only when memory has run out: every
 * free granule is unmapped, and the granules holding live blocks and
 * those the request needs (at most one more than its size in granules,
 * where it straddles) pass memory_fraction's cap. */
static void check_stitch_failure(devcache_device_t *dev, uint64_t size, uint64_t total,
				 const char *options)
{
	const char *f = strstr(options, "memory_fraction:");
	uint64_t cap = (uint64_t)(strtod(f + strlen("memory_fraction:"), NULL) * (double)total);
	uint64_t rsize = (size + 511) / 512 * 512, gran = 2 * MiB;
	devcache_stats_t s;

	assert_non_null(f);
	assert_int_equal(devcache_stats(dev, &s), 0);
	int64_t reserved = s.reserved_bytes[DEVCACHE_POOL_ALL].current;
	int64_t live = s.active_bytes[DEVCACHE_POOL_ALL].current;
	/* No free granule is left mapped... */
	if (reserved - live >= (int64_t)(2 * gran) * (int64_t)s.active[DEVCACHE_POOL_ALL].current +
					      (int64_t)gran)
		fail_msg("a failed request left %" PRId64 " bytes mapped around %" PRId64
			 " live ones",
			 reserved - live, live);
	/* ...and what the request needs does not fit under the cap. */
	if ((uint64_t)reserved + ((rsize + gran - 1) / gran + 1) * gran <= cap)
		fail_msg("a request of %" PRIu64 " bytes failed with %" PRId64
			 " bytes mapped under a cap of %" PRIu64,
			 size, reserved, cap);
}

static void run_case(void **state)
{
	const struct test_case *c = *state;
	const struct trace *t = c->trace;
	char opts[1024], why[4096];
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV,
				     .options = opts};
	devcache_ctx_t *ctx;
	devcache_device_t *dev;
	devcache_device_info_t info;
	devcache_stream_t streams[2] = {NULL, NULL};
	void **lib_ptr = calloc(t->tensors, sizeof *lib_ptr);
	uint64_t *model_addr = calloc(t->tensors, sizeof *model_addr);
	bool *lib_live = calloc(t->tensors, sizeof *lib_live);
	bool *model_live = calloc(t->tensors, sizeof *model_live);
	struct divergence d;
	int64_t lf[F_COUNT] = {0}, mf[F_COUNT] = {0};
	/* With stitching, the two agree until PyTorch's policy fails a
	 * request, which stitching may then serve. */
	bool stitch = c->setting->expect & X_STITCH, compare = true;
	uint64_t lib_failures = 0, stitches = 0;

	assert_true(lib_ptr && model_addr && lib_live && model_live);
	for (int k = 0; k <= F_COUNT; k++)
		d.at[k] = SIZE_MAX;
	snprintf(opts, sizeof opts, "log_level:error,backend_path:%s,backends:arena%s%s",
		 test_env("TEST_ARENA"), *c->setting->options ? "," : "", c->setting->options);
	if (devcache_open_ex(&ctx, &args))
		fail_msg("devcache_open_ex(%s): %s", opts, devcache_last_error());
	if (devcache_device_get(ctx, "arena:0", &dev) || devcache_device_info(dev, &info) ||
	    devcache_stream_create(dev, &streams[1]))
		fail_msg("the arena device: %s", devcache_last_error());
	struct ptm_config config = model_config(c->setting->options, info.total_memory, arena_base());
	struct ptm *m = ptm_new(&config);
	assert_non_null(m);

	/* Both sides run the whole trace, each freeing only what it holds. */
	for (size_t i = 0; i < t->n; i++) {
		const struct event *e = &t->ev[i];
		bool lib_ok = true, model_ok = true;

		if (e->kind == EV_ALLOC) {
			int rc = devcache_alloc(dev, e->size, streams[e->stream], &lib_ptr[e->id]);
			int mrc = ptm_alloc(m, e->size, e->stream, &model_addr[e->id]);

			if (rc && rc != DEVCACHE_ENOMEM)
				fail_msg("devcache_alloc: %s", devcache_last_error());
			assert_int_not_equal(mrc, -2);
			lib_live[e->id] = lib_ok = rc == 0;
			model_live[e->id] = model_ok = mrc == 0;
			lib_failures += !lib_ok;
			if (stitch && !model_ok)
				compare = false;
			if (stitch && !lib_ok)
				check_stitch_failure(dev, e->size, info.total_memory, c->setting->options);
			if (compare && lib_ok && model_ok && d.at[F_COUNT] == SIZE_MAX &&
			    (uintptr_t)lib_ptr[e->id] != model_addr[e->id]) {
				d.at[F_COUNT] = i;
				d.lib[F_COUNT] = (int64_t)(uintptr_t)lib_ptr[e->id];
				d.model[F_COUNT] = (int64_t)model_addr[e->id];
			}
		} else if (e->kind == EV_FREE) {
			if (lib_live[e->id] && devcache_free(dev, lib_ptr[e->id]))
				fail_msg("devcache_free: %s", devcache_last_error());
			if (model_live[e->id])
				ptm_free(m, model_addr[e->id]);
			lib_live[e->id] = model_live[e->id] = false;
		} else {
			assert_int_equal(devcache_empty_cache(dev), 0);
			ptm_empty_cache(m);
		}
		lib_figures(dev, lib_ok, lf);
		model_figures(m, model_ok, mf);
		for (int k = 0; k < F_COUNT && compare; k++)
			if (lf[k] != mf[k] && d.at[k] == SIZE_MAX) {
				d.at[k] = i;
				d.lib[k] = lf[k];
				d.model[k] = mf[k];
			}
	}

	/* What the trace made the model go through, for the log. */
	struct ptm_stats ms;
	ptm_stats(m, &ms);
	print_message("# %s: %zu events; the model: peak allocated %" PRId64 " MiB, peak reserved %" PRId64
		      " MiB, %" PRIu64 " driver allocations, %" PRIu64 " frees (%" PRIu64
		      " by garbage collection, %" PRIu64 " oversize), %" PRIu64 " retries, %" PRIu64
		      " OOMs\n",
		      c->name, t->n, ms.allocated_peak >> 20, ms.reserved_peak >> 20, ms.num_device_alloc,
		      ms.num_device_free, ms.gc_releases, ms.oversize_releases, ms.num_alloc_retries,
		      ms.num_ooms);

	devcache_stats_t ls;
	assert_int_equal(devcache_stats(dev, &ls), 0);
	stitches = ls.num_stitches;
	if (!stitch)
		assert_int_equal(stitches, 0);
	for (uint32_t k = 0; k < t->tensors; k++)
		if (lib_live[k])
			devcache_free(dev, lib_ptr[k]);
	devcache_stream_destroy(dev, streams[1]);
	devcache_close(ctx);
	ptm_delete(m);
	free(lib_ptr);
	free(model_addr);
	free(lib_live);
	free(model_live);

	bool diverged = false;
	for (int k = 0; k <= F_COUNT; k++)
		diverged |= d.at[k] != SIZE_MAX;
	if (diverged) {
		report(t, &d, config.address_base, why, sizeof why);
		fail_msg("%s: %s", c->name, why);
	}
	unsigned x = c->expect;
	print_message("# %s: libdevcache: %" PRIu64 " failed allocations, %" PRIu64 " stitched\n",
		      c->name, lib_failures, stitches);
	if (((x & X_GC) && ms.gc_releases == 0) || ((x & X_OVERSIZE) && ms.oversize_releases == 0) ||
	    ((x & X_OOM) && (ms.num_alloc_retries == 0 || ms.num_ooms == 0)) ||
	    ((x & X_RETRY) && ms.num_alloc_retries == 0) ||
	    ((x & X_FREE) && ms.num_device_free == 0))
		fail_msg("%s: the trace no longer takes the paths this setting is for (in the model: "
			 "%" PRIu64 " releases by garbage collection, %" PRIu64 " of oversize blocks, "
			 "%" PRIu64 " retries, %" PRIu64 " OOMs, %" PRIu64 " driver frees)",
			 c->name, ms.gc_releases, ms.oversize_releases, ms.num_alloc_retries,
			 ms.num_ooms, ms.num_device_free);
}

/* ---- the model alone, against results worked out by hand from PyTorch's source ---- */

#define BASE ((uint64_t)1 << 40)

static struct ptm *model_new(struct ptm_config c)
{
	struct ptm *m;

	c.device_total = c.device_total ? c.device_total : 2 * GiB;
	c.max_split_size = c.max_split_size ? c.max_split_size : SIZE_MAX;
	c.max_non_split_rounding = 20 * MiB;
	c.address_base = BASE;
	assert_non_null(m = ptm_new(&c));
	return m;
}

static uint64_t must_alloc(struct ptm *m, uint64_t size)
{
	uint64_t addr = 0;

	assert_int_equal(ptm_alloc(m, size, 0, &addr), 0);
	return addr;
}

static struct ptm_stats model_stats(struct ptm *m)
{
	struct ptm_stats s;

	ptm_stats(m, &s);
	return s;
}

/* Sizes, pools and segments: a small block in a 2 MiB segment, 1-10 MiB
 * requests carved from 20 MiB segments, larger ones in their own, split
 * when more than 1 MiB is left. */
static void model_sizes(void **state)
{
	struct ptm *m = model_new((struct ptm_config){0});

	(void)state;
	assert_int_equal(must_alloc(m, 1), BASE);
	assert_int_equal(model_stats(m).allocated, 512);
	assert_int_equal(model_stats(m).reserved, 2 * MiB);
	assert_int_equal(must_alloc(m, 5 * MiB), BASE + 2 * MiB);
	assert_int_equal(must_alloc(m, 5 * MiB), BASE + 7 * MiB);
	assert_int_equal(model_stats(m).reserved, 22 * MiB);
	assert_int_equal(must_alloc(m, 12 * MiB + 1), BASE + 22 * MiB);
	assert_int_equal(model_stats(m).reserved, 36 * MiB);
	/* the rest of that 14 MiB segment, 2 MiB - 512, serves 1.5 MiB, and
	 * whole: what would be left is not more than 1 MiB */
	assert_int_equal(must_alloc(m, 3 * MiB / 2), BASE + 34 * MiB + 512);
	struct ptm_stats s = model_stats(m);
	assert_int_equal(s.num_device_alloc, 3);
	assert_int_equal(s.allocated, 512 + 10 * MiB + 12 * MiB + 512 + 2 * MiB - 512);
	assert_int_equal(s.requested, 1 + 10 * MiB + 12 * MiB + 1 + 3 * MiB / 2);
	ptm_delete(m);
}

/* Best fit: the smallest free block that fits, the lower address among
 * equals; roundup_power2_divisions. */
static void model_best_fit(void **state)
{
	struct ptm *m = model_new((struct ptm_config){
		.divisions = {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}});
	uint64_t a = must_alloc(m, 30 * MiB), b = must_alloc(m, 40 * MiB), c = must_alloc(m, 30 * MiB);

	(void)state;
	must_alloc(m, 30 * MiB);
	ptm_free(m, c);
	ptm_free(m, b);
	ptm_free(m, a);
	/* 30 MiB rounds to 32, 40 stays, 25 rounds to 28: the 32 MiB blocks
	 * at a and c fit best, a first; then the 40 MiB one */
	assert_int_equal(must_alloc(m, 25 * MiB), a);
	assert_int_equal(must_alloc(m, 25 * MiB), c);
	assert_int_equal(must_alloc(m, 25 * MiB), b);
	/* 4 divisions: 1200 MiB is between 1024 and 2048, and rounds to 1280 */
	uint64_t before = (uint64_t)model_stats(m).allocated;
	must_alloc(m, 1200 * MiB);
	assert_int_equal((uint64_t)model_stats(m).allocated - before, 1280 * MiB);
	ptm_delete(m);
}

/* max_split_size: an oversize block serves only requests at least
 * max_split_size and less than max_non_split_rounding smaller, whole. */
static void model_max_split(void **state)
{
	struct ptm *m = model_new((struct ptm_config){.max_split_size = 64 * MiB});
	uint64_t big = must_alloc(m, 100 * MiB);

	(void)state;
	ptm_free(m, big);
	assert_int_not_equal(must_alloc(m, 30 * MiB), big);
	assert_int_equal(model_stats(m).num_device_alloc, 2);
	uint64_t a = must_alloc(m, 90 * MiB); /* 100 < 90 + 20: taken whole */
	assert_int_equal(a, big);
	assert_int_equal(model_stats(m).allocated, 130 * MiB);
	ptm_free(m, a);
	assert_int_not_equal(must_alloc(m, 70 * MiB), big); /* 100 >= 70 + 20 */
	assert_int_equal(model_stats(m).num_device_alloc, 3);
	ptm_delete(m);
}

/* The out-of-memory sequence under memory_fraction: the cap refuses, the
 * cache is released, a retry; then an error. */
static void model_oom(void **state)
{
	struct ptm *m = model_new((struct ptm_config){.fraction_set = true, .memory_fraction = 0.25});
	uint64_t addr;

	(void)state;
	ptm_free(m, must_alloc(m, 300 * MiB));
	must_alloc(m, 400 * MiB); /* 300 + 400 > 512: release the 300, retry */
	struct ptm_stats s = model_stats(m);
	assert_int_equal(s.num_alloc_retries, 1);
	assert_int_equal(s.num_device_free, 1);
	assert_int_equal(s.reserved, 400 * MiB);
	assert_int_equal(s.reserved_peak, 400 * MiB);
	assert_int_equal(ptm_alloc(m, 200 * MiB, 0, &addr), -1);
	s = model_stats(m);
	assert_int_equal(s.num_alloc_retries, 2);
	assert_int_equal(s.num_ooms, 1);
	ptm_delete(m);

	/* With oversize blocks cached, the largest go first, until as much as
	 * the request is released; that needs no retry. */
	m = model_new((struct ptm_config){.fraction_set = true, .memory_fraction = 0.25,
					  .max_split_size = 64 * MiB});
	uint64_t x = must_alloc(m, 100 * MiB), y = must_alloc(m, 200 * MiB), z = must_alloc(m, 150 * MiB);
	ptm_free(m, x);
	ptm_free(m, y);
	ptm_free(m, z);
	must_alloc(m, 300 * MiB);
	s = model_stats(m);
	assert_int_equal(s.num_alloc_retries, 0);
	assert_int_equal(s.num_device_free, 2); /* 200 and 150; the 100 stays */
	assert_int_equal(s.oversize_releases, 2);
	assert_int_equal(s.reserved, 400 * MiB);
	ptm_delete(m);
}

/* Expandable segments: pages of 20 MiB in the large pool, one driver
 * allocation per map and one free per unmap, the free block before the
 * unmapped end grown in place, the cap checked against the allocation
 * size rather than what is mapped. */
static void model_expandable(void **state)
{
	struct ptm *m = model_new((struct ptm_config){.expandable = true});

	(void)state;
	uint64_t a = must_alloc(m, 24576000);
	assert_int_equal(a, BASE);
	struct ptm_stats s = model_stats(m);
	assert_int_equal(s.reserved, 40 * MiB);
	assert_int_equal(s.num_device_alloc, 1);
	uint64_t b = must_alloc(m, 30 * MiB); /* the free 17367040 bytes, and one page more */
	assert_int_equal(b, BASE + 24576000);
	s = model_stats(m);
	assert_int_equal(s.reserved, 60 * MiB);
	assert_int_equal(s.num_device_alloc, 2);
	ptm_free(m, a);
	ptm_free(m, b);
	ptm_empty_cache(m);
	s = model_stats(m);
	assert_int_equal(s.reserved, 0);
	assert_int_equal(s.num_device_free, 1);
	assert_int_equal(must_alloc(m, 1 * MiB + 512), BASE); /* a new segment, at the same place */
	ptm_delete(m);

	/* 0.05 of 2 GiB is 102.4 MiB: 85 MiB (86 to allocate) passes, and
	 * maps 100 MiB */
	m = model_new((struct ptm_config){.expandable = true, .fraction_set = true,
					  .memory_fraction = 0.05});
	uint64_t addr;
	must_alloc(m, 85 * MiB);
	assert_int_equal(model_stats(m).reserved, 100 * MiB);
	assert_int_equal(ptm_alloc(m, 16 * MiB, 0, &addr), -1); /* 100 + 16 > 102.4 */
	assert_int_equal(model_stats(m).num_ooms, 1);
	assert_int_equal(must_alloc(m, 10 * MiB), BASE + 85 * MiB); /* fits in the mapped rest */
	ptm_delete(m);
}

/* Garbage collection, only with memory_fraction set: when reserved memory
 * is above the threshold at a miss, whole free large segments at least as
 * old (in get_free_block calls) as the average go. */
static void model_gc(void **state)
{
	struct ptm *m = model_new((struct ptm_config){.gc_threshold = 0.5, .fraction_set = true,
						     .memory_fraction = 0.5});
	uint64_t p[4];

	(void)state;
	for (int i = 0; i < 4; i++)
		p[i] = must_alloc(m, 100 * MiB);
	ptm_free(m, p[0]); /* free at count 4 */
	ptm_free(m, p[1]);
	must_alloc(m, 150 * MiB); /* a miss at 5, reserved 400 <= 512: no collection */
	ptm_free(m, p[2]);        /* free at count 5 */
	must_alloc(m, 120 * MiB); /* 6: reserved 550 > 512; ages 2, 2, 1: p[0] and p[1] go */
	struct ptm_stats s = model_stats(m);
	assert_int_equal(s.gc_releases, 2);
	assert_int_equal(s.reserved, 470 * MiB);
	ptm_delete(m);

	/* without memory_fraction, nothing is collected */
	m = model_new((struct ptm_config){.gc_threshold = 0.5});
	for (int i = 0; i < 4; i++)
		p[i] = must_alloc(m, 300 * MiB);
	for (int i = 0; i < 3; i++)
		ptm_free(m, p[i]);
	must_alloc(m, 400 * MiB);
	assert_int_equal(model_stats(m).gc_releases, 0);
	assert_int_equal(model_stats(m).num_device_free, 0);
	ptm_delete(m);
}

/* ---- the recorded traces ----------------------------------------------------------- */

enum { N_RECORDED_MAX = 16 };

/* A devcache-trace(5) file, read with the tool's reader: its slots stand
 * for the tensors (a slot is named again only once freed), on the
 * default stream or stream 1.  Exits with status 99, a hard error, on
 * a trace it cannot read. */
static void read_recorded(const char *path, struct trace *t)
{
	struct trace_set set;
	char err[512] = "";
	const char *base = strrchr(path, '/');
	int rc;

	memset(t, 0, sizeof *t);
	t->name = base ? base + 1 : path;
	trace_set_init(&set);
	rc = trace_set_open(&set, path, err, sizeof err);
	while (!rc && !(rc = trace_set_next(&set, err, sizeof err)) && set.n_events)
		for (size_t i = 0; i < set.n_events && !rc; i++) {
			const struct trace_event *e = &set.events[i];

			if (e->op == TRACE_OP_ALLOC && e->stream > 1) {
				snprintf(err, sizeof err, "%s: stream %u (the test has two)", path,
					 (unsigned)e->stream);
				rc = -1;
			} else if (e->op == TRACE_OP_ALLOC) {
				trace_push(t, (struct event){.kind = EV_ALLOC,
							     .stream = (uint8_t)e->stream,
							     .id = e->slot, .size = e->size});
				if (e->slot >= t->tensors)
					t->tensors = e->slot + 1;
			} else if (e->op == TRACE_OP_FREE) {
				trace_push(t, (struct event){.kind = EV_FREE, .id = e->slot});
			}
		}
	trace_set_destroy(&set);
	if (rc) {
		fprintf(stderr, "test-alloc-pytorch: %s\n", err);
		exit(99);
	}
}

/* The settings above cap memory at fractions of the arena device that
 * most recorded traces never reach.  These cap each recorded trace from
 * its own peaks, allocated and reserved (the model's, with defaults), so
 * that the out-of-memory paths run on real workloads too: a cap below the
 * peak allocated fails some allocations after a retry; one between the
 * two peaks makes the cache flush and retry; garbage collection runs
 * under the peak reserved. */
static const struct {
	const char *options;   /* before memory_fraction, which follows */
	double allocated;      /* the cap: this times the peak allocated bytes */
	double reserved;       /* plus this times the peak reserved */
	unsigned expect;       /* X_*: X_STITCH as in settings[], the others required */
} own_caps[] = {
	{"", 0.9, 0, X_OOM},
	{"", 0.5, 0.5, X_RETRY},
	{"garbage_collection_threshold:0.6,", 0, 1, 0},
	{"expandable_segments:True,expandable_stitching:False,", 0.9, 0, X_OOM},
	{"expandable_segments:True,", 1.1, 0, X_STITCH},
};
enum { N_OWN_CAPS = sizeof own_caps / sizeof *own_caps };

struct own_setting {
	char options[160];
	struct setting setting;
};

/* The model's figures for t with PyTorch's defaults. */
static struct ptm_stats model_peaks(const struct trace *t, uint64_t total)
{
	/* Any base: addresses only order the blocks. */
	struct ptm_config c = model_config("", total, (uint64_t)1 << 40);
	uint64_t *addr = calloc(t->tensors ? t->tensors : 1, sizeof *addr);
	struct ptm *m = ptm_new(&c);
	struct ptm_stats st;

	if (!addr || !m) {
		fprintf(stderr, "test-alloc-pytorch: out of memory\n");
		exit(99);
	}
	for (size_t i = 0; i < t->n; i++)
		if (t->ev[i].kind == EV_ALLOC)
			ptm_alloc(m, t->ev[i].size, t->ev[i].stream, &addr[t->ev[i].id]);
		else if (t->ev[i].kind == EV_FREE)
			ptm_free(m, addr[t->ev[i].id]);
	ptm_stats(m, &st);
	ptm_delete(m);
	free(addr);
	return st;
}

static void make_own_settings(const struct trace *t, struct own_setting *out)
{
	const uint64_t total = ARENA_TOTAL;
	struct ptm_stats st = model_peaks(t, total);

	for (size_t k = 0; k < N_OWN_CAPS; k++) {
		double fraction = (own_caps[k].allocated * (double)st.allocated_peak +
				   own_caps[k].reserved * (double)st.reserved_peak) /
				  (double)total;

		snprintf(out[k].options, sizeof out[k].options, "%smemory_fraction:%.9f",
			 own_caps[k].options, fraction < 1 ? fraction : 1.0);
		out[k].setting = (struct setting){.options = out[k].options,
						  .expect = own_caps[k].expect & X_STITCH};
	}
}

/* bench/torch-*.trace.gz, at most N_RECORDED_MAX of them; none is a hard
 * error, as they are part of the source tree. */
static size_t read_recorded_traces(struct trace *traces)
{
	char pattern[4096];
	glob_t g;
	size_t n;

	snprintf(pattern, sizeof pattern, "%s/../bench/torch-*.trace.gz", test_env("TEST_SRCDIR"));
	if (glob(pattern, 0, NULL, &g) != 0 || g.gl_pathc == 0 || g.gl_pathc > N_RECORDED_MAX) {
		fprintf(stderr, "test-alloc-pytorch: %s: no recorded traces, or more than %d\n",
			pattern, N_RECORDED_MAX);
		exit(99);
	}
	for (n = 0; n < g.gl_pathc; n++) {
		read_recorded(g.gl_pathv[n], &traces[n]);
		/* The name points into the glob's path, which goes. */
		traces[n].name = strdup(traces[n].name);
		if (!traces[n].name) {
			fprintf(stderr, "test-alloc-pytorch: out of memory\n");
			exit(99);
		}
	}
	globfree(&g);
	return n;
}

int main(void)
{
	enum { N_GENERATED = 3, N_TRACES = N_GENERATED + N_RECORDED_MAX };
	static struct trace traces[N_TRACES];
	enum { N_SETTINGS = sizeof settings / sizeof *settings };
	static struct test_case cases[N_TRACES * (N_SETTINGS + N_OWN_CAPS)];
	static struct own_setting own[N_RECORDED_MAX][N_OWN_CAPS];
	static const struct CMUnitTest model_tests[] = {
		cmocka_unit_test(model_sizes),     cmocka_unit_test(model_best_fit),
		cmocka_unit_test(model_max_split), cmocka_unit_test(model_oom),
		cmocka_unit_test(model_expandable), cmocka_unit_test(model_gc),
	};
	enum { N_MODEL = sizeof model_tests / sizeof *model_tests };
	static struct CMUnitTest tests[N_MODEL + N_TRACES * (N_SETTINGS + N_OWN_CAPS)];
	size_t n = 0, n_traces;

	for (; n < N_MODEL; n++)
		tests[n] = model_tests[n];
	gen_training(&traces[0]);
	gen_decoding(&traces[1]);
	gen_switching(&traces[2]);
	n_traces = N_GENERATED + read_recorded_traces(&traces[N_GENERATED]);
	for (size_t k = 0; k < n_traces; k++) {
		bool recorded = k >= N_GENERATED;
		size_t n_own = recorded ? N_OWN_CAPS : 0;

		if (recorded)
			make_own_settings(&traces[k], own[k - N_GENERATED]);
		for (size_t s = 0; s < N_SETTINGS + n_own; s++, n++) {
			struct test_case *c = &cases[n - N_MODEL];
			bool mine = s >= N_SETTINGS;

			c->trace = &traces[k];
			c->setting = mine ? &own[k - N_GENERATED][s - N_SETTINGS].setting : &settings[s];
			c->expect = mine ? own_caps[s - N_SETTINGS].expect : recorded ? 0 : settings[s].expect;
			snprintf(c->name, sizeof c->name, "%s [%s]", traces[k].name,
				 *c->setting->options ? c->setting->options : "defaults");
			tests[n] = (struct CMUnitTest){.name = c->name, .test_func = run_case,
						       .initial_state = c};
		}
	}
	cmocka_set_message_output(CM_OUTPUT_TAP);
	int rc = _cmocka_run_group_tests("test-alloc-pytorch", tests, n, NULL, NULL);
	for (size_t k = 0; k < n_traces; k++) {
		free(traces[k].ev);
		if (k >= N_GENERATED)
			free((char *)traces[k].name);
	}
	return rc;
}
