/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cmd-replay.c - `devcache replay`: runs allocation traces through the caching allocator and reports time, peak memory and device calls.
 *
 * replay-run.c runs them, streamed; a fault in a file stops the replay
 * there, and nothing is reported.
 */
#include "tool.h"

#include <getopt.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "replay-run.h"

struct replay {
	const char *device;
	char device_id[32];
	bool json, summary;
	uint64_t memory;         /* --memory, or the trace's device_memory; 0: none */
	const char *memory_from; /* which of them */
	struct replay_run run;
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

/* Every file; the first one is open already, its first batch read. */
static int run(struct replay *rp, int n, char **paths)
{
	int rc, status;

	for (int i = 0; i < n; i++) {
		if (i > 0 && (rc = trace_set_open(&rp->run.set, paths[i], rp->run.err,
						  sizeof rp->run.err)))
			return replay_trace_failed(&rp->run, rc);
		if ((status = replay_run_file(&rp->run, i == 0)))
			return status;
	}
	if (devcache_stats(rp->run.dev, &rp->stats)) {
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
	return rp->run.operations ? (double)rp->run.ns / (double)rp->run.operations : -1;
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
	json_object_object_add(o, "events", json_object_new_uint64(rp->run.set.n_read));
	json_object_object_add(o, "operations", json_object_new_uint64(rp->run.operations));
	json_object_object_add(o, "nanoseconds", json_object_new_uint64(rp->run.ns));
	json_object_object_add(o, "ns_per_op", json_fixed(ns_per_op(rp), 1));
	json_object_object_add(o, "peak_allocated_bytes",
			       json_object_new_int64(st->allocated_bytes[DEVCACHE_POOL_ALL].peak));
	json_object_object_add(o, "peak_reserved_bytes",
			       json_object_new_int64(st->reserved_bytes[DEVCACHE_POOL_ALL].peak));
	json_object_object_add(o, "reserved_per_allocated", json_fixed(ratio(rp), 3));
	json_object_object_add(o, "device_allocations",
			       json_object_new_uint64(st->num_device_alloc));
	json_object_object_add(o, "device_frees", json_object_new_uint64(st->num_device_free));
	json_object_object_add(o, "ooms", json_object_new_uint64(rp->run.ooms));
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

	snprintf(v[0], sizeof v[0], _("%zu (%llu operations)"), rp->run.set.n_read,
		 (unsigned long long)rp->run.operations);
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
	snprintf(v[7], sizeof v[7], "%llu", (unsigned long long)rp->run.ooms);
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
	rc = devcache_summary(rp->run.dev, f);
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
			if (devcache_summary(rp->run.dev, stdout)) {
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
	if (!rp->memory && rp->run.set.device_memory) {
		rp->memory = rp->run.set.device_memory;
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
	replay_run_destroy(&rp->run);
	if (ctx)
		devcache_close(ctx);
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
	replay_run_init(&rp->run);
	rp->device = "host";
	if ((status = parse_args(t, rp, argc, argv)) >= 0)
		goto out;
	/* The first file is opened before the device: a file that cannot be
	 * read is named first. */
	int rc = trace_set_open(&rp->run.set, argv[optind], rp->run.err, sizeof rp->run.err);
	if (!rc) /* its header, which may say the device's memory */
		rc = trace_set_next(&rp->run.set, rp->run.err, sizeof rp->run.err);
	if (rc) {
		status = replay_trace_failed(&rp->run, rc);
		goto out;
	}
	if ((status = emulate(t, rp)))
		goto out;
	if ((status = tool_open(t, &ctx)))
		goto out;
	if ((status = tool_device(ctx, rp->device, &rp->run.dev)))
		goto out;
	/* Its own name: "cuda" is "cuda:0". */
	devcache_device_info_t info;
	if (devcache_device_info(rp->run.dev, &info) == 0)
		snprintf(rp->device_id, sizeof rp->device_id, "%s", info.id);
	else
		snprintf(rp->device_id, sizeof rp->device_id, "%s", rp->device);
	if ((status = run(rp, argc - optind, argv + optind)))
		goto out;
	status = report(rp, argc - optind, argv + optind);
	if (status == EXIT_OK && rp->run.ooms) {
		/* The last line, for a script and for the eye. */
		if (!rp->json)
			printf(P_("%llu allocation failed for want of memory (exit status 3).\n",
				  "%llu allocations failed for want of memory (exit status 3).\n",
				  rp->run.ooms),
			       (unsigned long long)rp->run.ooms);
		status = fflush(stdout) == 0 ? EXIT_OOM : EXIT_RUNTIME;
	}
out:
	finish(rp, ctx);
	free(rp);
	return status;
}
