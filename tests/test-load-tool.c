/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-load-tool.c - devcache load, dump and demo: their output, the bytes they produce, and their exit statuses. */
#include "tap.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <devcache.h>

#include "spawn.h"
#include "model-writer.h"

#include <json-c/json.h>

#define TENSOR "model.layers.0.mlp.up_proj.weight"
#define TENSOR_SIZE 256 /* F16 [8, 16] */

static struct result r;
static char dir[256], model[512];
/* The test backend, through the environment or the global -o. */
static char good_options[4200], env_options[4300];

#define RUN(env, ...) RUN_TOOL(env, __VA_ARGS__)

static const char *const plain[] = {"LANGUAGE=C", "LC_ALL=C", NULL};
static const char *const good[] = {"LANGUAGE=C", "LC_ALL=C", env_options, NULL};

/* A tensor's bytes: never 0, so that what the tool prints on standard output
 * can be read back as a string. */
static unsigned char tensor_byte(size_t i)
{
	return (unsigned char)(1 + (i * 7) % 255);
}

/* The first tensor's bytes are 0x3f, the second's tensor_byte(). */
static void fill(void *user, size_t i, uint64_t off, unsigned char *buf, size_t n)
{
	(void)user;
	for (size_t j = 0; j < n; j++)
		buf[j] = i == 0 ? 0x3f : tensor_byte((size_t)off + j);
}

/* Two tensors; TENSOR comes second, so its bytes are not at the data's start. */
static void write_model(const char *path)
{
	static const uint64_t norm_shape[] = {4}, shape[] = {8, 16};
	static const struct mw_tensor t[] = {{"model.norm.weight", 16, 0, "F32", 1, norm_shape},
					     {TENSOR, TENSOR_SIZE, 0, "F16", 2, shape}};
	const struct mw_opts o = {.fill = fill, .metadata_json = "{\"format\":\"pt\"}",
				  .flags = MW_NO_PAD};

	mw_safetensors_opts(path, t, 2, &o);
}

static void path_of(char *buf, size_t size, const char *name)
{
	snprintf(buf, size, "%s/%s", dir, name);
}

static size_t count(const char *haystack, const char *needle)
{
	size_t n = 0;

	for (const char *p = haystack; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

static void assert_tensor_bytes(const unsigned char *bytes)
{
	for (size_t i = 0; i < TENSOR_SIZE; i++)
		if (bytes[i] != tensor_byte(i))
			fail_msg("byte %zu is %u, not %u", i, bytes[i], tensor_byte(i));
}

static int setup(void **state)
{
	(void)state;
	if (test_tmpdir_make(dir, sizeof dir, "load-tool"))
		return -1;
	path_of(model, sizeof model, "model.safetensors");
	write_model(model);
	snprintf(good_options, sizeof good_options, "backend_path:%s,backends:good",
		 test_env("TEST_MODULES"));
	snprintf(env_options, sizeof env_options, "DEVCACHE_OPTIONS=%s", good_options);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return test_tmpdir_remove(dir);
}

static void help_lists_the_commands(void **state)
{
	(void)state;
	RUN(plain, "--help");
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "  load FILE...  ");
	assert_contains(r.out, "  dump FILE TENSOR  ");
	assert_contains(r.out, "  demo  ");
	RUN(plain, "load", "--help");
	assert_int_equal(r.status, 0);
	assert_contains(r.out,
			"Usage: devcache load [--device D] [--repeat N] [--writable] [--align N]\n"
			"                     [--json] MODEL...\n");
	RUN(plain, "dump", "--help");
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "Usage: devcache dump [--device D] [--output OUT] FILE TENSOR");
	RUN(plain, "demo", "--help");
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "Usage: devcache demo [--device D] [--keep]");
}

static void load_on_the_host(void **state)
{
	char line[600];

	(void)state;
	RUN(plain, "load", model);
	assert_int_equal(r.status, 0);
	/* Standard error is not a terminal here: no progress bar. */
	assert_string_equal(r.err, "");
	/* What follows the path goes under it where the line would not fit. */
	snprintf(line, sizeof line, "%s on host:", model);
	assert_contains(r.out, line);
	/* Mapped in place: nothing read, so no throughput to speak of. */
	assert_contains(r.out, "miss in ");
	assert_contains(r.out, " ms: mapped in place (zero copy), nothing read\n");
	assert_null(strstr(r.out, "/s"));
	assert_contains(r.out, "Peak RSS: ");
	assert_contains(r.out, "Model cache\n");
	/* The allocator has no part in a host load. */
	assert_null(strstr(r.out, "memory summary"));

	RUN(plain, "load", "--repeat", "3", model);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.err, "");
	assert_int_equal(count(r.out, line), 3);
	assert_int_equal(count(r.out, "miss in "), 1);
	assert_int_equal(count(r.out, " hit in "), 2);
	assert_contains(r.out, "\n  hits       2 (0 from RAM)\n");
}

static void load_on_a_device(void **state)
{
	char line[600];

	(void)state;
	RUN(good, "load", "--device", "good:0", model, "-n", "2");
	assert_int_equal(r.status, 0);
	assert_string_equal(r.err, "");
	snprintf(line, sizeof line, "%s on good:0:", model);
	assert_int_equal(count(r.out, line), 2);
	assert_int_equal(count(r.out, "miss in "), 1);
	/* 272 bytes read and uploaded, in B: sizes are given in units that fit. */
	assert_contains(r.out, ": read 272 B, uploaded 272 B (");
	assert_int_equal(count(r.out, " hit in "), 1);
	assert_contains(r.out, "Peak RSS: ");
	assert_contains(r.out, "good:0     ");
	assert_contains(r.out, "libdevcache memory summary, device ID good:0");
	assert_contains(r.out, "| Allocated memory ");
}

static void load_writable(void **state)
{
	(void)state;
	RUN(plain, "load", "--writable", model);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.err, "");
	assert_contains(r.out, "miss in ");
	assert_contains(r.out, " (writable)");
}

static void load_failures_exit_1(void **state)
{
	char bad[512], missing[512];

	(void)state;
	path_of(bad, sizeof bad, "bad.safetensors");
	mw_text(bad, "not a model at all");
	RUN(plain, "load", bad);
	assert_int_equal(r.status, 1);
	assert_contains(r.err, "bad.safetensors: neither a safetensors nor a GGUF file");
	/* Its error and nothing after it: no summary of an empty cache. */
	assert_string_equal(r.out, "");
	path_of(missing, sizeof missing, "missing.safetensors");
	RUN(plain, "load", missing);
	assert_int_equal(r.status, 1);
	assert_contains(r.err, "missing.safetensors: cannot open");
	/* The good file is still loaded; the status says one failed. */
	RUN(plain, "load", missing, model);
	assert_int_equal(r.status, 1);
	assert_contains(r.out, "miss in ");
}

static void load_usage_errors_exit_2(void **state)
{
	(void)state;
	RUN(plain, "load");
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "load: no file given");
	RUN(plain, "load", "--repeat", "0", model);
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "load: invalid repeat count '0'");
	RUN(plain, "load", "--repeat", "-1", model);
	assert_int_equal(r.status, 2);
	RUN(plain, "load", "-n", "3x", model);
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "invalid repeat count '3x'");
	RUN(plain, "load", "--frobnicate", model);
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "Try 'devcache load --help'");
	RUN(plain, "load", "--device", "nodev:0", model);
	assert_int_equal(r.status, 1);
	assert_contains(r.err, "no device 'nodev:0'");
	assert_string_equal(r.out, "");
	RUN(good, "load", "--device", "good:7", model);
	assert_int_equal(r.status, 1);
	assert_contains(r.err, "good:7");
}

/* The one JSON document devcache load --json prints. */
static struct json_object *parse_doc(const char *text)
{
	struct json_tokener *tok = json_tokener_new();
	struct json_object *doc;

	assert_non_null(tok);
	doc = json_tokener_parse_ex(tok, text, (int)strlen(text));
	if (!doc || json_tokener_get_parse_end(tok) + 1 < strlen(text))
		fail_msg("not one JSON document: %s", text);
	json_tokener_free(tok);
	return doc;
}

static struct json_object *member(struct json_object *o, const char *key)
{
	struct json_object *v;

	if (!json_object_object_get_ex(o, key, &v))
		fail_msg("no \"%s\" in %s", key, json_object_to_json_string(o));
	return v;
}

static void load_as_json(void **state)
{
	char missing[512];

	(void)state;
	path_of(missing, sizeof missing, "missing.safetensors");
	RUN(good, "load", "--json", "--device", "good:0", "-n", "2", model, missing);
	assert_int_equal(r.status, 1);
	assert_contains(r.err, "missing.safetensors: cannot open");
	struct json_object *doc = parse_doc(r.out), *loads = member(doc, "loads");
	assert_string_equal(json_object_get_string(member(doc, "device")), "good:0");
	assert_int_equal(json_object_array_length(loads), 2);
	struct json_object *miss = json_object_array_get_idx(loads, 0),
			   *hit = json_object_array_get_idx(loads, 1);
	assert_false(json_object_get_boolean(member(miss, "hit")));
	assert_int_equal(json_object_get_uint64(member(miss, "bytes_read")), 272);
	assert_int_equal(json_object_get_uint64(member(miss, "bytes_uploaded")), 272);
	assert_int_equal(json_object_get_uint64(member(miss, "device_bytes")), 272);
	assert_int_equal(json_object_get_uint64(member(miss, "host_bytes")), 0);
	assert_true(json_object_get_double(member(miss, "seconds")) >= 0);
	assert_true(json_object_get_boolean(member(hit, "hit")));
	assert_int_equal(json_object_get_uint64(member(hit, "bytes_read")), 0);
	struct json_object *fails = member(doc, "failures");
	assert_int_equal(json_object_array_length(fails), 1);
	assert_contains(json_object_get_string(member(json_object_array_get_idx(fails, 0), "error")),
			"cannot open");
	assert_int_equal(json_object_get_uint64(member(member(doc, "cache"), "misses")), 1);
	assert_true(json_object_get_uint64(member(doc, "peak_rss")) > 0);
	/* What the cache holds at the end, model by model. */
	struct json_object *held = member(member(doc, "cache"), "cached_models");
	assert_int_equal(json_object_array_length(held), 1);
	struct json_object *one = json_object_array_get_idx(held, 0);
	assert_string_equal(json_object_get_string(member(one, "model")), model);
	assert_string_equal(json_object_get_string(member(one, "device")), "good:0");
	assert_string_equal(json_object_get_string(member(one, "where")), "device");
	assert_int_equal(json_object_get_uint64(member(one, "device_bytes")), 272);
	assert_int_equal(json_object_get_uint64(member(one, "hits")), 1);
	assert_int_equal(json_object_get_int(member(one, "locks")), 0); /* released */
	json_object_put(doc);
}

static const struct mw_tensor four[] = {
	{"t0", 100000, 0}, {"t1", 100000, 1}, {"t2", 100000, 1}, {"t3", 100000, 2}};

static void load_a_set_partially(void **state)
{
	char sub[512], index[512], opts[4400], line[600], out[512];

	(void)state;
	path_of(sub, sizeof sub, "set");
	assert_int_equal(mkdir(sub, 0755), 0);
	mw_sharded(sub, "big", four, 4, 3, 1, 0, index, sizeof index);
	/* Too big for a 300K budget: an error that says what would do. */
	snprintf(opts, sizeof opts, "DEVCACHE_OPTIONS=%s,max_cache_vram:300K", good_options);
	const char *const tight[] = {"LANGUAGE=C", "LC_ALL=C", opts, NULL};
	RUN(tight, "load", "--device", "good:0", index);
	assert_int_equal(r.status, 1);
	assert_contains(r.err, "partial_loading would load what fits");
	assert_string_equal(r.out, "");
	snprintf(opts, sizeof opts, "DEVCACHE_OPTIONS=%s,max_cache_vram:300K,partial_loading:true",
		 good_options);
	RUN(tight, "load", "--device", "good:0", index);
	assert_int_equal(r.status, 0);
	snprintf(line, sizeof line, "%s on good:0:", index);
	assert_contains(r.out, line);
	assert_contains(r.out, "\n  293.0 KiB of 390.6 KiB on good:0, the rest on the host\n");
	assert_contains(r.out, "(partial: 293.0 KiB of 390.6 KiB on good:0)");
	/* dump gives the bytes of a tensor wherever it is. */
	for (int i = 0; i < 4; i++) {
		char name[16];
		snprintf(name, sizeof name, "t%d", i);
		path_of(out, sizeof out, "t.bin");
		RUN(tight, "dump", "--device", "good:0", index, name, "-O", out);
		assert_int_equal(r.status, 0);
		unsigned char *bytes = (unsigned char *)test_slurp_must(out);
		mw_check(name, bytes, 100000, 1);
		free(bytes);
	}
	/* The folder holding the set loads the same. */
	RUN(tight, "load", "--device", "good:0", sub);
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "  293.0 KiB of 390.6 KiB on good:0, the rest on the host\n");
}

static void dump_to_a_file(void **state)
{
	char out[512];
	unsigned char *bytes;
	struct stat st;

	(void)state;
	path_of(out, sizeof out, "host.bin");
	RUN(plain, "dump", model, TENSOR, "--output", out);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.err, "");
	assert_string_equal(r.out, "");
	assert_int_equal(stat(out, &st), 0);
	assert_int_equal(st.st_size, TENSOR_SIZE);
	bytes = (unsigned char *)test_slurp_must(out);
	assert_tensor_bytes(bytes);
	free(bytes);

	/* The global -o sets tunables, the command's names the output. */
	path_of(out, sizeof out, "good.bin");
	RUN(plain, "-o", good_options, "dump", "--device", "good:0", model, TENSOR, "-O", out);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.err, "");
	assert_int_equal(stat(out, &st), 0);
	assert_int_equal(st.st_size, TENSOR_SIZE);
	bytes = (unsigned char *)test_slurp_must(out);
	assert_tensor_bytes(bytes);
	free(bytes);
}

static void dump_to_standard_output(void **state)
{
	(void)state;
	RUN(plain, "dump", model, TENSOR);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.err, "");
	assert_int_equal(strlen(r.out), TENSOR_SIZE);
	assert_tensor_bytes((const unsigned char *)r.out);
	RUN(good, "dump", model, TENSOR, "-d", "good:0", "-O", "-");
	assert_int_equal(r.status, 0);
	assert_int_equal(strlen(r.out), TENSOR_SIZE);
	assert_tensor_bytes((const unsigned char *)r.out);
}

static void dump_errors(void **state)
{
	char out[512];

	(void)state;
	path_of(out, sizeof out, "none.bin");
	RUN(plain, "dump", model, "model.no_such.weight", "-O", out);
	assert_int_equal(r.status, 1);
	assert_contains(r.err, "model.safetensors: no tensor named 'model.no_such.weight'");
	assert_int_equal(access(out, F_OK), -1);
	RUN(good, "dump", "-d", "good:0", model, "nope");
	assert_int_equal(r.status, 1);
	assert_contains(r.err, "no tensor named 'nope'");
	RUN(plain, "dump", model);
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "dump: expected FILE and TENSOR");
	RUN(plain, "dump", model, TENSOR, "extra");
	assert_int_equal(r.status, 2);
	RUN(plain, "dump", "--frobnicate", model, TENSOR);
	assert_int_equal(r.status, 2);
	RUN(plain, "dump", "--device", "nodev:0", model, TENSOR);
	assert_int_equal(r.status, 1);
	assert_contains(r.err, "no device 'nodev:0'");
	path_of(out, sizeof out, "missing.safetensors");
	RUN(plain, "dump", out, TENSOR);
	assert_int_equal(r.status, 1);
	assert_contains(r.err, "missing.safetensors: cannot open");
}

/* The entries of dir other than the test's own files. */
static size_t demo_dirs(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	size_t n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		if (strncmp(e->d_name, "devcache-demo-", 14) == 0)
			n++;
	closedir(d);
	return n;
}

static void demo_runs_and_cleans_up(void **state)
{
	char tmpdir[300];
	const char *env[] = {"LANGUAGE=C", "LC_ALL=C", tmpdir, NULL};

	(void)state;
	snprintf(tmpdir, sizeof tmpdir, "TMPDIR=%s", dir);
	RUN(env, "demo");
	assert_int_equal(r.status, 0);
	assert_string_equal(r.err, "");
	assert_contains(r.out, "39 tensors");
	assert_contains(r.out, "(miss)");
	assert_contains(r.out, "(hit)");
	assert_contains(r.out, ": identical.\n");
	assert_contains(r.out, "Model cache\n");
	assert_contains(r.out, "Released the model and removed ");
	assert_int_equal(demo_dirs(), 0);
}

static void demo_keeps_its_directory(void **state)
{
	char tmpdir[300], kept[600], file[700], *end;
	const char *env[] = {"LANGUAGE=C", "LC_ALL=C", tmpdir, NULL};
	devcache_model_file_t *mf;

	(void)state;
	snprintf(tmpdir, sizeof tmpdir, "TMPDIR=%s", dir);
	RUN(env, "demo", "--keep");
	assert_int_equal(r.status, 0);
	assert_contains(r.out, ": identical.\n");
	const char *p = strstr(r.out, "Kept ");
	assert_non_null(p);
	snprintf(kept, sizeof kept, "%s", p + 5);
	assert_non_null(end = strstr(kept, ".\n"));
	*end = '\0';
	assert_int_equal(strncmp(kept, dir, strlen(dir)), 0);
	assert_int_equal(demo_dirs(), 1);
	/* What it leaves is a model file the library reads. */
	snprintf(file, sizeof file, "%s/model.safetensors", kept);
	assert_int_equal(devcache_model_file_open(file, &mf), 0);
	assert_int_equal(devcache_model_file_tensor_count(mf), 39);
	devcache_model_file_close(mf);
	assert_int_equal(test_tmpdir_remove(kept), 0);
	assert_int_equal(demo_dirs(), 0);
}

static void demo_on_a_device(void **state)
{
	char tmpdir[300];
	const char *env[] = {"LANGUAGE=C", "LC_ALL=C", tmpdir, env_options, NULL};

	(void)state;
	snprintf(tmpdir, sizeof tmpdir, "TMPDIR=%s", dir);
	RUN(env, "demo", "--device", "good:0");
	assert_int_equal(r.status, 0);
	assert_string_equal(r.err, "");
	assert_contains(r.out, "First load on good:0: ");
	assert_contains(r.out, "staging buffers");
	assert_contains(r.out, "copied back from good:0");
	assert_contains(r.out, ": identical.\n");
	assert_int_equal(demo_dirs(), 0);
}

static void demo_errors(void **state)
{
	char tmpdir[300];
	const char *env[] = {"LANGUAGE=C", "LC_ALL=C", tmpdir, NULL};

	(void)state;
	snprintf(tmpdir, sizeof tmpdir, "TMPDIR=%s", dir);
	RUN(env, "demo", "extra");
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "demo: unexpected argument 'extra'");
	RUN(env, "demo", "--device", "nodev:0");
	assert_int_equal(r.status, 1);
	assert_contains(r.err, "no device 'nodev:0'");
	assert_int_equal(demo_dirs(), 0);
	snprintf(tmpdir, sizeof tmpdir, "TMPDIR=%s/no-such-dir", dir);
	RUN(env, "demo");
	assert_int_equal(r.status, 1);
	assert_contains(r.err, "demo: cannot create a directory in ");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(help_lists_the_commands),
		cmocka_unit_test_setup_teardown(load_on_the_host, setup, teardown),
		cmocka_unit_test_setup_teardown(load_on_a_device, setup, teardown),
		cmocka_unit_test_setup_teardown(load_writable, setup, teardown),
		cmocka_unit_test_setup_teardown(load_failures_exit_1, setup, teardown),
		cmocka_unit_test_setup_teardown(load_as_json, setup, teardown),
		cmocka_unit_test_setup_teardown(load_a_set_partially, setup, teardown),
		cmocka_unit_test_setup_teardown(load_usage_errors_exit_2, setup, teardown),
		cmocka_unit_test_setup_teardown(dump_to_a_file, setup, teardown),
		cmocka_unit_test_setup_teardown(dump_to_standard_output, setup, teardown),
		cmocka_unit_test_setup_teardown(dump_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(demo_runs_and_cleans_up, setup, teardown),
		cmocka_unit_test_setup_teardown(demo_keeps_its_directory, setup, teardown),
		cmocka_unit_test_setup_teardown(demo_on_a_device, setup, teardown),
		cmocka_unit_test_setup_teardown(demo_errors, setup, teardown),
	};

	return RUN_TAP(tests);
}
