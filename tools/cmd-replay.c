/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cmd-replay.c - `devcache replay`: runs allocation traces through the caching allocator and reports time, peak memory and device calls.
 *
 * The traces are streamed: each batch of events the reader gives is run at
 * once, so that memory follows the blocks live at once, not the length of
 * the files.  Only the batches are timed, not the reading between them.
 * A fault in a file stops the replay there, and nothing is reported.
 */
#include "tool.h"

#include <getopt.h>
#include <json-c/json.h>
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
	uint64_t memory;         /* --memory, or the trace's device_memory; 0: none */
	const char *memory_from; /* which of them */
	struct trace_set set;
	char err[1024];
	/* the run */
	devcache_device_t *dev;
	devcache_stream_t *streams;  /* by stream index; [0] is NULL, the default stream */
	unsigned n_streams;          /* stream indices seen to, 0 included */
	void **ptrs;                 /* by slot; NULL: free, or the allocation failed */
	uint32_t n_ptrs;
	uint64_t operations, ooms, ns;
	devcache_stats_t stats;
};

static void help(void)
{
	printf(_("Usage: devcache replay [--device D] [-m SIZE] [--json] [--summary] TRACE...\n"));
	fputs(_("Replay allocation traces (devcache-trace(5)) through the caching allocator,\n"
		"one file after another, and print the events, the time per operation,\n"
		"peak allocated and reserved memory, device allocations and frees,\n"
		"out-of-memory failures and retries.  The host device has the memory of\n"
		"the device the trace came from, where its header says it, or --memory.\n"
		"Exit status 3: some allocations failed for want of memory.\n"),
	      stdout);
	fputs("\n", stdout);
	fputs(_("  -d, --device=D               replay on device D (default: host)\n"
		"  -m, --memory=SIZE            emulate a device of SIZE on the host (24G, 80GiB)\n"
		"  -j, --json                   print the results as one JSON object\n"
		"  -s, --summary                add the memory summary table\n"),
	      stdout);
	tool_print_common_options();
}

/* Returns -1 to go on, or the exit status. */
static int parse_args(struct tool *t, struct replay *rp, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"device", required_argument, NULL, 'd'},
		{"json", no_argument, NULL, 'j'},
		{"memory", required_argument, NULL, 'm'},
		{"summary", no_argument, NULL, 's'},
		TOOL_LONGOPTS,
		{NULL, 0, NULL, 0},
	};
	int c, status;

	while ((c = getopt_long(argc, argv, "d:jm:s" TOOL_SHORTOPTS, longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			rp->device = optarg;
			break;
		case 'j':
			rp->json = true;
			break;
		case 'm':
			if (!tool_parse_size(optarg, &rp->memory)) {
				tool_error(_("--memory: '%s' is not a size (a number of bytes, or with "
					     "K, M, G or T: 24G, 80GiB)"),
					   tool_shown(optarg));
				return tool_try_help();
			}
			rp->memory_from = "--memory";
			break;
		case 's':
			rp->summary = true;
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
	return -1;
}

/* The exit status for a trace that cannot be read. */
static int trace_failed(struct replay *rp, int rc)
{
	tool_error("%s", rp->err);
	/* A bad or missing file is bad input; one that cannot be read, or
	 * memory running out, is a failure at run time. */
	return rc == DEVCACHE_EFORMAT || rc == DEVCACHE_ENOENT ? EXIT_USAGE : EXIT_RUNTIME;
}

/* Streams and pointer slots for the batch just read: what the allocator
 * needs before the batch runs. */
static int prepare_batch(struct replay *rp)
{
	const struct trace_set *set = &rp->set;

	if (set->n_slots > rp->n_ptrs) {
		void **ptrs = realloc(rp->ptrs, set->n_slots * sizeof *ptrs);

		if (!ptrs) {
			tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
			return EXIT_RUNTIME;
		}
		memset(ptrs + rp->n_ptrs, 0, (set->n_slots - rp->n_ptrs) * sizeof *ptrs);
		rp->ptrs = ptrs;
		rp->n_ptrs = set->n_slots;
	}
	if (set->n_streams == rp->n_streams)
		return EXIT_OK;
	rp->n_streams = set->n_streams;
	for (unsigned s = 1; s <= set->max_stream; s++)
		if (trace_stream_used(set, s) && !rp->streams[s] &&
		    devcache_stream_create(rp->dev, &rp->streams[s])) {
			tool_error(_("cannot create stream %u: %s"), s, devcache_last_error());
			return EXIT_RUNTIME;
		}
	return EXIT_OK;
}

/* Where event i of the batch came from, for a message. */
static void report_failure(const struct replay *rp, size_t i, const struct trace_event *ev)
{
	const char *path = rp->set.path;
	size_t n = rp->set.first + i + 1;

	if (ev->op == TRACE_OP_ALLOC)
		tool_error(_("%s: event %zu: allocating %llu bytes failed: %s"), path, n,
			   (unsigned long long)ev->size, devcache_last_error());
	else
		tool_error(_("%s: event %zu: freeing failed: %s"), path, n, devcache_last_error());
}

/* The timed part: every event of the batch, nothing else. */
static int run_batch(struct replay *rp)
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
	rp->operations += operations;
	rp->ooms += ooms;
	rp->ns += (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u + (uint64_t)t1.tv_nsec -
		  (uint64_t)t0.tv_nsec;
	if (rc) {
		report_failure(rp, i, &events[i]);
		return EXIT_RUNTIME;
	}
	return EXIT_OK;
}

/* The open file, batch after batch, to its end; the first batch is read
 * already where have_batch says so. */
static int run_file(struct replay *rp, bool have_batch)
{
	int rc = 0, status;

	if (have_batch && rp->set.n_events &&
	    ((status = prepare_batch(rp)) || (status = run_batch(rp))))
		return status;
	if (have_batch && !rp->set.n_events)
		return EXIT_OK; /* read to its end */
	while (!(rc = trace_set_next(&rp->set, rp->err, sizeof rp->err)) && rp->set.n_events)
		if ((status = prepare_batch(rp)) || (status = run_batch(rp)))
			return status;
	return rc ? trace_failed(rp, rc) : EXIT_OK;
}

/* Every file; the first one is open already, its first batch read. */
static int run(struct replay *rp, int n, char **paths)
{
	int rc, status;

	rp->streams = calloc(TRACE_STREAM_MAX + 1, sizeof *rp->streams);
	if (!rp->streams) {
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	for (int i = 0; i < n; i++) {
		if (i > 0 && (rc = trace_set_open(&rp->set, paths[i], rp->err, sizeof rp->err)))
			return trace_failed(rp, rc);
		if ((status = run_file(rp, i == 0)))
			return status;
	}
	if (devcache_stats(rp->dev, &rp->stats)) {
		tool_error(_("cannot read the statistics: %s"), devcache_last_error());
		return EXIT_RUNTIME;
	}
	return EXIT_OK;
}

/* ---- printing ------------------------------------------------------------ */

/* A fixed-point number as JSON writes it, whatever the locale's decimal
 * separator; null when there is none to write (v < 0). */
static struct json_object *json_fixed(double v, unsigned decimals)
{
	unsigned scale = decimals == 3 ? 1000 : 10;
	char text[64];

	if (v < 0)
		return NULL;
	if (v * scale >= 1e18) { /* no fraction left to print; no separator either */
		snprintf(text, sizeof text, "%.0f", v);
	} else {
		unsigned long long n = (unsigned long long)(v * scale + 0.5);

		snprintf(text, sizeof text, "%llu.%0*llu", n / scale, (int)decimals, n % scale);
	}
	return json_object_new_double_s(v, text);
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

/* A string for JSON: valid UTF-8, whatever the bytes of the file name. */
static struct json_object *json_text(const char *s)
{
	char *clean = tool_utf8_clean(s);
	struct json_object *o = clean ? json_object_new_string(clean) : NULL;

	free(clean);
	return o;
}

static int print_json(const struct replay *rp, int n_paths, char **paths, const char *summary)
{
	const devcache_stats_t *st = &rp->stats;
	struct json_object *o = json_object_new_object(), *traces = json_object_new_array();

	if (!o || !traces) {
		json_object_put(o);
		json_object_put(traces);
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	for (int i = 0; i < n_paths; i++)
		json_object_array_add(traces, json_text(paths[i]));
	json_object_object_add(o, "device", json_text(rp->device_id));
	json_object_object_add(o, "device_memory",
			       rp->memory ? json_object_new_uint64(rp->memory) : NULL);
	json_object_object_add(o, "traces", traces);
	json_object_object_add(o, "events", json_object_new_uint64(rp->set.n_read));
	json_object_object_add(o, "operations", json_object_new_uint64(rp->operations));
	json_object_object_add(o, "nanoseconds", json_object_new_uint64(rp->ns));
	json_object_object_add(o, "ns_per_op", json_fixed(ns_per_op(rp), 1));
	json_object_object_add(o, "peak_allocated_bytes",
			       json_object_new_int64(st->allocated_bytes[DEVCACHE_POOL_ALL].peak));
	json_object_object_add(o, "peak_reserved_bytes",
			       json_object_new_int64(st->reserved_bytes[DEVCACHE_POOL_ALL].peak));
	json_object_object_add(o, "reserved_per_allocated", json_fixed(ratio(rp), 3));
	json_object_object_add(o, "device_allocations",
			       json_object_new_uint64(st->num_device_alloc));
	json_object_object_add(o, "device_frees", json_object_new_uint64(st->num_device_free));
	json_object_object_add(o, "ooms", json_object_new_uint64(rp->ooms));
	json_object_object_add(o, "retries", json_object_new_uint64(st->num_alloc_retries));
	json_object_object_add(o, "stitched", json_object_new_uint64(st->num_stitches));
	if (summary)
		json_object_object_add(o, "summary", json_text(summary));
	puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
					       JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
	return EXIT_OK;
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
	format_bytes((uint64_t)st->allocated_bytes[DEVCACHE_POOL_ALL].peak, a, sizeof a);
	format_bytes((uint64_t)st->reserved_bytes[DEVCACHE_POOL_ALL].peak, b, sizeof b);
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
		w = tool_width(label[i]) > w ? tool_width(label[i]) : w;
	if (rp->memory) {
		char m[32];

		format_bytes(rp->memory, m, sizeof m);
		/* TRANSLATORS: the device, its memory, and where that size came from:
		   "--memory" or "the trace's device_memory". */
		printf(_("Replay on %s, emulating a device of %s (%s):\n"), rp->device_id, m,
		       rp->memory_from);
	} else {
		printf(_("Replay on %s:\n"), rp->device_id);
	}
	for (size_t i = 0; i < n; i++)
		printf("  %s:%*s %s\n", label[i], (int)(w - tool_width(label[i])), "", v[i]);
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
		tool_error(_("cannot print the summary: %s"), devcache_last_error());
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
		status = print_json(rp, n_paths, paths, summary);
	} else {
		print_text(rp);
		if (rp->summary) {
			putchar('\n');
			fflush(stdout);
			if (devcache_summary(rp->dev, stdout)) {
				tool_error(_("cannot print the summary: %s"),
					   devcache_last_error());
				status = EXIT_RUNTIME;
			}
		}
	}
out:
	free(summary);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		tool_error(_("write error on standard output"));
		status = EXIT_RUNTIME;
	}
	return status;
}

/* ---- the command ----------------------------------------------------------- */

/* The host device gets the memory of the device the trace came from:
 * --memory, else the first trace's device_memory, unless -o sets
 * host_memory itself.  Other devices have their own memory. */
static int emulate(struct tool *t, struct replay *rp)
{
	bool host = strcmp(rp->device, "host") == 0 || strcmp(rp->device, "host:0") == 0;
	char opt[64];

	if (!host) {
		if (rp->memory) {
			tool_error(_("--memory emulates a device on the host: it cannot be used "
				     "with --device %s"),
				   tool_shown(rp->device));
			return tool_try_help();
		}
		return EXIT_OK;
	}
	if (tool_option_given(t, "host_memory")) {
		if (rp->memory) {
			tool_error(_("--memory and -o host_memory both set the host device's "
				     "memory: give one"));
			return tool_try_help();
		}
		return EXIT_OK;
	}
	if (!rp->memory && rp->set.device_memory) {
		rp->memory = rp->set.device_memory;
		rp->memory_from = _("the trace's device_memory");
	}
	if (!rp->memory)
		return EXIT_OK;
	snprintf(opt, sizeof opt, "host_memory:%llu", (unsigned long long)rp->memory);
	if (!tool_add_options(t, opt)) {
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	return EXIT_OK;
}

static void finish(struct replay *rp, devcache_ctx_t *ctx)
{
	for (uint32_t s = 0; s < rp->n_ptrs; s++)
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
	trace_set_destroy(&rp->set);
}

int cmd_replay(struct tool *t, int argc, char **argv)
{
	struct replay *rp = calloc(1, sizeof *rp);
	devcache_ctx_t *ctx = NULL;
	int status;

	if (!rp) {
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	trace_set_init(&rp->set);
	rp->device = "host";
	if ((status = parse_args(t, rp, argc, argv)) >= 0)
		goto out;
	/* The first file is opened before the device: a file that cannot be
	 * read is named first. */
	int rc = trace_set_open(&rp->set, argv[optind], rp->err, sizeof rp->err);
	if (!rc) /* its header, which may say the device's memory */
		rc = trace_set_next(&rp->set, rp->err, sizeof rp->err);
	if (rc) {
		status = trace_failed(rp, rc);
		goto out;
	}
	if ((status = emulate(t, rp)))
		goto out;
	if ((status = tool_open(t, &ctx)))
		goto out;
	if ((status = tool_device(ctx, rp->device, &rp->dev)))
		goto out;
	/* Its own name: "cuda" is "cuda:0". */
	devcache_device_info_t info;
	if (devcache_device_info(rp->dev, &info) == 0)
		snprintf(rp->device_id, sizeof rp->device_id, "%s", info.id);
	else
		snprintf(rp->device_id, sizeof rp->device_id, "%s", rp->device);
	if ((status = run(rp, argc - optind, argv + optind)))
		goto out;
	status = report(rp, argc - optind, argv + optind);
	if (status == EXIT_OK && rp->ooms) {
		/* The last line, for a script and for the eye. */
		if (!rp->json)
			printf(P_("%llu allocation failed for want of memory (exit status 3).\n",
				  "%llu allocations failed for want of memory (exit status 3).\n",
				  rp->ooms),
			       (unsigned long long)rp->ooms);
		status = fflush(stdout) == 0 ? EXIT_OOM : EXIT_RUNTIME;
	}
out:
	finish(rp, ctx);
	free(rp);
	return status;
}
