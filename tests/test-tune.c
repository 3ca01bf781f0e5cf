/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-tune.c - `devcache tune` on traces whose answer is known: the setting recommended, the device emulated, the table, JSON, the errors and the exit statuses. */
#include "tap.h"

#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "spawn.h"

static struct result r;
TEST_TMPDIR_FIXTURE("tune");

static const char *const plain[] = {"LANGUAGE=C", "LC_ALL=C", NULL};

#define RUN(...) RUN_TOOL(plain, __VA_ARGS__)
#define MiB (1ull << 20)

static const char *trace_file(const char *name, const char *text)
{
	return spawn_file(dir, name, text);
}

/* A cached 60 MiB block that a 30 MiB request splits: the 60 MiB asked
 * again no longer fits on a 100 MiB device.  max_split_size_mb:40 keeps
 * the large block whole, expandable segments give the split half back;
 * roundup_power2_divisions changes nothing.  The OOM is recorded, as
 * trace_from_torch writes it. */
static const char *split_trace(void)
{
	char text[1024];

	snprintf(text, sizeof text,
		 "# device: cuda:0\n"
		 "# device_memory: %llu\n"
		 "+ 1 %llu\n- 1\n+ 2 %llu\n"
		 "# oom: PyTorch could not allocate %llu bytes; device_free=0\n"
		 "+ 3 %llu\n- 3\n- 2\n",
		 100 * MiB, 60 * MiB, 30 * MiB, 60 * MiB, 60 * MiB);
	return trace_file("split.trace", text);
}

/* JSON output, parsed; the test owns it. */
static struct json_object *parsed(const char *out)
{
	struct json_object *o = json_tokener_parse(out);

	if (!o)
		fail_msg("not JSON:\n%s", out);
	return o;
}

static struct json_object *key(struct json_object *o, const char *name)
{
	struct json_object *v;

	if (!json_object_object_get_ex(o, name, &v))
		fail_msg("no key '%s' in %s", name, json_object_to_json_string(o));
	return v;
}

/* The row whose options are these. */
static struct json_object *row(struct json_object *o, const char *options)
{
	struct json_object *rows = key(o, "settings");

	for (size_t i = 0; i < json_object_array_length(rows); i++) {
		struct json_object *s = json_object_array_get_idx(rows, i);

		if (strcmp(json_object_get_string(key(s, "options")), options) == 0)
			return s;
	}
	fail_msg("no row '%s'", options);
	return NULL;
}

/* Of two settings, the one that avoids the OOM is recommended, and the
 * defaults' OOM is said to be the recorded one. */
static void recommends_what_avoids_the_oom(void **state)
{
	const char *path = split_trace();

	(void)state;
	RUN("tune", "--no-grid", "--try", "roundup_power2_divisions:4", "--try",
	    "max_split_size_mb:40", path);
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "Tuning for a device of 100.0 MiB (the trace's device_memory).\n"
			       "6 events, 3 settings.\n");
	assert_contains(r.out, "The trace recorded 1 OOM; a setting avoids it where 'recorded' is "
			       "0.\n  event 4: 60.0 MiB\n");
	assert_contains(r.out, "\nRecommended: PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:40\n"
			       "  avoids the OOM; needs 90.0 MiB instead of 120.0 MiB.\n");
	/* The recommended row first, then by OOMs. */
	const char *first = strstr(r.out, "\n1 "), *second = strstr(r.out, "\n2 ");
	assert_non_null(first);
	assert_non_null(second);
	assert_non_null(strstr(first, "   max_split_size_mb:40\n"));
	assert_true(strstr(first, "   max_split_size_mb:40\n") < second);
	/* Expandable segments avoid it too, with the whole device (their
	 * pages are mapped 20 MiB at a time, as PyTorch's are): recommended
	 * where max_split_size_mb is not tried, second where it is. */
	RUN("tune", "--no-grid", "--try", "roundup_power2_divisions:4", "--try",
	    "expandable_segments:true", path);
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "Recommended: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:true\n"
			       "  avoids the OOM; needs 100.0 MiB instead of 120.0 MiB.\n");
	RUN("tune", "--no-grid", "--try", "expandable_segments:true", "--try",
	    "max_split_size_mb:40", path);
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "Recommended: PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:40\n");
}

/* Where no PyTorch setting avoids the OOM: said plainly, with the smallest
 * device, and exit status 3. */
static void says_when_nothing_avoids_it(void **state)
{
	char text[256];

	(void)state;
	snprintf(text, sizeof text, "# device_memory: %llu\n+ 1 %llu\n+ 2 %llu\n- 1\n- 2\n",
		 100 * MiB, 60 * MiB, 60 * MiB);
	const char *path = trace_file("toobig.trace", text);

	RUN("tune", path);
	assert_int_equal(r.status, 3);
	assert_contains(r.out, "No PyTorch setting avoids the OOMs on a device of 100.0 MiB.\n"
			       "The smallest device that runs the trace is 120.0 MiB, with ");
	assert_not_contains(r.out, "Recommended");
	/* libdevcache's own row is there, marked, and never recommended. */
	assert_contains(r.out, "expandable_segments:true,expandable_stitching:true  (libdevcache "
			       "only, not PyTorch)");
}

/* A trace that fits: the defaults are the answer.  Its 3 MB request takes
 * a 20 MiB segment, as PyTorch's does, and the 1000 bytes a 2 MiB one. */
static void the_defaults_where_they_fit(void **state)
{
	const char *path = trace_file("fits.trace", "+ 1 1000\n+ 2 3000000\n- 1\n- 2\n");

	(void)state;
	RUN("tune", "--memory", "64M", path);
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "Tuning for a device of 64.0 MiB (--memory)");
	assert_contains(r.out, "Recommended: the settings you gave (no PyTorch option to add)\n"
			       "  no OOM with these settings; the smallest device that runs the "
			       "trace is 22.0 MiB.\n");
	assert_not_contains(r.out, "The trace recorded");
	/* No size in the trace, none given: this machine's, with a warning. */
	RUN("tune", "--no-grid", path);
	assert_int_equal(r.status, 0);
	assert_contains(r.err, "says nothing of its device's memory: tuning for this machine's; "
			       "give the GPU's with --memory");
	assert_contains(r.out, "(this machine's memory)");
}

/* Every row of the grid, in JSON; the recommended string is PyTorch's. */
static void json_and_the_grid(void **state)
{
	const char *path = split_trace();

	(void)state;
	RUN("tune", "--json", "--jobs", "3", path);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.err, "");
	struct json_object *o = parsed(r.out);
	assert_int_equal(json_object_get_uint64(key(o, "device_memory")), 100 * MiB);
	assert_string_equal(json_object_get_string(key(o, "device_memory_from")),
			    "the trace's device_memory");
	assert_int_equal(json_object_get_int(key(o, "events")), 6);
	assert_int_equal(json_object_get_int(key(o, "recorded_ooms")), 1);
	struct json_object *ev = json_object_array_get_idx(key(o, "recorded_oom_events"), 0);
	assert_non_null(ev);
	assert_int_equal(json_object_get_int(key(ev, "event")), 4);
	assert_int_equal(json_object_get_uint64(key(ev, "size")), 60 * MiB);
	/* The defaults, each of PyTorch's settings, combinations, and ours. */
	assert_true(json_object_array_length(key(o, "settings")) >= 12);
	struct json_object *d = row(o, "");
	assert_int_equal(json_object_get_int(key(d, "ooms")), 1);
	assert_int_equal(json_object_get_int(key(d, "recorded_ooms_failed")), 1);
	assert_int_equal(json_object_get_uint64(key(d, "smallest_device_bytes")), 120 * MiB);
	assert_true(json_object_get_boolean(key(d, "pytorch")));
	struct json_object *e = row(o, "expandable_segments:true");
	assert_int_equal(json_object_get_int(key(e, "ooms")), 0);
	assert_string_equal(json_object_get_string(key(e, "pytorch_cuda_alloc_conf")),
			    "expandable_segments:True");
	struct json_object *ours = row(o, "expandable_segments:true,expandable_stitching:true");
	assert_false(json_object_get_boolean(key(ours, "pytorch")));
	assert_true(json_object_is_type(key(ours, "pytorch_cuda_alloc_conf"), json_type_null));
	/* max_split_size_mb from the trace's own sizes: its 60 MiB requests. */
	row(o, "max_split_size_mb:60");
	const char *rec = json_object_get_string(key(o, "recommended"));
	assert_non_null(rec);
	assert_non_null(strstr(key(o, "why") ? json_object_get_string(key(o, "why")) : "",
			       "avoids the OOM"));
	/* Recommended: a row with no OOM, and PyTorch's spelling. */
	assert_null(strstr(rec, "stitching"));
	json_object_put(o);
}

/* A setting of libdevcache's own from --try is marked, never recommended. */
static void try_rows_of_libdevcache(void **state)
{
	const char *path = split_trace();

	(void)state;
	RUN("tune", "--no-grid", "--json", "--try", "expandable_segments:true,thread_cache:false",
	    path);
	struct json_object *o = parsed(r.out);
	struct json_object *t = row(o, "expandable_segments:true,thread_cache:false");
	assert_false(json_object_get_boolean(key(t, "pytorch")));
	assert_int_equal(json_object_get_int(key(t, "ooms")), 0);
	assert_true(json_object_is_type(key(o, "recommended"), json_type_null));
	assert_int_equal(r.status, 3);
	json_object_put(o);
}

/* PyTorch's settings are replayed as PyTorch runs them: its expandable
 * segments cannot give back the pages of 9 MiB holes (it maps 20 MiB at a
 * time), where libdevcache's stitching serves the request. */
static void pytorch_semantics_for_pytorch_rows(void **state)
{
	char text[1024];
	size_t n = (size_t)snprintf(text, sizeof text, "# device_memory: %llu\n", 100 * MiB);

	(void)state;
	for (int i = 1; i <= 10; i++)
		n += (size_t)snprintf(text + n, sizeof text - n, "+ %d %llu\n", i, 9 * MiB);
	for (int i = 1; i <= 10; i += 2)
		n += (size_t)snprintf(text + n, sizeof text - n, "- %d\n", i);
	snprintf(text + n, sizeof text - n, "+ 100 %llu\n- 100\n", 40 * MiB);
	const char *path = trace_file("holes.trace", text);

	RUN("tune", "--no-grid", "--json", "--try", "expandable_segments:true", "--try",
	    "expandable_segments:true,expandable_stitching:true", path);
	struct json_object *o = parsed(r.out);
	assert_int_equal(json_object_get_int(key(row(o, "expandable_segments:true"), "ooms")), 1);
	struct json_object *ours = row(o, "expandable_segments:true,expandable_stitching:true");
	assert_int_equal(json_object_get_int(key(ours, "ooms")), 0);
	assert_false(json_object_get_boolean(key(ours, "pytorch")));
	assert_true(json_object_is_type(key(o, "recommended"), json_type_null));
	assert_int_equal(r.status, 3);
	json_object_put(o);
}

static void errors(void **state)
{
	const char *path = split_trace();

	(void)state;
	RUN("tune");
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "devcache tune: no trace file given");
	RUN("tune", path, path);
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "one trace at a time");
	RUN("tune", "--memory", "lots", path);
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "--memory: 'lots' is not a size of 1M or more");
	RUN("tune", "--memory", "1000", path);
	assert_int_equal(r.status, 2);
	RUN("tune", "--jobs", "0", path);
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "--jobs: '0' is not a number from 1 to 256");
	RUN("tune", "--try", "", path);
	assert_int_equal(r.status, 2);
	RUN("tune", "-o", "host_memory:1G", path);
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "-o host_memory: the device's memory is --memory here");
	RUN("tune", "--memory", "1G", "--device", "cuda:0", path);
	assert_int_equal(r.status, 2);
	RUN("tune", "--bogus", path);
	assert_int_equal(r.status, 2);
	/* A tunable that does not exist: every setting would fail; said once. */
	RUN("tune", "--no-grid", "--try", "max_split_sz:40", path);
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "did you mean 'max_split_size_mb'?");
	/* Bad and missing traces. */
	RUN("tune", trace_file("bad.trace", "+ 1\n"));
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "bad.trace:1:");
	RUN("tune", "/nonexistent/t.trace");
	assert_int_equal(r.status, 2);
	RUN("tune", "--help");
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "Usage: devcache tune [--memory SIZE] [--try OPTIONS]... [--json] "
			       "TRACE\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(recommends_what_avoids_the_oom),
		cmocka_unit_test(says_when_nothing_avoids_it),
		cmocka_unit_test(the_defaults_where_they_fit),
		cmocka_unit_test(json_and_the_grid),
		cmocka_unit_test(try_rows_of_libdevcache),
		cmocka_unit_test(pytorch_semantics_for_pytorch_rows),
		cmocka_unit_test(errors),
	};

	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, tmpdir_setup, tmpdir_teardown);
}
