/* cmd-load.c - `devcache load`: loads model files through the model cache and reports time, throughput, hits and memory. */
#include "tool.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A terminal redrawn more often than this only flickers. */
#define PROGRESS_INTERVAL_NS 100000000ll
#define BAR_WIDTH 30

struct load_opts {
	const char *device;
	unsigned long repeat;
	bool writable;
};

struct progress {
	const char *label;
	int64_t last_ns; /* the last redraw, or the start of the load */
	bool shown;
};

static void help(void)
{
	printf(_("Usage: devcache load [--device D] [--repeat N] [--writable] FILE...\n"));
	fputs(_("Load safetensors or GGUF files through the model cache, as a program\n"
		"serving them would, and print for each load the time, the throughput\n"
		"and whether the cache already held the file; then the peak resident\n"
		"memory, the cache and, for a device other than the host, its memory\n"
		"summary.\n"),
	      stdout);
	fputs("\n", stdout);
	fputs(_("  -d, --device=D   load onto device D (default: host)\n"
		"  -n, --repeat=N   load each file N times, releasing it in between\n"
		"                   (default: 1; every load after the first is a hit)\n"
		"  -w, --writable   map host placements copy-on-write\n"
		"  -h, --help       show this help and exit\n"),
	      stdout);
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static void draw_bar(struct progress *p, uint64_t done, uint64_t total)
{
	int filled = total ? (int)((double)done / (double)total * BAR_WIDTH) : BAR_WIDTH;
	char bar[BAR_WIDTH + 1], a[32], b[32];

	if (filled > BAR_WIDTH)
		filled = BAR_WIDTH;
	memset(bar, '#', (size_t)filled);
	memset(bar + filled, '.', (size_t)(BAR_WIDTH - filled));
	bar[BAR_WIDTH] = '\0';
	tool_format_bytes(done, a, sizeof a);
	tool_format_bytes(total, b, sizeof b);
	/* \033[K: a shorter line leaves nothing of the longer one before it. */
	fprintf(stderr, "\r%.40s [%s] %3d%% %s / %s\033[K", p->label, bar,
		total ? (int)((double)done * 100 / (double)total) : 100, a, b);
	fflush(stderr);
	p->shown = true;
}

/* Called from the loading thread; never cancels. */
static int on_progress(void *user, uint64_t done, uint64_t total)
{
	struct progress *p = user;
	int64_t t = now_ns();

	if (t - p->last_ns >= PROGRESS_INTERVAL_NS) {
		p->last_ns = t;
		draw_bar(p, done, total);
	}
	return 0;
}

/* The result lines go to stdout, which may be the same terminal. */
static void erase_bar(struct progress *p)
{
	if (p->shown) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
		p->shown = false;
	}
}

/* Returns -1 to go on, or the exit status. */
static int parse_args(struct load_opts *o, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"device", required_argument, NULL, 'd'},
		{"repeat", required_argument, NULL, 'n'},
		{"writable", no_argument, NULL, 'w'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	char *end;
	int c;

	/* 0: getopt starts afresh, so options may follow the files. */
	optind = 0;
	while ((c = getopt_long(argc, argv, "d:n:wh", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			o->device = optarg;
			break;
		case 'n':
			errno = 0;
			o->repeat = strtoul(optarg, &end, 10);
			/* strtoul takes "-1" as a huge number: refuse any sign. */
			if (errno || end == optarg || *end || o->repeat == 0 || o->repeat > INT_MAX ||
			    strchr(optarg, '-')) {
				tool_error(_("load: invalid repeat count '%s' (expected a whole number "
					     "from 1)"),
					   optarg);
				return EXIT_USAGE;
			}
			break;
		case 'w':
			o->writable = true;
			break;
		case 'h':
			help();
			return EXIT_OK;
		default:
			fprintf(stderr, _("Try 'devcache load --help' for more information.\n"));
			return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		tool_error("%s", _("load: no file given"));
		fprintf(stderr, _("Try 'devcache load --help' for more information.\n"));
		return EXIT_USAGE;
	}
	return -1;
}

static uint64_t tensor_bytes(const devcache_model_t *model)
{
	const devcache_model_file_t *mf = devcache_model_file(model);
	size_t n = devcache_model_file_tensor_count(mf);
	uint64_t bytes = 0;

	for (size_t i = 0; i < n; i++) {
		devcache_tensor_info_t t;

		if (devcache_model_file_tensor(mf, i, &t) == 0)
			bytes += t.size;
	}
	return bytes;
}

/* One load, timed, reported and released. */
static int load_once(devcache_ctx_t *ctx, devcache_device_t *dev, const char *dev_id,
		     const char *path, const struct load_opts *o)
{
	struct progress p = {.label = path};
	devcache_load_result_t r;
	devcache_load_args_t args = {
		.struct_size = sizeof args,
		.flags = o->writable ? DEVCACHE_LOAD_WRITABLE : 0,
		.progress = isatty(STDERR_FILENO) ? on_progress : NULL,
		.progress_user = &p,
		.result = &r,
	};
	devcache_model_t *model;
	int64_t t0;
	double secs;
	int rc;

	t0 = p.last_ns = now_ns();
	rc = devcache_model_load(ctx, path, dev, &args, &model);
	secs = (double)(now_ns() - t0) / 1e9;
	erase_bar(&p);
	if (rc) {
		/* The message names the file and the fault. */
		tool_error("%s", devcache_last_error());
		return EXIT_RUNTIME;
	}
	bool hit = r.hit;
	uint64_t bytes = tensor_bytes(model);
	char rate[32];

	devcache_model_release(model);
	if (secs > 0)
		snprintf(rate, sizeof rate, "%.2f", (double)bytes / secs / 1e9);
	else
		snprintf(rate, sizeof rate, "-");
	printf(_("%s on %s: %.3f ms, %s GB/s, %s\n"), path, dev_id, secs * 1e3, rate,
	       hit ? _("hit") : _("miss"));
	return EXIT_OK;
}

/* VmHWM, the most resident memory the process has had; 0 if unknown. */
static uint64_t peak_rss(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	unsigned long long kib = 0;
	char line[256];

	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "VmHWM: %llu kB", &kib) == 1)
			break;
	fclose(f);
	return (uint64_t)kib * 1024;
}

static int report(devcache_ctx_t *ctx, devcache_device_t *dev, bool host)
{
	uint64_t rss = peak_rss();
	char size[32];

	if (rss)
		tool_format_bytes(rss, size, sizeof size);
	else
		snprintf(size, sizeof size, "%s", _("unknown"));
	printf(_("Peak RSS: %s\n"), size);
	putchar('\n');
	if (devcache_cache_summary(ctx, stdout)) {
		tool_error(_("load: cannot print the cache summary: %s"), devcache_last_error());
		return EXIT_RUNTIME;
	}
	/* The host's allocator is not what loads use there: the file is mapped. */
	if (!host) {
		putchar('\n');
		if (devcache_summary(dev, stdout)) {
			tool_error(_("load: cannot print the memory summary: %s"),
				   devcache_last_error());
			return EXIT_RUNTIME;
		}
	}
	return EXIT_OK;
}

int cmd_load(const struct tool *t, int argc, char **argv)
{
	struct load_opts o = {.device = "host", .repeat = 1};
	devcache_device_info_t info;
	devcache_device_t *dev;
	devcache_ctx_t *ctx;
	int status, rc;

	if ((status = parse_args(&o, argc, argv)) >= 0)
		return status;
	if ((status = tool_open(t, &ctx)))
		return status;
	if ((status = tool_device(ctx, o.device, &dev))) {
		devcache_close(ctx);
		return status;
	}
	if ((rc = devcache_device_info(dev, &info))) {
		tool_error("%s", devcache_last_error());
		devcache_close(ctx);
		return EXIT_RUNTIME;
	}
	for (int i = optind; i < argc; i++)
		for (unsigned long n = 0; n < o.repeat; n++)
			if (load_once(ctx, dev, info.id, argv[i], &o)) {
				status = EXIT_RUNTIME;
				break; /* its repeats would fail the same way */
			}
	putchar('\n');
	if (report(ctx, dev, info.caps & DEVCACHE_CAP_HOST_MEMORY) != EXIT_OK)
		status = EXIT_RUNTIME;
	devcache_close(ctx);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		tool_error("%s", _("load: write error on standard output"));
		status = EXIT_RUNTIME;
	}
	return status;
}
