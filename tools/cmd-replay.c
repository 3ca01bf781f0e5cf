/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cmd-replay.c - `devcache replay`: runs allocation traces through the caching allocator and reports time, peak memory and device calls. */
#include "tool.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trace-read.h"

struct replay {
	const char *device;
	char device_id[32];
	bool json, summary;
	char *options;  /* the command's own -o, joined */
	struct trace_set set;
	/* the run */
	devcache_device_t *dev;
	devcache_stream_t *streams; /* by stream index; [0] is NULL, the default stream */
	void **ptrs;                /* by slot; NULL: free, or the allocation failed */
	uint64_t operations, ooms, ns;
	devcache_stats_t stats;
};

static void help(void)
{
	printf(_("Usage: devcache replay [--device D] [--json] [--summary] [-o KEY:VALUE,...] "
		 "TRACE...\n"));
	fputs(_("Replay allocation traces (devcache-trace(5)) through the caching allocator,\n"
		"one file after another, and print the events, the time per operation,\n"
		"peak allocated and reserved memory, device allocations and frees,\n"
		"out-of-memory failures and retries.\n"),
	      stdout);
	fputs("\n", stdout);
	fputs(_("  -d, --device=D               replay on device D (default: host)\n"
		"      --json                   print the results as one JSON object\n"
		"      --summary                add the memory summary table\n"
		"  -o, --options=KEY:VALUE,...  set tunables (over the global -o)\n"
		"  -h, --help                   show this help and exit\n"),
	      stdout);
}

/* Append the command's -o to what it had, comma-separated. */
static bool add_options(char **options, const char *more)
{
	char *joined;

	if (!*more)
		return true;
	if (asprintf(&joined, "%s%s%s", *options ? *options : "", *options ? "," : "", more) < 0)
		return false;
	free(*options);
	*options = joined;
	return true;
}

/* Returns -1 to go on, or the exit status. */
static int parse_args(struct replay *rp, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"device", required_argument, NULL, 'd'},
		{"json", no_argument, NULL, 'j'},
		{"summary", no_argument, NULL, 's'},
		{"options", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c;

	/* 0, not 1: getopt starts afresh, so options may follow the files
	 * (main's parse stopped at the command). */
	optind = 0;
	while ((c = getopt_long(argc, argv, "d:o:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			rp->device = optarg;
			break;
		case 'j':
			rp->json = true;
			break;
		case 's':
			rp->summary = true;
			break;
		case 'o':
			if (!add_options(&rp->options, optarg)) {
				tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
				return EXIT_RUNTIME;
			}
			break;
		case 'h':
			help();
			return EXIT_OK;
		default:
			fprintf(stderr, _("Try 'devcache replay --help' for more information.\n"));
			return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		tool_error(_("replay: no trace file given"));
		fprintf(stderr, _("Try 'devcache replay --help' for more information.\n"));
		return EXIT_USAGE;
	}
	return -1;
}

static int read_traces(struct replay *rp, int n, char **paths)
{
	char err[1024];

	for (int i = 0; i < n; i++) {
		int rc = trace_set_read(&rp->set, paths[i], err, sizeof err);

		if (rc) {
			tool_error("%s", err);
			/* A bad or missing file is bad input; one that cannot be
			 * read, or memory running out, is a failure at run time. */
			return rc == DEVCACHE_EFORMAT || rc == DEVCACHE_ENOENT ? EXIT_USAGE
									       : EXIT_RUNTIME;
		}
	}
	return EXIT_OK;
}

static int create_streams(struct replay *rp)
{
	rp->streams = calloc((size_t)rp->set.max_stream + 1, sizeof *rp->streams);
	rp->ptrs = calloc(rp->set.n_slots ? rp->set.n_slots : 1, sizeof *rp->ptrs);
	if (!rp->streams || !rp->ptrs) {
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	for (unsigned s = 1; s <= rp->set.max_stream; s++)
		if (trace_stream_used(&rp->set, s) && devcache_stream_create(rp->dev, &rp->streams[s])) {
			tool_error(_("replay: cannot create stream %u: %s"), s, devcache_last_error());
			return EXIT_RUNTIME;
		}
	return EXIT_OK;
}

/* Where event i came from, for a message. */
static void report_failure(const struct replay *rp, size_t i, const struct trace_event *ev)
{
	const struct trace_file *f = rp->set.files;

	while (f + 1 < rp->set.files + rp->set.n_files && i >= f->first + f->count)
		f++;
	if (ev->op == TRACE_OP_ALLOC)
		tool_error(_("replay: %s: event %zu: allocating %llu bytes failed: %s"), f->path,
			   i - f->first + 1, (unsigned long long)ev->size, devcache_last_error());
	else
		tool_error(_("replay: %s: event %zu: freeing failed: %s"), f->path, i - f->first + 1,
			   devcache_last_error());
}

/* The timed part: every event, nothing else. */
static int run(struct replay *rp)
{
	const struct trace_event *events = rp->set.events;
	const size_t n = rp->set.n_events;
	devcache_device_t *dev = rp->dev;
	devcache_stream_t *streams = rp->streams;
	void **ptrs = rp->ptrs;
	uint64_t operations = 0, ooms = 0;
	struct timespec t0, t1;
	int rc = 0;
	size_t i;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < n; i++) {
		const struct trace_event *ev = &events[i];

		if (ev->op == TRACE_OP_ALLOC) {
			operations++;
			rc = devcache_alloc(dev, ev->size, streams[ev->stream], &ptrs[ev->slot]);
			if (rc == DEVCACHE_ENOMEM) {
				ptrs[ev->slot] = NULL; /* its free is skipped */
				ooms++;
				rc = 0;
			} else if (rc) {
				ptrs[ev->slot] = NULL;
				break;
			}
		} else if (ptrs[ev->slot]) {
			operations++;
			rc = devcache_free(dev, ptrs[ev->slot]);
			ptrs[ev->slot] = NULL;
			if (rc)
				break;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	rp->operations = operations;
	rp->ooms = ooms;
	rp->ns = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u + (uint64_t)t1.tv_nsec -
		 (uint64_t)t0.tv_nsec;
	if (rc) {
		report_failure(rp, i, &events[i]);
		return EXIT_RUNTIME;
	}
	if ((rc = devcache_stats(dev, &rp->stats))) {
		tool_error(_("replay: cannot read the statistics: %s"), devcache_last_error());
		return EXIT_RUNTIME;
	}
	return EXIT_OK;
}

/* ---- printing ------------------------------------------------------------ */

/* Fixed-point numbers without the locale's decimal separator, for JSON. */
static void print_fixed(FILE *out, double v, unsigned decimals)
{
	unsigned scale = decimals == 3 ? 1000 : 10;

	if (v * scale >= 1e18) { /* no fraction left to print; no separator either */
		fprintf(out, "%.0f", v);
		return;
	}
	unsigned long long n = (unsigned long long)(v * scale + 0.5);
	fprintf(out, "%llu.%0*llu", n / scale, (int)decimals, n % scale);
}

/* One UTF-8 character at s: its length, or 0 if it is not valid. */
static size_t utf8_char(const unsigned char *s)
{
	unsigned c = s[0];
	size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c <= 0xdf ? 2 : 0;

	if (c >= 0xf5 || n == 0)
		return 0;
	for (size_t i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	/* overlong forms, surrogates, beyond U+10FFFF */
	if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) ||
	    (c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f))
		return 0;
	return n;
}

/* A JSON string; bytes that are not UTF-8 become U+FFFD. */
static void json_string(FILE *out, const char *str)
{
	const unsigned char *s = (const unsigned char *)str;

	putc('"', out);
	while (*s) {
		if (*s == '"' || *s == '\\') {
			fprintf(out, "\\%c", *s++);
		} else if (*s == '\n') {
			fputs("\\n", out), s++;
		} else if (*s < 0x20 || *s == 0x7f) {
			fprintf(out, "\\u%04x", *s++);
		} else if (*s < 0x80) {
			putc(*s++, out);
		} else {
			size_t n = utf8_char(s);

			if (n) {
				fwrite(s, 1, n, out);
				s += n;
			} else {
				fputs("\\ufffd", out);
				s++;
			}
		}
	}
	putc('"', out);
}

static double ratio(const struct replay *rp)
{
	int64_t alloc = rp->stats.allocated_bytes[DEVCACHE_POOL_ALL].peak;
	int64_t res = rp->stats.reserved_bytes[DEVCACHE_POOL_ALL].peak;

	return alloc > 0 ? (double)res / (double)alloc : -1;
}

static double ns_per_op(const struct replay *rp)
{
	return rp->operations ? (double)rp->ns / (double)rp->operations : -1;
}

static void print_json(const struct replay *rp, int n_paths, char **paths, const char *summary)
{
	const devcache_stats_t *st = &rp->stats;
	FILE *out = stdout;

	fputs("{\"device\":", out);
	json_string(out, rp->device_id);
	fputs(",\"traces\":[", out);
	for (int i = 0; i < n_paths; i++) {
		if (i)
			putc(',', out);
		json_string(out, paths[i]);
	}
	fprintf(out, "],\"events\":%zu,\"operations\":%llu,\"nanoseconds\":%llu,\"ns_per_op\":",
		rp->set.n_read, (unsigned long long)rp->operations, (unsigned long long)rp->ns);
	if (ns_per_op(rp) >= 0)
		print_fixed(out, ns_per_op(rp), 1);
	else
		fputs("null", out);
	fprintf(out, ",\"peak_allocated_bytes\":%lld,\"peak_reserved_bytes\":%lld,"
		     "\"reserved_per_allocated\":",
		(long long)st->allocated_bytes[DEVCACHE_POOL_ALL].peak,
		(long long)st->reserved_bytes[DEVCACHE_POOL_ALL].peak);
	if (ratio(rp) >= 0)
		print_fixed(out, ratio(rp), 3);
	else
		fputs("null", out);
	fprintf(out, ",\"device_allocations\":%llu,\"device_frees\":%llu,\"ooms\":%llu,"
		     "\"retries\":%llu,\"stitched\":%llu",
		(unsigned long long)st->num_device_alloc, (unsigned long long)st->num_device_free,
		(unsigned long long)rp->ooms, (unsigned long long)st->num_alloc_retries,
		(unsigned long long)st->num_stitches);
	if (summary) {
		fputs(",\"summary\":", out);
		json_string(out, summary);
	}
	fputs("}\n", out);
}

/* The width a label takes on the terminal, near enough: its characters. */
static size_t width(const char *s)
{
	size_t n = mbstowcs(NULL, s, 0);

	return n == (size_t)-1 ? strlen(s) : n;
}

static void print_text(const struct replay *rp)
{
	const devcache_stats_t *st = &rp->stats;
	char v[10][96], a[32], b[32];
	const char *label[10] = {
		_("events"),         _("time per operation"), _("peak allocated"),
		_("peak reserved"),  _("reserved/allocated"), _("device allocations"),
		_("device frees"),   _("OOMs"),               _("retries"),
		_("stitched"),
	};
	/* The last line, libdevcache's own, only where stitching served. */
	size_t n = st->num_stitches ? 10 : 9, w = 0;

	snprintf(v[0], sizeof v[0], _("%zu (%llu operations)"), rp->set.n_read,
		 (unsigned long long)rp->operations);
	if (ns_per_op(rp) >= 0)
		snprintf(v[1], sizeof v[1], _("%.1f ns"), ns_per_op(rp));
	else
		snprintf(v[1], sizeof v[1], "-");
	tool_format_bytes((uint64_t)st->allocated_bytes[DEVCACHE_POOL_ALL].peak, a, sizeof a);
	tool_format_bytes((uint64_t)st->reserved_bytes[DEVCACHE_POOL_ALL].peak, b, sizeof b);
	snprintf(v[2], sizeof v[2], _("%lld bytes (%s)"),
		 (long long)st->allocated_bytes[DEVCACHE_POOL_ALL].peak, a);
	snprintf(v[3], sizeof v[3], _("%lld bytes (%s)"),
		 (long long)st->reserved_bytes[DEVCACHE_POOL_ALL].peak, b);
	if (ratio(rp) >= 0)
		snprintf(v[4], sizeof v[4], "%.3f", ratio(rp));
	else
		snprintf(v[4], sizeof v[4], "-");
	snprintf(v[5], sizeof v[5], "%llu", (unsigned long long)st->num_device_alloc);
	snprintf(v[6], sizeof v[6], "%llu", (unsigned long long)st->num_device_free);
	snprintf(v[7], sizeof v[7], "%llu", (unsigned long long)rp->ooms);
	snprintf(v[8], sizeof v[8], "%llu", (unsigned long long)st->num_alloc_retries);
	snprintf(v[9], sizeof v[9], "%llu", (unsigned long long)st->num_stitches);
	for (size_t i = 0; i < n; i++)
		w = width(label[i]) > w ? width(label[i]) : w;
	printf(_("Replay on %s:\n"), rp->device_id);
	for (size_t i = 0; i < n; i++)
		printf("  %s:%*s %s\n", label[i], (int)(w - width(label[i])), "", v[i]);
}

/* The summary table, into a string for JSON. */
static int summary_text(const struct replay *rp, char **text_p)
{
	size_t size;
	FILE *f = open_memstream(text_p, &size);
	int rc;

	if (!f) {
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	rc = devcache_summary(rp->dev, f);
	if (fclose(f) != 0 && !rc) {
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	if (rc) {
		tool_error(_("replay: cannot print the summary: %s"), devcache_last_error());
		return EXIT_RUNTIME;
	}
	return EXIT_OK;
}

static int report(const struct replay *rp, int n_paths, char **paths)
{
	char *summary = NULL;
	int status = EXIT_OK;

	if (rp->json) {
		if (rp->summary && (status = summary_text(rp, &summary)))
			goto out;
		print_json(rp, n_paths, paths, summary);
	} else {
		print_text(rp);
		if (rp->summary) {
			putchar('\n');
			fflush(stdout);
			if (devcache_summary(rp->dev, stdout)) {
				tool_error(_("replay: cannot print the summary: %s"),
					   devcache_last_error());
				status = EXIT_RUNTIME;
			}
		}
	}
out:
	free(summary);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		tool_error(_("replay: write error on standard output"));
		status = EXIT_RUNTIME;
	}
	return status;
}

/* ---- the command ----------------------------------------------------------- */

static void finish(struct replay *rp, devcache_ctx_t *ctx)
{
	if (rp->ptrs)
		for (uint32_t s = 0; s < rp->set.n_slots; s++)
			if (rp->ptrs[s])
				devcache_free(rp->dev, rp->ptrs[s]);
	if (rp->streams)
		for (unsigned s = 1; s <= rp->set.max_stream; s++)
			if (rp->streams[s])
				devcache_stream_destroy(rp->dev, rp->streams[s]);
	if (ctx)
		devcache_close(ctx);
	free(rp->ptrs);
	free(rp->streams);
	free(rp->options);
	trace_set_destroy(&rp->set);
}

int cmd_replay(const struct tool *t, int argc, char **argv)
{
	struct replay *rp = calloc(1, sizeof *rp);
	devcache_ctx_t *ctx = NULL;
	struct tool local = *t;
	char *options = NULL;
	int status;

	if (!rp) {
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	trace_set_init(&rp->set);
	rp->device = "host";
	if ((status = parse_args(rp, argc, argv)) >= 0)
		goto out;
	if ((status = read_traces(rp, argc - optind, argv + optind)))
		goto out;
	/* The command's -o comes after the global one, so it wins. */
	if (rp->options) {
		if (!add_options(&options, t->options ? t->options : "") ||
		    !add_options(&options, rp->options)) {
			tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
			status = EXIT_RUNTIME;
			goto out;
		}
		local.options = options;
	}
	if ((status = tool_open(&local, &ctx)))
		goto out;
	if ((status = tool_device(ctx, rp->device, &rp->dev)))
		goto out;
	/* Its own name: "cuda" is "cuda:0". */
	devcache_device_info_t info;
	if (devcache_device_info(rp->dev, &info) == 0)
		snprintf(rp->device_id, sizeof rp->device_id, "%s", info.id);
	else
		snprintf(rp->device_id, sizeof rp->device_id, "%s", rp->device);
	if ((status = create_streams(rp)) || (status = run(rp)))
		goto out;
	status = report(rp, argc - optind, argv + optind);
out:
	finish(rp, ctx);
	free(options);
	free(rp);
	return status;
}
