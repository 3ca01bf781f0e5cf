/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cmd-load.c - `devcache load`: loads model files through the model cache and reports time, throughput, hits and memory. */
#include "tool.h"

#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A terminal redrawn more often than this only flickers. */
#define PROGRESS_INTERVAL_NS 100000000ll
/* The bar narrows before the label is cut below this many columns. */
#define LABEL_MIN 20
#define BAR_WIDTH 20

struct load_opts {
	const char *device;
	unsigned long repeat;
	bool writable;
	size_t align;                 /* --align, 0: none */
	bool json;
	struct json_object *loads;    /* --json: what each load did */
	struct json_object *failures; /* --json: each failed load's error */
};

struct progress {
	const char *label;
	int64_t start_ns; /* the start of the load */
	int64_t last_ns;  /* the last redraw, or the start of the load */
	bool shown;
};

static void help(void)
{
	printf(_("Usage: devcache load [--device D] [--repeat N] [--writable] [--align N]\n"
		 "                     [--json] MODEL...\n"));
	fputs(_("Load safetensors or GGUF models (a file, a *.safetensors.index.json, any\n"
		"shard of a GGUF split, or a folder holding one of these) through the model\n"
		"cache, as a program serving them would, and print for each load whether the\n"
		"cache already held it, its time, and what it read and uploaded; then the\n"
		"peak resident memory, the cache and, for a device other than the host, its\n"
		"memory summary.\n"),
	      stdout);
	fputs("\n", stdout);
	fputs(_("  -d, --device=D               load onto device D (default: host)\n"
		"  -n, --repeat=N               load each file N times, releasing it in\n"
		"                               between (default: 1; every load after the\n"
		"                               first is a hit)\n"
		"  -w, --writable               map host placements copy-on-write\n"
		"  -a, --align=N                copy the tensors whose data is not aligned to N\n"
		"                               bytes (a power of two up to 4096)\n"
		"  -j, --json                   print one JSON document instead\n"),
	      stdout);
	tool_print_common_options();
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* A time left as a clock shows it: "1:05", "2:01:05"; "--:--" unknown. */
static void format_left(double secs, char *buf, size_t size)
{
	if (secs < 0 || secs > 360000) {
		snprintf(buf, size, "--:--");
		return;
	}
	unsigned long s = (unsigned long)(secs + 0.5);

	if (s >= 3600)
		snprintf(buf, size, "%lu:%02lu:%02lu", s / 3600, s / 60 % 60, s % 60);
	else
		snprintf(buf, size, "%lu:%02lu", s / 60, s % 60);
}

/* "label [####......]  42% 1.2 GiB / 3.0 GiB, 350.0 MiB/s, 0:05 left" in
 * fewer columns than the terminal's 80, so that it never wraps: the bar
 * narrows (to half) before the label is cut, and the label is cut from
 * the left, where a path is least telling. */
static void draw_bar(struct progress *p, uint64_t done, uint64_t total, int64_t now)
{
	double secs = (double)(now - p->start_ns) / 1e9,
	       rate = secs > 0 ? (double)done / secs : 0;
	char bar[BAR_WIDTH + 1], a[32], b[32], r[32], left[32], tail[160];
	size_t label_w = tool_width(p->label), tail_w, room, bar_w = BAR_WIDTH;

	format_bytes(done, a, sizeof a);
	format_bytes(total, b, sizeof b);
	format_bytes((uint64_t)rate, r, sizeof r);
	format_left(rate > 0 && total >= done ? (double)(total - done) / rate : -1, left,
		    sizeof left);
	/* TRANSLATORS: the progress of a load: done / total, rate, time left. */
	snprintf(tail, sizeof tail, _("%s / %s, %s/s, %s left"), a, b, r, left);
	tail_w = tool_width(tail);
	/* label " [" bar "] " "100%" " " tail */
	size_t fixed = 2 + 2 + 4 + 1 + tail_w, line = TOOL_COLUMNS - 1;
	room = line > fixed + bar_w ? line - fixed - bar_w : 0;
	if (room < LABEL_MIN && label_w > room) {
		size_t narrower = LABEL_MIN - room;

		bar_w -= narrower < BAR_WIDTH / 2 ? narrower : BAR_WIDTH / 2;
		room = line > fixed + bar_w ? line - fixed - bar_w : 0;
	}
	if (room < 4)
		room = 4;
	int filled = total ? (int)((double)done / (double)total * (double)bar_w) : (int)bar_w;
	if (filled > (int)bar_w)
		filled = (int)bar_w;
	memset(bar, '#', (size_t)filled);
	memset(bar + filled, '.', bar_w - (size_t)filled);
	bar[bar_w] = '\0';
	const char *label = p->label;
	for (; label_w > room; label_w--) { /* whole characters off the front */
		label++;
		while ((*label & 0xc0) == 0x80)
			label++;
	}
	/* \033[K: a shorter line leaves nothing of the longer one before it. */
	fprintf(stderr, "\r%s [%s] %3d%% %s\033[K", label, bar,
		total ? (int)((double)done * 100 / (double)total) : 100, tail);
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
		draw_bar(p, done, total, t);
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
static int parse_args(struct tool *t, struct load_opts *o, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"device", required_argument, NULL, 'd'},
		{"repeat", required_argument, NULL, 'n'},
		{"writable", no_argument, NULL, 'w'},
		{"align", required_argument, NULL, 'a'},
		{"json", no_argument, NULL, 'j'},
		TOOL_LONGOPTS,
		{NULL, 0, NULL, 0},
	};
	char *end;
	int c, status;

	while ((c = getopt_long(argc, argv, "d:n:wa:j" TOOL_SHORTOPTS, longopts, NULL)) != -1) {
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
				tool_error(_("invalid repeat count '%s' (expected a whole number "
					     "from 1)"),
					   tool_shown(optarg));
				return tool_try_help();
			}
			break;
		case 'w':
			o->writable = true;
			break;
		case 'a': {
			unsigned long a;

			errno = 0;
			a = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || a == 0 || a > 4096 || (a & (a - 1)) ||
			    strchr(optarg, '-')) {
				tool_error(_("invalid alignment '%s' (expected a power of two from 1 "
					     "to 4096)"),
					   tool_shown(optarg));
				return tool_try_help();
			}
			o->align = a;
			break;
		}
		case 'j':
			o->json = true;
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
		tool_error("%s", _("no file given"));
		return tool_try_help();
	}
	return -1;
}

/* A time as fits it: milliseconds below a second, seconds above. */
static void format_time(double secs, char *buf, size_t size)
{
	if (secs >= 1)
		snprintf(buf, size, "%.2f s", secs);
	else if (secs >= 0.01)
		snprintf(buf, size, "%.1f ms", secs * 1e3);
	else
		snprintf(buf, size, "%.3f ms", secs * 1e3);
}

/* The line of one load: hit or miss, its time and, when it moved bytes,
 * how many and how fast; what follows the path goes under it where the
 * line would not fit. */
static void print_load(const char *path, const char *dev_id, bool host,
		       const devcache_load_result_t *r)
{
	uint64_t moved = r->bytes_read > r->bytes_uploaded ? r->bytes_read : r->bytes_uploaded;
	char t[32], a[32], b[32], rate[32], rest[256], *where;
	size_t n;

	format_time(r->seconds, t, sizeof t);
	n = (size_t)snprintf(rest, sizeof rest, _("%s in %s"),
			     !r->hit ? _("miss") : r->from_ram ? _("hit from RAM") : _("hit"), t);
	if (n >= sizeof rest)
		n = sizeof rest - 1;
	if (moved && r->seconds > 0) {
		format_bytes((uint64_t)((double)moved / r->seconds), rate, sizeof rate);
		format_bytes(r->bytes_read, a, sizeof a);
		format_bytes(r->bytes_uploaded, b, sizeof b);
		if (r->bytes_read && r->bytes_uploaded)
			snprintf(rest + n, sizeof rest - n, _(": read %s, uploaded %s (%s/s)"), a, b,
				 rate);
		else if (r->bytes_read)
			snprintf(rest + n, sizeof rest - n, _(": read %s (%s/s)"), a, rate);
		else
			snprintf(rest + n, sizeof rest - n, _(": uploaded %s (%s/s)"), b, rate);
	} else if (!r->hit && host) {
		snprintf(rest + n, sizeof rest - n, "%s",
			 _(": mapped in place (zero copy), nothing read"));
	}
	/* TRANSLATORS: a model file and the device it was loaded onto. */
	if (asprintf(&where, _("%s on %s:"), tool_shown(path), tool_shown(dev_id)) < 0)
		return;
	if (tool_width(where) + 1 + tool_width(rest) <= TOOL_COLUMNS) {
		printf("%s %s\n", where, rest);
	} else {
		printf("%s\n  ", where);
		tool_wrap(stdout, 2, 4, rest);
	}
	free(where);
	if (r->device_bytes && r->host_bytes) {
		format_bytes(r->device_bytes, a, sizeof a);
		format_bytes(r->device_bytes + r->host_bytes, b, sizeof b);
		printf(_("  %s of %s on %s, the rest on the host\n"), a, b, dev_id);
	}
	/* On the host "0 B on the device" would read as if nothing was
	 * placed: say where the bytes are. */
	if (host && r->mapped_bytes) {
		format_bytes(r->mapped_bytes, a, sizeof a);
		printf(_("  %s of tensors mapped in place (zero copy)\n"), a);
	}
	if (r->aligned_copies) {
		format_bytes(r->aligned_bytes, a, sizeof a);
		printf(P_("  %s in %llu tensor copied to be aligned\n",
			  "  %s in %llu tensors copied to be aligned\n", r->aligned_copies),
		       a, (unsigned long long)r->aligned_copies);
	}
}

static struct json_object *load_json(const char *path, const devcache_load_result_t *r)
{
	struct json_object *o = json_object_new_object();

	if (!o)
		return NULL;
	json_object_object_add(o, "model", json_object_new_string(path));
	json_object_object_add(o, "hit", json_object_new_boolean(r->hit));
	json_object_object_add(o, "from_ram", json_object_new_boolean(r->from_ram));
	json_object_object_add(o, "bytes_read", json_object_new_uint64(r->bytes_read));
	json_object_object_add(o, "bytes_uploaded", json_object_new_uint64(r->bytes_uploaded));
	json_object_object_add(o, "seconds", json_object_new_double(r->seconds));
	json_object_object_add(o, "device_bytes", json_object_new_uint64(r->device_bytes));
	json_object_object_add(o, "host_bytes", json_object_new_uint64(r->host_bytes));
	json_object_object_add(o, "mapped_bytes", json_object_new_uint64(r->mapped_bytes));
	json_object_object_add(o, "aligned_copies", json_object_new_uint64(r->aligned_copies));
	json_object_object_add(o, "aligned_bytes", json_object_new_uint64(r->aligned_bytes));
	json_object_object_add(o, "partial",
			       json_object_new_boolean(r->device_bytes && r->host_bytes));
	return o;
}

/* One load, reported and released. */
static int load_once(devcache_ctx_t *ctx, devcache_device_t *dev, const char *dev_id, bool host,
		     const char *path, const struct load_opts *o)
{
	struct progress p = {.label = tool_shown(path)}; /* no other tool_shown() until it is done */
	devcache_load_result_t r;
	devcache_load_args_t args = {
		.struct_size = sizeof args,
		.flags = o->writable ? DEVCACHE_LOAD_WRITABLE : 0,
		.align = o->align,
		.progress = isatty(STDERR_FILENO) ? on_progress : NULL,
		.progress_user = &p,
		.result = &r,
	};
	devcache_model_t *model;
	int rc;

	p.start_ns = p.last_ns = now_ns();
	rc = devcache_model_load(ctx, path, dev, &args, &model);
	erase_bar(&p);
	if (rc) {
		/* The message names the file and the fault. */
		tool_error("%s", devcache_last_error());
		if (o->json) {
			struct json_object *f = json_object_new_object();

			if (f) {
				json_object_object_add(f, "model", json_object_new_string(path));
				json_object_object_add(f, "error",
						       json_object_new_string(devcache_last_error()));
				json_object_array_add(o->failures, f);
			}
		}
		return EXIT_RUNTIME;
	}
	devcache_model_release(model);
	if (o->json) {
		struct json_object *l = load_json(path, &r);

		if (!l) {
			tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
			return EXIT_RUNTIME;
		}
		json_object_array_add(o->loads, l);
	} else {
		print_load(path, dev_id, host, &r);
	}
	return EXIT_OK;
}

/* VmHWM, the most resident memory the process has had; 0 if unknown. */
static uint64_t peak_rss(void)
{
	return tool_proc_kb("/proc/self/status", "VmHWM");
}

/* What the cache holds at the end, from devcache_cache_models(). */
static struct json_object *models_json(devcache_ctx_t *ctx)
{
	static const char *const where[] = {"", "device", "host", "ram_copy", "partial"};
	struct json_object *all = json_object_new_array();
	devcache_cached_model_t *l;
	size_t n;

	if (!all || devcache_cache_models(ctx, &l, &n)) {
		json_object_put(all);
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		struct json_object *m = json_object_new_object();
		devcache_device_info_t info;

		if (!m || devcache_device_info(l[i].device, &info)) {
			json_object_put(m);
			continue;
		}
		json_object_object_add(m, "model", json_object_new_string(l[i].path));
		json_object_object_add(m, "device", json_object_new_string(info.id));
		json_object_object_add(m, "where", json_object_new_string(
			l[i].where > 0 && l[i].where <= 4 ? where[l[i].where] : "?"));
		json_object_object_add(m, "size", json_object_new_uint64(l[i].size));
		json_object_object_add(m, "device_bytes", json_object_new_uint64(l[i].device_bytes));
		json_object_object_add(m, "host_bytes", json_object_new_uint64(l[i].host_bytes));
		json_object_object_add(m, "charged_device",
				       json_object_new_uint64(l[i].charged_device));
		json_object_object_add(m, "charged_ram", json_object_new_uint64(l[i].charged_ram));
		json_object_object_add(m, "locks", json_object_new_int(l[i].locks));
		json_object_object_add(m, "hits", json_object_new_uint64(l[i].hits));
		json_object_array_add(all, m);
	}
	devcache_cache_models_free(l, n);
	return all;
}

/* --json: the whole run as one document. */
static int report_json(devcache_ctx_t *ctx, const char *dev_id, struct load_opts *o)
{
	struct json_object *doc = json_object_new_object(), *cache = json_object_new_object();
	devcache_cache_stats_t s;

	if (!doc || !cache || devcache_cache_stats(ctx, &s)) {
		json_object_put(doc);
		json_object_put(cache);
		tool_error("%s", doc && cache ? devcache_last_error()
						   : devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	json_object_object_add(cache, "models", json_object_new_uint64(s.models));
	json_object_object_add(cache, "hits", json_object_new_uint64(s.hits));
	json_object_object_add(cache, "misses", json_object_new_uint64(s.misses));
	json_object_object_add(cache, "evictions", json_object_new_uint64(s.evictions));
	json_object_object_add(cache, "bytes_read", json_object_new_uint64(s.bytes_read));
	json_object_object_add(cache, "bytes_uploaded", json_object_new_uint64(s.bytes_uploaded));
	json_object_object_add(cache, "ram_used", json_object_new_uint64(s.ram_used));
	json_object_object_add(cache, "ram_budget", json_object_new_uint64(s.ram_budget));
	json_object_object_add(cache, "ram_peak", json_object_new_uint64(s.ram_peak));
	json_object_object_add(cache, "offloads", json_object_new_uint64(s.offloads));
	json_object_object_add(cache, "cached_models", models_json(ctx));
	json_object_object_add(doc, "device", json_object_new_string(dev_id));
	json_object_object_add(doc, "loads", json_object_get(o->loads));
	json_object_object_add(doc, "failures", json_object_get(o->failures));
	json_object_object_add(doc, "peak_rss", json_object_new_uint64(peak_rss()));
	json_object_object_add(doc, "cache", cache);
	puts(json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN |
						 JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(doc);
	return EXIT_OK;
}

static int report(devcache_ctx_t *ctx, devcache_device_t *dev, bool host)
{
	uint64_t rss = peak_rss();
	char size[32];

	if (rss)
		format_bytes(rss, size, sizeof size);
	else
		snprintf(size, sizeof size, "%s", _("unknown"));
	printf(_("Peak RSS: %s\n"), size);
	putchar('\n');
	if (devcache_cache_summary(ctx, stdout)) {
		tool_error(_("cannot print the cache summary: %s"), devcache_last_error());
		return EXIT_RUNTIME;
	}
	/* The host's allocator is not what loads use there: the file is mapped. */
	if (!host) {
		putchar('\n');
		if (devcache_summary(dev, stdout)) {
			tool_error(_("cannot print the memory summary: %s"),
				   devcache_last_error());
			return EXIT_RUNTIME;
		}
	}
	return EXIT_OK;
}

int cmd_load(struct tool *t, int argc, char **argv)
{
	struct load_opts o = {.device = "host", .repeat = 1};
	devcache_device_info_t info;
	devcache_device_t *dev;
	devcache_ctx_t *ctx;
	int status, rc;

	if ((status = parse_args(t, &o, argc, argv)) >= 0)
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
	bool host = info.caps & DEVCACHE_CAP_HOST_MEMORY, loaded = false;

	if (o.json && (!(o.loads = json_object_new_array()) ||
		       !(o.failures = json_object_new_array()))) {
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		status = EXIT_RUNTIME;
		goto out;
	}
	for (int i = optind; i < argc; i++)
		for (unsigned long n = 0; n < o.repeat; n++) {
			if (load_once(ctx, dev, info.id, host, argv[i], &o)) {
				status = EXIT_RUNTIME;
				break; /* its repeats would fail the same way */
			}
			loaded = true;
		}
	/* After a failure, nothing but its error: no summary of an empty cache. */
	if (o.json) {
		if (report_json(ctx, info.id, &o) != EXIT_OK)
			status = EXIT_RUNTIME;
	} else if (loaded) {
		putchar('\n');
		if (report(ctx, dev, host) != EXIT_OK)
			status = EXIT_RUNTIME;
	}
out:
	json_object_put(o.loads);
	json_object_put(o.failures);
	devcache_close(ctx);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		tool_error("%s", _("write error on standard output"));
		status = EXIT_RUNTIME;
	}
	return status;
}
