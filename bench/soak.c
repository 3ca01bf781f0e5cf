/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* soak.c - `make bench`: threads load, lock, verify, release and evict models under tight budgets while others allocate on several streams, for a set time; then the cache's and the allocator's invariants. */
#define _GNU_SOURCE /* setenv, strdup */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <devcache.h>

#include "bench.h"
#include "soak.h"

/*
 * Two contexts share the device, each with the same tight budgets
 * (SOAK_VRAM and SOAK_RAM for the model cache, a cap on the device memory
 * their allocators may reserve) and different settings, so that both the
 * partial-loading and the whole-model paths, and both the thread cache and
 * the expandable segments, run at once:
 *
 *   context 0  partial_loading, thread_cache (the default)
 *   context 1  mmap false (host placements are copies), expandable_segments
 *              where the device can map, garbage collection (which turns
 *              the thread cache off)
 *
 * Loader threads load a random model into a random context, verify a
 * random tensor's bytes, hold the model a little (moving a partial
 * model's tensors meanwhile), release it, and now and then evict every
 * unlocked model.  Allocator threads allocate and free blocks of random
 * sizes on streams of their own, write a pattern at each end of a block
 * and check it when they free it, record blocks on their other streams,
 * and empty the caches.  DEVCACHE_ENOMEM is what tight budgets give and is
 * counted, as are the loads the soak cancels on purpose (a progress
 * callback); any other error, a wrong byte or a logged error is a failure.
 */

/* ---- failing -------------------------------------------------------------------- */

__attribute__((format(printf, 2, 3))) void soak_fail(struct soak *s, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&s->fail_lock);
	if (!s->failed) {
		va_start(ap, fmt);
		vsnprintf(s->failure, sizeof s->failure, fmt, ap);
		va_end(ap);
		s->failed = 1;
	}
	pthread_mutex_unlock(&s->fail_lock);
	__atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
}

bool soak_stopping(struct soak *s)
{
	return __atomic_load_n(&s->stop, __ATOMIC_ACQUIRE);
}

/* A call's result: 0, or DEVCACHE_ENOMEM counted in *enomem; anything else
 * fails the soak naming the call.  True when the call succeeded. */
bool soak_ok(struct soak *s, int rc, uint64_t *enomem, const char *call, const char *what)
{
	if (rc == 0)
		return true;
	if (rc == DEVCACHE_ENOMEM && enomem) {
		(*enomem)++;
		return false;
	}
	soak_fail(s, "%s (%s): %s: %s", call, what, devcache_strerror(rc), devcache_last_error());
	return false;
}

/* Warnings are counted (and the first few shown); an error is a failure. */
static void log_handler(void *user, enum devcache_log_level level, const char *message)
{
	struct soak *s = user;

	if (level == DEVCACHE_LOG_ERROR) {
		soak_fail(s, "the library logged an error: %s", message);
		return;
	}
	if (level == DEVCACHE_LOG_WARNING &&
	    __atomic_fetch_add(&s->warnings, 1, __ATOMIC_RELAXED) < 3)
		fprintf(stderr, "soak: warning logged: %s\n", message);
}

/* ---- the device and its contexts ---------------------------------------------------- */

struct options {
	const char *device, *backend_path, *fakes, *dir;
	double seconds;
	int loaders, allocators;
	uint64_t seed;
	bool verbose, real;
};

/* What a vendor device needs: its backend module and its fake runtime. */
struct vendor {
	const char *name, *fake, *memory_env, *devices_env;
};

static const struct vendor vendors[] = {
	{"cuda", "libfake-cuda.so", "FAKE_CUDA_MEMORY_MB", "FAKE_CUDA_DEVICES"},
	{"hip", "libfake-hip.so", "FAKE_HIP_MEMORY_MB", "FAKE_HIP_DEVICES"},
	{"ze", "libfake-ze.so", "FAKE_ZE_MEMORY_MB", "FAKE_ZE_DEVICES"},
};

static const struct vendor *vendor_of(const char *device)
{
	for (size_t i = 0; i < sizeof vendors / sizeof *vendors; i++)
		if (strcmp(device, vendors[i].name) == 0)
			return &vendors[i];
	return NULL;
}

/* The backend module NAME.so in one of the directories of path. */
static bool module_found(const char *path, const char *name)
{
	char *dirs = strdup(path), *save = NULL, file[PATH_MAX];
	bool found = false;

	for (char *d = strtok_r(dirs, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
		snprintf(file, sizeof file, "%s/%s.so", d, name);
		found = access(file, R_OK) == 0;
	}
	free(dirs);
	return found;
}

static int open_ctx(struct soak *s, const char *options, int c)
{
	devcache_open_args_t args = {.struct_size = sizeof args, .options = options,
				     .log_fn = log_handler, .log_user = s,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV};
	const char *name = strcmp(s->device, "host") == 0 ? "host" : s->device;
	int rc;

	if ((rc = devcache_open_ex(&s->ctx[c], &args))) {
		fprintf(stderr, "soak: devcache_open_ex(%s): %s\n", options, devcache_last_error());
		return rc;
	}
	/* The caller says why there is no device, or skips. */
	return devcache_device_get(s->ctx[c], name, &s->dev[c]);
}

/* Opens both contexts; a vendor device on its fake runtime, whose memory
 * is made SOAK_DEVICE_MIB.  1: skipped (said why), -1: failed. */
static int open_device(struct soak *s, const struct options *o)
{
	char base[8192], opts[8192 + 512], lib[PATH_MAX], mib[32];
	const struct vendor *v = NULL;
	devcache_device_info_t info;

	if (strcmp(o->device, "host") == 0) {
		snprintf(base, sizeof base, "backend_path:/nonexistent");
	} else if ((v = vendor_of(o->device)) && o->real) {
		/* The vendor's own runtime, as the backend finds it. */
		snprintf(base, sizeof base, "backend_path:%s,backends:%s",
			 o->backend_path ? o->backend_path : "/nonexistent", v->name);
	} else if (v) {
		snprintf(lib, sizeof lib, "%s/%s", o->fakes ? o->fakes : ".", v->fake);
		if (!o->backend_path || !module_found(o->backend_path, v->name)) {
			printf("soak: %s: SKIP: the %s backend is not built\n", v->name, v->name);
			return 1;
		}
		if (access(lib, R_OK) != 0) {
			printf("soak: %s: SKIP: the fake runtime %s is not built (make check and make bench build it)\n",
			       v->name, lib);
			return 1;
		}
		/* The fakes read these when the backend starts them. */
		snprintf(mib, sizeof mib, "%d", SOAK_DEVICE_MIB);
		setenv(v->memory_env, mib, 1);
		setenv(v->devices_env, "1", 1);
		snprintf(base, sizeof base, "backend_path:%s,backends:%s,%s_library:%s",
			 o->backend_path, v->name, v->name, lib);
	} else {
		fprintf(stderr, "soak: unknown device %s (host, cuda, hip or ze)\n", o->device);
		return -1;
	}
	snprintf(s->options_common, sizeof s->options_common,
		 "log_level:warning,max_cache_vram:%dM,max_cache_ram:%dM,staging_buffer_size:64K,"
		 "staging_buffers:3,load_workers:2",
		 SOAK_VRAM_MIB, SOAK_RAM_MIB);
	snprintf(opts, sizeof opts, "%s,%s,partial_loading:true", base, s->options_common);
	int rc = open_ctx(s, opts, 0);
	if (rc == DEVCACHE_ENODEV && o->real) {
		printf("soak: %s on the vendor's runtime: SKIP: %s\n", o->device,
		       devcache_last_error());
		return 1;
	}
	if (rc == DEVCACHE_ENODEV)
		fprintf(stderr, "soak: %s\n", devcache_last_error());
	if (rc || devcache_device_info(s->dev[0], &info))
		return -1;
	s->host_memory = info.caps & DEVCACHE_CAP_HOST_MEMORY;
	s->vmm = info.caps & DEVCACHE_CAP_VMM;
	snprintf(s->device_name, sizeof s->device_name, "%s (%s)", info.id, info.name);
	/* The allocators' cap: SOAK_DEVICE_MIB, which on the fakes is the
	 * device's memory, shared by both. */
	s->fraction = (double)SOAK_DEVICE_MIB * MIB / (double)info.total_memory;
	if (s->fraction > 1)
		s->fraction = 1;
	devcache_close(s->ctx[0]);
	s->ctx[0] = NULL;
	snprintf(opts, sizeof opts, "%s,%s,partial_loading:true,memory_fraction:%.6f", base,
		 s->options_common, s->fraction);
	if ((rc = open_ctx(s, opts, 0)) == DEVCACHE_ENODEV)
		fprintf(stderr, "soak: %s\n", devcache_last_error());
	if (rc)
		return -1;
	snprintf(opts, sizeof opts,
		 "%s,%s,mmap:false,memory_fraction:%.6f,garbage_collection_threshold:0.8%s",
		 base, s->options_common, s->fraction, s->vmm ? ",expandable_segments:true" : "");
	s->expandable[1] = s->vmm;
	if ((rc = open_ctx(s, opts, 1)) == DEVCACHE_ENODEV)
		fprintf(stderr, "soak: %s\n", devcache_last_error());
	return rc ? -1 : 0;
}

/* The fake runtime's count of live objects, from the copy the backend
 * loaded; a reference of our own keeps it loaded after the contexts close.
 * NULL on the host. */
static size_t (*fake_live(const struct options *o, void **handle_p))(void)
{
	const struct vendor *v = vendor_of(o->device);
	char lib[PATH_MAX], name[64];
	size_t (*live)(void) = NULL;

	*handle_p = NULL;
	if (!v || o->real)
		return NULL;
	snprintf(lib, sizeof lib, "%s/%s", o->fakes ? o->fakes : ".", v->fake);
	if (!(*handle_p = dlopen(lib, RTLD_NOW | RTLD_NOLOAD)))
		return NULL;
	snprintf(name, sizeof name, "fake_%s_live", v->name);
	*(void **)&live = dlsym(*handle_p, name);
	return live;
}

/* ---- running -------------------------------------------------------------------- */

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: soak [OPTIONS]\n"
		"  Threads load, verify and evict models and allocate on streams under tight\n"
		"  budgets for a set time, then the invariants are checked; exit 0, or 2 on a\n"
		"  failure.\n"
		"  -d, --device DEV        host (the default), or cuda, hip, ze on the fakes\n"
		"  -r, --real              cuda, hip, ze on the vendor's runtime, not the fake\n"
		"  -s, --seconds N         how long (default 10)\n"
		"  -t, --threads N         loader threads (default 4)\n"
		"  -a, --alloc-threads N   allocator threads (default: as many as loaders)\n"
		"  -S, --seed N            the threads' seed (default 1)\n"
		"  -b, --backend-path DIRS where the backend modules are (colon-separated)\n"
		"  -f, --fakes DIR         where the fake runtimes are\n"
		"  -D, --dir DIR           where to write the models (default $TMPDIR or /tmp)\n"
		"  -v, --verbose           print the cache and memory summaries at the end\n");
}

static int parse_options(int argc, char **argv, struct options *o)
{
	static const struct option longs[] = {
		{"device", required_argument, NULL, 'd'}, {"seconds", required_argument, NULL, 's'},
		{"threads", required_argument, NULL, 't'},
		{"alloc-threads", required_argument, NULL, 'a'},
		{"seed", required_argument, NULL, 'S'}, {"backend-path", required_argument, NULL, 'b'},
		{"fakes", required_argument, NULL, 'f'}, {"dir", required_argument, NULL, 'D'},
		{"verbose", no_argument, NULL, 'v'}, {"real", no_argument, NULL, 'r'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}};
	int ch;

	*o = (struct options){.device = "host", .seconds = 10, .loaders = 4, .allocators = -1,
			      .seed = 1};
	o->dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	while ((ch = getopt_long(argc, argv, "d:s:t:a:S:b:f:D:vrh", longs, NULL)) != -1) {
		switch (ch) {
		case 'd': o->device = optarg; break;
		case 's': o->seconds = atof(optarg); break;
		case 't': o->loaders = atoi(optarg); break;
		case 'a': o->allocators = atoi(optarg); break;
		case 'S': o->seed = strtoull(optarg, NULL, 0); break;
		case 'b': o->backend_path = optarg; break;
		case 'f': o->fakes = optarg; break;
		case 'D': o->dir = optarg; break;
		case 'v': o->verbose = true; break;
		case 'r': o->real = true; break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -1;
		}
	}
	if (o->allocators < 0)
		o->allocators = o->loaders;
	if (optind < argc || o->seconds <= 0 || o->loaders < 0 || o->allocators < 0 ||
	    o->loaders + o->allocators == 0 || o->loaders > 64 || o->allocators > 64) {
		usage(stderr);
		return -1;
	}
	return 0;
}

/* Starts the threads, lets them run, stops and joins them. */
static int run_threads(struct soak *s, const struct options *o, struct soak_worker *w, int n)
{
	int started = 0;

	for (int i = 0; i < n; i++) {
		w[i] = (struct soak_worker){.s = s, .id = i, .loader = i < o->loaders};
		rng_seed(&w[i].rng, o->seed * 1000003u + (uint64_t)i);
		if (pthread_create(&w[i].thread, NULL, w[i].loader ? soak_loader : soak_allocator,
				   &w[i])) {
			soak_fail(s, "cannot start thread %d", i);
			break;
		}
		started++;
	}
	double t0 = now_seconds();
	while (!soak_stopping(s) && now_seconds() - t0 < o->seconds)
		usleep(20000);
	__atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < started; i++)
		pthread_join(w[i].thread, NULL);
	s->elapsed = now_seconds() - t0;
	return started == n ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct options o;
	struct soak s = {.fail_lock = PTHREAD_MUTEX_INITIALIZER};
	struct soak_models ms;
	struct soak_worker *w;
	int rc, n;

	if (parse_options(argc, argv, &o))
		return 2;
	s.device = o.device;
	if ((rc = open_device(&s, &o)) != 0) {
		for (int c = 0; c < SOAK_CONTEXTS; c++)
			devcache_close(s.ctx[c]);
		return rc > 0 ? 0 : 2;
	}
	if (soak_models_write(&ms, o.dir)) {
		soak_models_remove(&ms);
		return 2;
	}
	s.ms = &ms;
	if (!(s.devnull = fopen("/dev/null", "w"))) {
		fprintf(stderr, "soak: /dev/null: %s\n", strerror(errno));
		return 2;
	}
	n = o.loaders + o.allocators;
	if (!(w = calloc((size_t)n, sizeof *w))) {
		fprintf(stderr, "soak: out of memory\n");
		return 2;
	}
	printf("== Soak on %s: %g s, %d loader and %d allocator threads, seed %llu\n",
	       s.device_name, o.seconds, o.loaders, o.allocators, (unsigned long long)o.seed);
	soak_print_setup(&s, stdout);
	run_threads(&s, &o, w, n);
	soak_add_counts(&s, w, n);
	/* Where a run failed, its threads stopped early, holding nothing: the
	 * invariants are checked still, for what they say about the failure. */
	soak_check_invariants(&s, o.verbose);
	soak_print_report(&s, stdout);
	void *fake;
	size_t (*live)(void) = fake_live(&o, &fake);
	if (!live && vendor_of(o.device) && !o.real)
		soak_fail(&s, "cannot find the fake runtime's fake_%s_live", o.device);
	for (int c = 0; c < SOAK_CONTEXTS; c++)
		devcache_close(s.ctx[c]);
	if (live && live() != 0)
		soak_fail(&s, "the fake runtime has %zu objects live after the contexts closed",
			  live());
	if (fake)
		dlclose(fake);
	soak_models_remove(&ms);
	fclose(s.devnull);
	free(w);
	if (s.failed) {
		printf("invariants: FAILED\n");
		fprintf(stderr, "soak: %s: FAILED: %s\n", o.device, s.failure);
		return 2;
	}
	printf("invariants: ok\n");
	return 0;
}
