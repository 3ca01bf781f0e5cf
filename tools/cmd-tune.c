/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cmd-tune.c - `devcache tune`: which PyTorch allocator settings avoid a trace's out-of-memory errors on the device it came from, and at what cost.
 *
 * The trace is read once for its sizes, then replayed under a grid of
 * settings (tune_grid()), each in a worker process of its own: once on the
 * emulated device, where it counts the OOMs, the peaks, the fragmentation
 * and the driver calls, once without a limit, then a binary search between
 * the peak allocated and the peak reserved of that run for the smallest
 * device that runs the whole trace with no OOM.  Every PyTorch setting is
 * replayed with PyTorch's semantics (no stitching of expandable segments);
 * libdevcache's own better mode is a row of its own, never recommended.
 */
#include "tool.h"

#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "replay-run.h"

#define MiB ((uint64_t)1 << 20)
/* The smallest device the search tells apart: the driver's granule. */
#define SEARCH_STEP (2 * MiB)
/* A replay "with no limit" has a device this many times the one tuned
 * for: more than a trace that fits anywhere near it takes, and not so much
 * that expandable segments, which reserve address space for the whole
 * device, run out of it. */
#define UNLIMITED_FACTOR 16
/* Settings at most: the grid's and --try's. */
#define MAX_SETTINGS 64
/* PyTorch's max_split_size_mb takes more than 20 MiB. */
#define MIN_SPLIT_MB 21

enum row_kind { ROW_PYTORCH, ROW_LIBDEVCACHE };

/* What a worker sends back for one setting. */
struct result {
	int status;                      /* EXIT_OK, or the failed run's exit status */
	uint64_t ooms, recorded_failed;  /* on the device tuned for */
	int64_t peak_reserved, peak_allocated;
	double fragmentation;            /* when the cache held the most unused memory */
	uint64_t retries, device_calls;
	uint64_t min_memory;             /* 0: none found */
	uint64_t replays;
};

struct setting {
	char options[256];  /* as -o takes them, after the base options */
	char conf[256];     /* the PYTORCH_CUDA_ALLOC_CONF string; "" for the defaults */
	const char *also;   /* what PyTorch needs beyond the string, or NULL */
	enum row_kind kind;
	bool user;          /* --try */
	struct result r;
	/* the worker */
	pid_t pid;
	int fd;
	size_t got;
	bool done;
};

struct tune {
	const char *path;
	const char *device;
	const char *base;         /* -o, for every setting */
	uint64_t memory;          /* the device tuned for; 0: this machine's memory */
	const char *memory_from;
	uint64_t host_total;      /* the device's memory where nothing else says it */
	bool on_host;
	bool json, grid;
	int jobs;
	int verbose;
	struct setting settings[MAX_SETTINGS];
	size_t n;
	const char *tries[MAX_SETTINGS / 2]; /* --try */
	size_t n_tries;
	/* the trace, read once */
	size_t events, recorded_ooms;
	struct {
		size_t event;   /* its number in the file, from 1, as replay counts */
		uint64_t size;
	} recorded[8];      /* the first recorded OOMs */
	uint32_t most_live; /* the pointer table a replay needs */
	uint64_t largest;
	uint64_t *large;          /* sizes of 20 MiB and more, a sample */
	size_t n_large, cap_large;
	uint64_t seen_large;
};

static void help(void)
{
	printf(_("Usage: devcache tune [--memory SIZE] [--try OPTIONS]... [--json] TRACE\n"));
	fputs(_("Replay an allocation trace (devcache-trace(5), as trace_from_torch writes\n"
		"it from a PyTorch memory snapshot) under a grid of PyTorch's allocator\n"
		"settings, and say which avoids its out-of-memory errors on the device it\n"
		"came from, and at what cost: the PYTORCH_CUDA_ALLOC_CONF string to use.\n"
		"Exit status 3: no PyTorch setting avoids them.\n"),
	      stdout);
	fputs("\n", stdout);
	fputs(_("  -m, --memory=SIZE            the device's memory (24G, 80GiB); default: what\n"
		"                               the trace says, else this machine's\n"
		"  -d, --device=D               replay on device D (default: host)\n"
		"  -t, --try=OPTIONS            a setting of your own, as -o takes it\n"
		"                               (repeatable)\n"
		"      --no-grid                only the --try settings and yours\n"
		"  -J, --jobs=N                 replays at once (default: the CPUs)\n"
		"  -j, --json                   print the results as one JSON object\n"),
	      stdout);
	tool_print_common_options();
}

/* ---- the grid ---------------------------------------------------------------------- */

static struct setting *add(struct tune *tn, enum row_kind kind, const char *options,
			   const char *conf, const char *also)
{
	if (tn->n == MAX_SETTINGS)
		return NULL;
	struct setting *s = &tn->settings[tn->n++];

	memset(s, 0, sizeof *s);
	snprintf(s->options, sizeof s->options, "%s", options);
	snprintf(s->conf, sizeof s->conf, "%s", conf);
	s->also = also;
	s->kind = kind;
	s->fd = -1;
	return s;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* max_split_size_mb values from the trace's own sizes: its large requests'
 * median, 90th and 99th percentiles, in MiB, each above PyTorch's 20. */
static size_t split_values(struct tune *tn, unsigned *out, size_t max)
{
	size_t k = 0;

	if (!tn->n_large)
		return 0;
	qsort(tn->large, tn->n_large, sizeof *tn->large, cmp_u64);
	static const double at[] = {0.5, 0.9, 0.99};
	for (size_t i = 0; i < sizeof at / sizeof *at && k < max; i++) {
		uint64_t size = tn->large[(size_t)(at[i] * (double)(tn->n_large - 1))];
		unsigned mb = (unsigned)(size / MiB) > MIN_SPLIT_MB ? (unsigned)(size / MiB) : MIN_SPLIT_MB;
		bool seen = false;

		for (size_t j = 0; j < k; j++)
			seen |= out[j] == mb;
		if (!seen)
			out[k++] = mb;
	}
	return k;
}

/* The grid, documented in devcache(1): the defaults (the base options
 * alone), each of PyTorch's settings alone, a few combinations, then
 * libdevcache's own expandable segments. */
static void tune_grid(struct tune *tn)
{
	static const char gc[] = "garbage_collection_threshold:0.8,memory_fraction:1";
	static const char frac[] = "with torch.cuda.set_per_process_memory_fraction(1.0)";
	unsigned split[3];
	size_t n_split = split_values(tn, split, 3);
	char o[256], c[256];

	add(tn, ROW_PYTORCH, "", "", NULL);
	if (!tn->grid)
		return;
	add(tn, ROW_PYTORCH, "expandable_segments:true", "expandable_segments:True", NULL);
	for (size_t i = 0; i < n_split; i++) {
		snprintf(o, sizeof o, "max_split_size_mb:%u", split[i]);
		add(tn, ROW_PYTORCH, o, o, NULL);
	}
	static const char *const div[] = {"4", "8", "16", "[256:1,512:2,1024:4,>:8]"};
	for (size_t i = 0; i < sizeof div / sizeof *div; i++) {
		snprintf(o, sizeof o, "roundup_power2_divisions:%s", div[i]);
		add(tn, ROW_PYTORCH, o, o, NULL);
	}
	add(tn, ROW_PYTORCH, "garbage_collection_threshold:0.6,memory_fraction:1",
	    "garbage_collection_threshold:0.6", frac);
	add(tn, ROW_PYTORCH, gc, "garbage_collection_threshold:0.8", frac);
	add(tn, ROW_PYTORCH, "expandable_segments:true,roundup_power2_divisions:4",
	    "expandable_segments:True,roundup_power2_divisions:4", NULL);
	for (size_t i = 0; i < n_split; i++) {
		snprintf(o, sizeof o, "max_split_size_mb:%u,%s", split[i], gc);
		snprintf(c, sizeof c, "max_split_size_mb:%u,garbage_collection_threshold:0.8",
			 split[i]);
		add(tn, ROW_PYTORCH, o, c, frac);
	}
	if (n_split) {
		snprintf(o, sizeof o, "max_split_size_mb:%u,roundup_power2_divisions:4", split[0]);
		add(tn, ROW_PYTORCH, o, o, NULL);
	}
	add(tn, ROW_LIBDEVCACHE, "expandable_segments:true,expandable_stitching:true", "", NULL);
}

/* The keys a --try may give that PyTorch has; anything else makes the row
 * libdevcache's own. */
static enum row_kind kind_of(const char *options)
{
	static const char *const torch_keys[] = {
		"max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold",
		"expandable_segments", "memory_fraction", "max_non_split_rounding_mb",
	};
	const char *p = options;

	while (*p) {
		size_t len = strcspn(p, ":="), item = strcspn(p, ",");
		bool known = false;

		for (size_t i = 0; i < sizeof torch_keys / sizeof *torch_keys; i++)
			known |= strlen(torch_keys[i]) == len && strncmp(p, torch_keys[i], len) == 0;
		if (!known)
			return ROW_LIBDEVCACHE;
		/* a list's commas are inside brackets */
		const char *br = memchr(p, '[', item);
		if (br && (br = strchr(br, ']')))
			item = (size_t)(br - p) + strcspn(br, ",");
		p += item + (p[item] == ',');
	}
	return ROW_PYTORCH;
}

/* ---- replaying ---------------------------------------------------------------------- */

/* One replay of the trace under s at a device of memory bytes (0: the
 * device's own), into r; sampling the fragmentation where asked. */
static int replay_once(const struct tune *tn, const struct setting *s, uint64_t memory, bool sample,
		       struct result *r)
{
	struct replay_run rr;
	struct tool t = {.verbose = tn->verbose};
	devcache_ctx_t *ctx = NULL;
	char cap[64] = "";
	devcache_stats_t st;
	int status;

	/* "No limit": UNLIMITED_FACTOR times the device, committed only as
	 * written; off the host, the device's own. */
	if (memory == UINT64_MAX && tn->on_host)
		snprintf(cap, sizeof cap, "host_memory:%llu",
			 (unsigned long long)(tn->memory * UNLIMITED_FACTOR));
	else if (memory == UINT64_MAX)
		cap[0] = '\0';
	else if (memory && tn->on_host)
		snprintf(cap, sizeof cap, "host_memory:%llu", (unsigned long long)memory);
	else if (memory)
		snprintf(cap, sizeof cap, "memory_fraction:%.9f",
			 (double)memory / (double)tn->host_total);
	/* PyTorch's semantics for PyTorch's settings: no stitching.  The
	 * library's messages only with -v: a warning would come once a replay. */
	if (asprintf(&t.options, "%s%s%s%s%s%s%s", tn->base ? tn->base : "", tn->base ? "," : "",
		     s->kind == ROW_PYTORCH ? "expandable_stitching:false," : "", s->options,
		     *s->options ? "," : "", cap, tn->verbose ? "" : ",log_level:error") < 0) {
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	replay_run_init(&rr);
	rr.sample_every = sample ? 1024 : 0;
	if ((status = tool_open(&t, &ctx)) || (status = tool_device(ctx, tn->device, &rr.dev)))
		goto out;
	int rc = trace_set_open(&rr.set, tn->path, rr.err, sizeof rr.err);
	if (rc) {
		status = replay_trace_failed(&rr, rc);
		goto out;
	}
	if ((status = replay_run_file(&rr, false)))
		goto out;
	if (devcache_stats(rr.dev, &st)) {
		tool_error(_("cannot read the statistics: %s"), devcache_last_error());
		status = EXIT_RUNTIME;
		goto out;
	}
	r->ooms = rr.ooms;
	r->recorded_failed = rr.recorded_failed;
	r->peak_reserved = st.reserved_bytes[DEVCACHE_POOL_ALL].peak;
	r->peak_allocated = st.allocated_bytes[DEVCACHE_POOL_ALL].peak;
	r->fragmentation = rr.worst_unused >= 0 ? rr.worst_fragmentation : 0;
	r->retries = st.num_alloc_retries;
	r->device_calls = st.num_device_alloc + st.num_device_free;
out:
	replay_run_destroy(&rr);
	if (ctx)
		devcache_close(ctx);
	free(t.options);
	return status;
}

static uint64_t round_up(uint64_t n, uint64_t step)
{
	return n > UINT64_MAX - step ? n : (n + step - 1) / step * step;
}

/* One replay of run_setting's, counted in r and told to the parent with a
 * byte on progress: 0, the replay's exit status where it failed (said
 * already), or -1 where the parent is gone. */
static int replay_step(const struct tune *tn, const struct setting *s, uint64_t memory,
		       bool sample, struct result *out, struct result *r, int progress)
{
	static const char tick = 'p';
	int status = replay_once(tn, s, memory, sample, out);

	r->replays++;
	if (status)
		return status;
	return write(progress, &tick, 1) == 1 ? 0 : -1;
}

/* The setting's figures on the device tuned for, and the smallest device
 * that runs the trace with no OOM: a binary search, SEARCH_STEP apart,
 * between the peak allocated and the peak reserved of a run with no limit
 * (one replay for each halving of that range). */
static void run_setting(const struct tune *tn, const struct setting *s, struct result *r, int progress)
{
	struct result free_run = {0}, probe;
	int status;

	memset(r, 0, sizeof *r);
	/* The device tuned for, then no limit: a failure there is the setting's. */
	if ((status = replay_step(tn, s, tn->memory, true, r, r, progress)) != 0) {
		r->status = status > 0 ? status : EXIT_OK;
		return;
	}
	if (!tn->memory)
		free_run = *r;
	else if ((status = replay_step(tn, s, UINT64_MAX, false, &free_run, r, progress)) != 0) {
		r->status = status > 0 ? status : EXIT_OK;
		return;
	}
	if (free_run.ooms)
		return; /* even with no limit: no device runs it */
	uint64_t lo = (uint64_t)free_run.peak_allocated / SEARCH_STEP * SEARCH_STEP;
	uint64_t hi = round_up((uint64_t)free_run.peak_reserved, SEARCH_STEP);
	/* The device tuned for ran it already: no need to try that size again. */
	bool runs = false;

	if (lo < SEARCH_STEP)
		lo = SEARCH_STEP;
	if (tn->memory && r->ooms == 0 && tn->memory < hi) {
		hi = round_up(tn->memory, SEARCH_STEP);
		runs = hi == tn->memory;
	}
	/* The peak reserved with no limit runs it, nearly always; where a
	 * limit changes the policy's path, a little more is tried. */
	for (int k = 0; !runs; k++) {
		if (k == 4 || replay_step(tn, s, hi, false, &probe, r, progress) != 0)
			return;
		runs = probe.ooms == 0;
		if (!runs) {
			lo = hi;
			hi = round_up(hi + hi / 8, SEARCH_STEP);
		}
	}
	while (hi - lo > SEARCH_STEP) {
		uint64_t mid = lo + (hi - lo) / 2 / SEARCH_STEP * SEARCH_STEP;

		if (replay_step(tn, s, mid, false, &probe, r, progress) != 0)
			return;
		if (probe.ooms == 0)
			hi = mid;
		else
			lo = mid;
	}
	r->min_memory = hi;
}

/* ---- the workers -------------------------------------------------------------------- */

static int start(struct tune *tn, struct setting *s)
{
	int fds[2];

	if (pipe(fds) != 0) {
		tool_error(_("cannot create a pipe: %s"), strerror(errno));
		return EXIT_RUNTIME;
	}
	fflush(stdout);
	fflush(stderr);
	s->pid = fork();
	if (s->pid < 0) {
		tool_error(_("cannot start a worker: %s"), strerror(errno));
		close(fds[0]);
		close(fds[1]);
		return EXIT_RUNTIME;
	}
	if (s->pid == 0) {
		struct result r;
		char tag = 'r';

		close(fds[0]);
		run_setting(tn, s, &r, fds[1]);
		if (write(fds[1], &tag, 1) != 1 || write(fds[1], &r, sizeof r) != (ssize_t)sizeof r)
			_exit(EXIT_RUNTIME);
		_exit(EXIT_OK);
	}
	close(fds[1]);
	s->fd = fds[0];
	return EXIT_OK;
}

struct bar {
	bool on;
	struct timespec t0;
	size_t replays;
};

static double elapsed(const struct bar *b)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - b->t0.tv_sec) + (double)(now.tv_nsec - b->t0.tv_nsec) / 1e9;
}

static void draw(struct bar *b, size_t done, size_t total)
{
	if (!b->on)
		return;
	double t = elapsed(b);
	double rate = t > 0 ? (double)b->replays / t : 0;
	double left = done ? t / (double)done * (double)(total - done) : 0;

	/* TRANSLATORS: settings done / all, replays per second, seconds left. */
	fprintf(stderr, _("\rtune: %zu/%zu settings, %.1f replays/s, %.0f s left   "), done, total,
		rate, left);
	fflush(stderr);
}

/* A worker's bytes: 'p' for each replay done, then 'r' and its result. */
static void drain(struct setting *s, struct bar *b)
{
	unsigned char buf[sizeof s->r + 64];
	ssize_t n = read(s->fd, buf, sizeof buf);

	if (n <= 0) {
		close(s->fd);
		s->fd = -1;
		return;
	}
	for (ssize_t i = 0; i < n; i++) {
		if (s->got) {
			if (s->got - 1 < sizeof s->r)
				((unsigned char *)&s->r)[s->got - 1] = buf[i];
			s->got++;
		} else if (buf[i] == 'r') {
			s->got = 1;
		} else {
			b->replays++;
		}
	}
}

static int run_all(struct tune *tn)
{
	struct bar b = {.on = !tn->json && isatty(STDERR_FILENO)};
	size_t next = 0, done = 0, running = 0;
	int status = EXIT_OK;

	clock_gettime(CLOCK_MONOTONIC, &b.t0);
	draw(&b, 0, tn->n);
	while (done < tn->n) {
		while (running < (size_t)tn->jobs && next < tn->n && status == EXIT_OK) {
			if ((status = start(tn, &tn->settings[next])))
				break;
			next++, running++;
		}
		if (!running)
			break;
		struct pollfd pfd[MAX_SETTINGS];
		struct setting *who[MAX_SETTINGS];
		nfds_t k = 0;

		for (size_t i = 0; i < tn->n; i++)
			if (tn->settings[i].fd >= 0) {
				pfd[k] = (struct pollfd){.fd = tn->settings[i].fd, .events = POLLIN};
				who[k++] = &tn->settings[i];
			}
		if (poll(pfd, k, 1000) < 0 && errno != EINTR) {
			tool_error(_("poll: %s"), strerror(errno));
			status = EXIT_RUNTIME;
			break;
		}
		for (nfds_t i = 0; i < k; i++) {
			struct setting *s = who[i];
			int ws;

			if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			drain(s, &b);
			if (s->fd >= 0)
				continue;
			waitpid(s->pid, &ws, 0);
			running--, done++;
			s->done = true;
			if (s->got != 1 + sizeof s->r) {
				s->r.status = EXIT_RUNTIME;
				tool_error(_("the worker for '%s' stopped (%s %d)"),
					   *s->options ? s->options : "defaults",
					   WIFSIGNALED(ws) ? "signal" : "exit status",
					   WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws));
			}
			if (s->r.status && status == EXIT_OK)
				status = s->r.status;
		}
		draw(&b, done, tn->n);
	}
	if (status != EXIT_OK)
		for (size_t i = 0; i < tn->n; i++)
			if (tn->settings[i].fd >= 0) {
				kill(tn->settings[i].pid, SIGTERM);
				close(tn->settings[i].fd);
				waitpid(tn->settings[i].pid, NULL, 0);
			}
	if (b.on)
		fputs("\r\033[K", stderr);
	return status;
}

/* ---- the trace, once ---------------------------------------------------------------- */

static int read_trace(struct tune *tn)
{
	struct trace_set set;
	char err[1024];
	int rc;

	trace_set_init(&set);
	rc = trace_set_open(&set, tn->path, err, sizeof err);
	while (!rc && !(rc = trace_set_next(&set, err, sizeof err)) && set.n_events)
		for (size_t i = 0; i < set.n_events; i++) {
			const struct trace_event *ev = &set.events[i];

			if (ev->op != TRACE_OP_ALLOC)
				continue;
			if (ev->recorded_oom && tn->recorded_ooms < 8) {
				tn->recorded[tn->recorded_ooms].event = set.first + i + 1;
				tn->recorded[tn->recorded_ooms].size = ev->size;
			}
			tn->recorded_ooms += ev->recorded_oom;
			tn->largest = ev->size > tn->largest ? ev->size : tn->largest;
			if (ev->size < 20 * MiB)
				continue;
			/* Every one up to 64 Ki of them; then one in so many. */
			tn->seen_large++;
			if (tn->n_large == tn->cap_large && tn->cap_large < 65536) {
				size_t cap = tn->cap_large ? tn->cap_large * 2 : 1024;
				uint64_t *grown = realloc(tn->large, cap * sizeof *grown);

				if (!grown) {
					trace_set_destroy(&set);
					tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
					return EXIT_RUNTIME;
				}
				tn->large = grown;
				tn->cap_large = cap;
			}
			if (tn->n_large < tn->cap_large)
				tn->large[tn->n_large++] = ev->size;
			else
				tn->large[tn->seen_large % tn->n_large] = ev->size;
		}
	tn->events = set.n_read;
	tn->most_live = set.n_slots;
	if (!tn->memory && set.device_memory) {
		tn->memory = set.device_memory;
		tn->memory_from = _("the trace's device_memory");
	}
	trace_set_destroy(&set);
	if (rc) {
		tool_error("%s", err);
		return rc == DEVCACHE_EFORMAT || rc == DEVCACHE_ENOENT ? EXIT_USAGE : EXIT_RUNTIME;
	}
	return EXIT_OK;
}

/* ---- the answer ------------------------------------------------------------------- */

/* The recommended setting: of PyTorch's, one with no OOM on the device
 * tuned for, the defaults where they have none, else the one that needs
 * the smallest device; NULL where none avoids them. */
static const struct setting *recommend(const struct tune *tn)
{
	const struct setting *best = NULL;

	if (tn->settings[0].r.status == EXIT_OK && tn->settings[0].r.ooms == 0)
		return &tn->settings[0];
	for (size_t i = 0; i < tn->n; i++) {
		const struct setting *s = &tn->settings[i];

		if (s->kind != ROW_PYTORCH || s->r.status != EXIT_OK || s->r.ooms)
			continue;
		if (!best || (s->r.min_memory && (!best->r.min_memory ||
						  s->r.min_memory < best->r.min_memory ||
						  (s->r.min_memory == best->r.min_memory &&
						   s->r.device_calls < best->r.device_calls))))
			best = s;
	}
	return best;
}

/* Rows in the order printed: the recommended one, PyTorch's by OOMs then
 * the smallest device, then libdevcache's own. */
static const struct tune *sorting;
static int cmp_rows(const void *a, const void *b)
{
	const struct setting *x = &sorting->settings[*(const size_t *)a];
	const struct setting *y = &sorting->settings[*(const size_t *)b];
	uint64_t mx = x->r.min_memory ? x->r.min_memory : UINT64_MAX;
	uint64_t my = y->r.min_memory ? y->r.min_memory : UINT64_MAX;

	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	if ((x->r.status != 0) != (y->r.status != 0))
		return x->r.status ? 1 : -1;
	if (x->r.ooms != y->r.ooms)
		return x->r.ooms < y->r.ooms ? -1 : 1;
	if (mx != my)
		return mx < my ? -1 : 1;
	return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

static const char *conf_of(const struct setting *s)
{
	return s->kind != ROW_PYTORCH ? s->options : *s->conf ? s->conf : _("(the defaults)");
}

static void sizes(uint64_t n, char *buf, size_t size)
{
	if (n)
		format_bytes(n, buf, size);
	else
		snprintf(buf, size, "-");
}

/* The sentence of why. */
static void why(const struct tune *tn, const struct setting *rec, char *buf, size_t size)
{
	const struct result *base = &tn->settings[0].r;
	char a[32], b[32], what[96];

	sizes(rec->r.min_memory, a, sizeof a);
	sizes(base->min_memory, b, sizeof b);
	if (rec == &tn->settings[0]) {
		snprintf(buf, size,
			 _("no OOM with these settings; the smallest device that runs the trace "
			   "is %s"),
			 a);
		return;
	}
	if (base->ooms == 1)
		snprintf(what, sizeof what, _("avoids the OOM"));
	else
		snprintf(what, sizeof what, _("avoids all %llu OOMs"), (unsigned long long)base->ooms);
	if (base->min_memory && rec->r.min_memory)
		/* TRANSLATORS: "avoids all 3 OOMs; needs 21.4 GiB instead of 26.0 GiB". */
		snprintf(buf, size, _("%s; needs %s instead of %s"), what, a, b);
	else
		snprintf(buf, size, "%s", what);
}

static void print_text(const struct tune *tn, const size_t *order, const struct setting *rec)
{
	char dev[32], a[32], b[32], c[32];

	format_bytes(tn->memory ? tn->memory : tn->host_total, dev, sizeof dev);
	printf(_("Tuning for a device of %s (%s).\n"), dev, tn->memory_from);
	printf(P_("%zu event, ", "%zu events, ", tn->events), tn->events);
	printf(P_("%zu setting.\n", "%zu settings.\n", tn->n), tn->n);
	if (tn->recorded_ooms) {
		printf(P_("The trace recorded %zu OOM; a setting avoids it where 'recorded' is 0.\n",
			  "The trace recorded %zu OOMs; a setting avoids them where 'recorded' is 0.\n",
			  tn->recorded_ooms),
		       tn->recorded_ooms);
		/* Which: the allocations that failed in the traced run. */
		for (size_t i = 0; i < tn->recorded_ooms && i < 8; i++) {
			format_bytes(tn->recorded[i].size, a, sizeof a);
			printf(_("  event %zu: %s\n"), tn->recorded[i].event, a);
		}
		if (tn->recorded_ooms > 8)
			printf(_("  and %zu more\n"), tn->recorded_ooms - 8);
	}
	putchar('\n');
	if (rec) {
		char reason[256];

		why(tn, rec, reason, sizeof reason);
		if (*rec->conf)
			printf(_("Recommended: PYTORCH_CUDA_ALLOC_CONF=%s\n"), tool_shown(rec->conf));
		else
			printf(_("Recommended: the settings you gave (no PyTorch option to add)\n"));
		if (rec->also)
			printf("  %s\n", rec->also);
		printf("  %s.\n\n", reason);
	} else {
		const struct setting *least = NULL;

		for (size_t i = 0; i < tn->n; i++) {
			const struct setting *s = &tn->settings[i];

			if (s->kind == ROW_PYTORCH && s->r.min_memory &&
			    (!least || s->r.min_memory < least->r.min_memory))
				least = s;
		}
		printf(_("No PyTorch setting avoids the OOMs on a device of %s.\n"), dev);
		if (least) {
			sizes(least->r.min_memory, a, sizeof a);
			printf(_("The smallest device that runs the trace is %s, with %s.\n"), a,
			       conf_of(least));
		}
		putchar('\n');
	}
	/* TRANSLATORS: the table's heading; the columns are 5, 9, 10, 10, 10, 6, 7
	   and 7 characters wide, right-aligned, after a 3-character number. */
	printf("%-3s%5s %9s %10s %10s %10s %6s %7s %7s\n", "#", _("OOMs"), _("recorded"),
	       _("reserved"), _("allocated"), _("smallest"), _("frag."), _("retries"), _("calls"));
	for (size_t k = 0; k < tn->n; k++) {
		const struct setting *s = &tn->settings[order[k]];
		char rec_col[24];

		if (s->r.status) {
			printf("%-3zu %s\n     %s\n", k + 1, _("failed (see above)"), conf_of(s));
			continue;
		}
		format_bytes((uint64_t)s->r.peak_reserved, a, sizeof a);
		format_bytes((uint64_t)s->r.peak_allocated, b, sizeof b);
		sizes(s->r.min_memory, c, sizeof c);
		if (tn->recorded_ooms)
			snprintf(rec_col, sizeof rec_col, "%llu/%zu",
				 (unsigned long long)s->r.recorded_failed, tn->recorded_ooms);
		else
			snprintf(rec_col, sizeof rec_col, "-");
		printf("%-3zu%5llu %9s %10s %10s %10s %5.1f%% %7llu %7llu\n", k + 1,
		       (unsigned long long)s->r.ooms, rec_col, a, b, c, s->r.fragmentation * 100,
		       (unsigned long long)s->r.retries, (unsigned long long)s->r.device_calls);
		printf("   %s%s\n", tool_shown(conf_of(s)),
		       s->kind == ROW_LIBDEVCACHE ? _("  (libdevcache only, not PyTorch)") : "");
	}
}

static struct json_object *json_u64(uint64_t n)
{
	return json_object_new_uint64(n);
}

static int print_json(const struct tune *tn, const size_t *order, const struct setting *rec)
{
	struct json_object *o = json_object_new_object(), *rows = json_object_new_array();
	char reason[256] = "";

	if (!o || !rows) {
		json_object_put(o);
		json_object_put(rows);
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	json_object_object_add(o, "device_memory", json_u64(tn->memory ? tn->memory : tn->host_total));
	json_object_object_add(o, "device_memory_from", json_object_new_string(tn->memory_from));
	json_object_object_add(o, "events", json_u64(tn->events));
	json_object_object_add(o, "recorded_ooms", json_u64(tn->recorded_ooms));
	struct json_object *ev = json_object_new_array();
	for (size_t i = 0; ev && i < tn->recorded_ooms && i < 8; i++) {
		struct json_object *e = json_object_new_object();

		if (!e)
			continue;
		json_object_object_add(e, "event", json_u64(tn->recorded[i].event));
		json_object_object_add(e, "size", json_u64(tn->recorded[i].size));
		json_object_array_add(ev, e);
	}
	json_object_object_add(o, "recorded_oom_events", ev);
	for (size_t k = 0; k < tn->n; k++) {
		const struct setting *s = &tn->settings[order[k]];
		struct json_object *r = json_object_new_object();

		if (!r)
			continue;
		json_object_object_add(r, "options", json_object_new_string(s->options));
		json_object_object_add(r, "pytorch", json_object_new_boolean(s->kind == ROW_PYTORCH));
		json_object_object_add(r, "pytorch_cuda_alloc_conf",
				       s->kind == ROW_PYTORCH ? json_object_new_string(s->conf) : NULL);
		json_object_object_add(r, "also", s->also ? json_object_new_string(s->also) : NULL);
		json_object_object_add(r, "ok", json_object_new_boolean(s->r.status == 0));
		json_object_object_add(r, "ooms", json_u64(s->r.ooms));
		json_object_object_add(r, "recorded_ooms_failed", json_u64(s->r.recorded_failed));
		json_object_object_add(r, "peak_reserved_bytes", json_object_new_int64(s->r.peak_reserved));
		json_object_object_add(r, "peak_allocated_bytes",
				       json_object_new_int64(s->r.peak_allocated));
		json_object_object_add(r, "smallest_device_bytes",
				       s->r.min_memory ? json_u64(s->r.min_memory) : NULL);
		json_object_object_add(r, "fragmentation", json_object_new_double(s->r.fragmentation));
		json_object_object_add(r, "retries", json_u64(s->r.retries));
		json_object_object_add(r, "device_calls", json_u64(s->r.device_calls));
		json_object_object_add(r, "replays", json_u64(s->r.replays));
		json_object_array_add(rows, r);
	}
	json_object_object_add(o, "settings", rows);
	if (rec) {
		why(tn, rec, reason, sizeof reason);
		json_object_object_add(o, "recommended", json_object_new_string(rec->conf));
		json_object_object_add(o, "why", json_object_new_string(reason));
	} else {
		json_object_object_add(o, "recommended", NULL);
	}
	puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
					       JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
	return EXIT_OK;
}

/* ---- the command -------------------------------------------------------------------- */

static int parse_args(struct tool *t, struct tune *tn, int argc, char **argv)
{
	enum { OPT_NO_GRID = 256 };
	static const struct option longopts[] = {
		{"memory", required_argument, NULL, 'm'},
		{"device", required_argument, NULL, 'd'},
		{"try", required_argument, NULL, 't'},
		{"no-grid", no_argument, NULL, OPT_NO_GRID},
		{"jobs", required_argument, NULL, 'J'},
		{"json", no_argument, NULL, 'j'},
		TOOL_LONGOPTS,
		{NULL, 0, NULL, 0},
	};
	int c, status;
	char *end;

	while ((c = getopt_long(argc, argv, "m:d:t:J:j" TOOL_SHORTOPTS, longopts, NULL)) != -1) {
		switch (c) {
		case 'm':
			if (!tool_parse_size(optarg, &tn->memory) || tn->memory < MiB) {
				tool_error(_("--memory: '%s' is not a size of 1M or more (24G, "
					     "80GiB)"),
					   tool_shown(optarg));
				return tool_try_help();
			}
			tn->memory_from = "--memory";
			break;
		case 'd':
			tn->device = optarg;
			break;
		case 't':
			if (tn->n_tries == MAX_SETTINGS / 2 || !*optarg || strlen(optarg) >= 200) {
				tool_error(_("--try: at most %d settings, each of 1 to 199 bytes"),
					   MAX_SETTINGS / 2);
				return tool_try_help();
			}
			tn->tries[tn->n_tries++] = optarg;
			break;
		case OPT_NO_GRID:
			tn->grid = false;
			break;
		case 'J':
			errno = 0;
			long j = strtol(optarg, &end, 10);
			if (errno || *end || end == optarg || j < 1 || j > 256) {
				tool_error(_("--jobs: '%s' is not a number from 1 to 256"),
					   tool_shown(optarg));
				return tool_try_help();
			}
			tn->jobs = (int)j;
			break;
		case 'j':
			tn->json = true;
			break;
		case 'h':
			help();
			return EXIT_OK;
		default:
			if ((status = tool_common_option(t, c, optarg)) >= 0)
				return status;
		}
	}
	if (optind >= argc) {
		tool_error(_("no trace file given"));
		return tool_try_help();
	}
	if (optind + 1 < argc) {
		tool_error(_("one trace at a time: '%s' is one too many"), tool_shown(argv[optind + 1]));
		return tool_try_help();
	}
	if (tool_option_given(t, "host_memory")) {
		tool_error(_("-o host_memory: the device's memory is --memory here"));
		return tool_try_help();
	}
	tn->path = argv[optind];
	tn->base = t->options;
	tn->verbose = t->verbose;
	return -1;
}

int cmd_tune(struct tool *t, int argc, char **argv)
{
	struct tune *tn = calloc(1, sizeof *tn);
	devcache_ctx_t *ctx = NULL;
	devcache_device_t *dev;
	devcache_device_info_t info;
	int status;

	if (!tn) {
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	tn->device = "host";
	tn->grid = true;
	if ((status = parse_args(t, tn, argc, argv)) >= 0)
		goto out;
	tn->on_host = strcmp(tn->device, "host") == 0 || strcmp(tn->device, "host:0") == 0;
	if (tn->memory && !tn->on_host) {
		tool_error(_("--memory emulates a device on the host: it cannot be used with "
			     "--device %s"),
			   tool_shown(tn->device));
		status = tool_try_help();
		goto out;
	}
	if ((status = read_trace(tn)))
		goto out;
	/* The device's own memory: what the search caps with memory_fraction
	 * off the host, and what is tuned for where the trace says nothing. */
	struct tool probe = {.options = t->options, .verbose = t->verbose};
	if ((status = tool_open(&probe, &ctx)) || (status = tool_device(ctx, tn->device, &dev)))
		goto out;
	if (devcache_device_info(dev, &info) != 0) {
		tool_error(_("%s: cannot read its memory: %s"), tool_shown(tn->device),
			   devcache_last_error());
		status = EXIT_RUNTIME;
		goto out;
	}
	devcache_close(ctx);
	ctx = NULL;
	tn->host_total = info.total_memory;
	if (!tn->on_host && tn->memory && tn->memory > info.total_memory)
		tn->memory = info.total_memory;
	if (!tn->memory_from) {
		/* As host_memory, so that the "no limit" runs are larger. */
		if (tn->on_host)
			tn->memory = info.total_memory;
		tn->memory_from = tn->on_host ? _("this machine's memory") : _("the device's memory");
		if (tn->on_host && !tn->json)
			tool_error(_("%s says nothing of its device's memory: tuning for this "
				     "machine's; give the GPU's with --memory"),
				   tool_shown(tn->path));
	}
	tune_grid(tn);
	for (size_t i = 0; i < tn->n_tries; i++) {
		const char *o = tn->tries[i];
		struct setting *s = add(tn, kind_of(o), o, kind_of(o) == ROW_PYTORCH ? o : "", NULL);
		if (s)
			s->user = true;
	}
	if (!tn->jobs) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		tn->jobs = cpus > 0 ? (int)cpus : 1;
		/* Bounded by memory: a worker holds its pointer table, the
		 * reader's table of live blocks (about 200 bytes a block) and
		 * the allocator's; the device itself is never written. */
		uint64_t worker = 32 * MiB + (uint64_t)tn->most_live * 512;
		uint64_t avail = tool_proc_kb("/proc/meminfo", "MemAvailable");
		if (avail && (uint64_t)tn->jobs * worker > avail)
			tn->jobs = avail / worker > 0 ? (int)(avail / worker) : 1;
	}
	/* The children open contexts of their own: say once, not each time,
	 * that PyTorch's variable is not read. */
	unsetenv("PYTORCH_CUDA_ALLOC_CONF");
	if ((status = run_all(tn)))
		goto out;

	size_t order[MAX_SETTINGS];
	for (size_t i = 0; i < tn->n; i++)
		order[i] = i;
	const struct setting *rec = recommend(tn);
	sorting = tn;
	qsort(order, tn->n, sizeof *order, cmp_rows);
	/* The recommended row first. */
	for (size_t i = 0; rec && i < tn->n; i++)
		if (&tn->settings[order[i]] == rec) {
			memmove(order + 1, order, i * sizeof *order);
			order[0] = (size_t)(rec - tn->settings);
			break;
		}
	if (tn->json)
		status = print_json(tn, order, rec);
	else
		print_text(tn, order, rec);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		tool_error(_("write error on standard output"));
		status = EXIT_RUNTIME;
	}
	if (status == EXIT_OK && !rec)
		status = EXIT_OOM;
out:
	if (ctx)
		devcache_close(ctx);
	free(tn->large);
	free(tn);
	return status;
}
