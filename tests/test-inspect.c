/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-inspect.c - devcache inspect: the table, --json, --full, and its exit statuses for bad files and bad usage. */
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <devcache.h>

#include "spawn.h"
#include "model-writer.h"

#include <json-c/json.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static struct result r;
TEST_TMPDIR_FIXTURE("inspect");

#define RUN(...) RUN_TOOL(plain, __VA_ARGS__)

static const char *const plain[] = {"LANGUAGE=C", "LC_ALL=C", NULL};

/* GGUF v3: general.architecture = "llama", one F32 tensor of 4 elements. */
static void write_gguf(const char *path)
{
	static const uint64_t ne[] = {4};
	static const struct mw_kv kv[] = {{"general.architecture", MW_STRING, 0, "llama"}};
	static const struct mw_tensor t[] = {{"token_embd.weight", 16, 0, "F32", 1, ne}};

	mw_gguf(path, kv, 1, t, 1, 0);
}

static void path_of(char *buf, size_t size, const char *name)
{
	snprintf(buf, size, "%s/%s", dir, name);
}

static void lists_a_safetensors_file(void **state)
{
	static const uint64_t shape[] = {2, 3};
	static const struct mw_tensor t[] = {{"model.embed.weight", 12, 0, "F16", 2, shape},
					     {"model.norm", 4, 0, "F32", 0, NULL}};
	const struct mw_opts o = {.metadata_json = "{\"format\":\"pt\"}", .flags = MW_NO_PAD};
	char path[512];

	(void)state;
	path_of(path, sizeof path, "model.safetensors");
	mw_safetensors_opts(path, t, 2, &o);
	RUN("inspect", path);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.err, "");
	assert_contains(r.out, "model.safetensors: safetensors, ");
	assert_contains(r.out, "1 metadata entry, 2 tensors, data from byte ");
	assert_contains(r.out, "  format = \"pt\"\n");
	assert_contains(r.out, "model.embed.weight  F16    [2, 3]");
	assert_contains(r.out, "model.norm          F32    []");
	assert_contains(r.out, "2 tensors, 16 B of data");
}

static void lists_a_gguf_file_as_json(void **state)
{
	char path[512];

	(void)state;
	path_of(path, sizeof path, "model.gguf");
	write_gguf(path);
	RUN("inspect", "--json", path);
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "\"format\":\"gguf\",\"version\":3");
	assert_contains(r.out, "\"metadata\":{\"general.architecture\":\"llama\"}");
	assert_contains(r.out, "{\"name\":\"token_embd.weight\",\"dtype\":\"F32\",\"shape\":[4],"
			       "\"offset\":");
	assert_contains(r.out, "\"size\":16,\"shard\":0}");
	RUN("inspect", path);
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "model.gguf: GGUF v3, ");
}

static void cuts_long_values_unless_full(void **state)
{
	char path[512], meta[1024], value[301];

	(void)state;
	memset(value, 'x', 300);
	value[300] = '\0';
	snprintf(meta, sizeof meta, "{\"long\":\"%s\"}", value);
	path_of(path, sizeof path, "long.safetensors");
	mw_safetensors_opts(path, NULL, 0, &(struct mw_opts){.metadata_json = meta, .flags = MW_NO_PAD});
	RUN("inspect", path);
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "xxx...\n");
	assert_contains(r.out, "(long values cut; --full prints them whole)");
	assert_null(strstr(r.out, value));
	RUN("inspect", "--full", path);
	assert_contains(r.out, value);
}

static void a_bad_file_is_named_and_exits_1(void **state)
{
	char bad[512], good[512];

	(void)state;
	path_of(bad, sizeof bad, "bad.bin");
	mw_text(bad, "not a model at all");
	path_of(good, sizeof good, "good.gguf");
	write_gguf(good);
	/* The good one is still listed; the status says one failed. */
	RUN("inspect", bad, good);
	assert_int_equal(r.status, 1);
	assert_contains(r.err, "bad.bin: neither a safetensors nor a GGUF file");
	assert_contains(r.out, "good.gguf: GGUF v3");
	path_of(bad, sizeof bad, "missing.safetensors");
	RUN("inspect", bad);
	assert_int_equal(r.status, 1);
	assert_contains(r.err, "missing.safetensors: cannot open: No such file or directory");
}

static void several_models_as_one_json_array(void **state)
{
	char a[512], b[512], bad[512];

	(void)state;
	path_of(a, sizeof a, "a.gguf");
	write_gguf(a);
	path_of(b, sizeof b, "b.gguf");
	write_gguf(b);
	path_of(bad, sizeof bad, "bad.bin");
	mw_text(bad, "not a model at all");
	RUN("inspect", "--json", a, bad, b);
	assert_int_equal(r.status, 1);
	assert_contains(r.err, "bad.bin: neither a safetensors nor a GGUF file");
	struct json_object *doc = json_tokener_parse(r.out);
	assert_non_null(doc);
	assert_true(json_object_is_type(doc, json_type_array));
	assert_int_equal(json_object_array_length(doc), 2);
	struct json_object *file;
	assert_true(json_object_object_get_ex(json_object_array_get_idx(doc, 1), "file", &file));
	assert_string_equal(json_object_get_string(file), b);
	json_object_put(doc);
	/* One model: one object, as before. */
	RUN("inspect", "--json", a);
	doc = json_tokener_parse(r.out);
	assert_non_null(doc);
	assert_true(json_object_is_type(doc, json_type_object));
	json_object_put(doc);
}

static const struct mw_tensor three[] = {{"w.a", 10, 0}, {"w.b", 20, 1}, {"w.c", 30, 1}};

static void lists_a_set_with_its_shards(void **state)
{
	char index[512];

	(void)state;
	mw_sharded(dir, "model", three, 3, 2, 1, 0, index, sizeof index);
	RUN("inspect", index);
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "Shards:\n");
	assert_contains(r.out, "model-00001-of-00002.safetensors\n");
	assert_contains(r.out, "model-00002-of-00002.safetensors\n");
	assert_contains(r.out, "  shard\n");
	assert_contains(r.out, "3 tensors, 60 B of data");
	assert_contains(r.out, "  total_size = 60\n");
	RUN("inspect", "--json", dir);
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "\"shards\":[{\"file\":\"");
	assert_contains(r.out, "\"name\":\"w.c\",\"dtype\":\"U8\",\"shape\":[30]");
	assert_contains(r.out, "\"shard\":1}");
}

static void lists_a_pipeline_s_components(void **state)
{
	char sub[512], path[600];

	(void)state;
	path_of(path, sizeof path, "model_index.json");
	mw_text(path, "{\"_class_name\":\"StableDiffusionPipeline\","
		      "\"unet\":[\"diffusers\",\"UNet2DConditionModel\"],"
		      "\"scheduler\":[\"diffusers\",\"PNDMScheduler\"]}");
	path_of(sub, sizeof sub, "unet");
	assert_int_equal(mkdir(sub, 0755), 0);
	mw_sharded(sub, "diffusion_pytorch_model", three, 3, 2, 1, 0, NULL, 0);
	path_of(sub, sizeof sub, "scheduler");
	assert_int_equal(mkdir(sub, 0755), 0);
	RUN("inspect", dir);
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "a diffusers pipeline of 2 components");
	assert_contains(r.out, "  unet       UNet2DConditionModel");
	assert_contains(r.out, "  scheduler  PNDMScheduler");
	RUN("inspect", "--json", dir);
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "\"name\":\"unet\"");
	assert_contains(r.out, "\"files\":2");
	/* A load of the folder names what can be loaded. */
	RUN("load", dir);
	assert_int_equal(r.status, 1);
	assert_contains(r.err, "a diffusers pipeline, not one model: load one of: unet\n");
}

/* The tool's status and standard error for args, run as spawn_tool does
 * but with an alarm set in the child, which outlives its exec: a hang
 * becomes a death by SIGALRM, a failed test rather than a stuck one. */
static int run_with_alarm(const char *const *args, char *err, size_t size)
{
	char err_path[] = "/tmp/devcache-test-errXXXXXX";
	const char *argv[8] = {test_env("TEST_TOOL")};
	int fd = mkstemp(err_path), status;
	size_t n = 1;

	assert_true(fd >= 0);
	unlink(err_path);
	for (; *args && n < 7; args++)
		argv[n++] = *args;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		putenv((char *)"LC_ALL=C");
		putenv((char *)"LANGUAGE=C");
		dup2(fd, 1);
		dup2(fd, 2);
		alarm(10);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		fail_msg("devcache %s: killed by signal %d", argv[1], WTERMSIG(status));
	assert_true(WIFEXITED(status));
	ssize_t got = pread(fd, err, size - 1, 0);
	err[got > 0 ? got : 0] = '\0';
	close(fd);
	return WEXITSTATUS(status);
}

/* A pipeline whose components' weight files are links to its own folder
 * would be listed inside itself without end: it is refused, named. */
static void a_pipeline_that_links_back_into_itself_exits_1(void **state)
{
	char sub[512], path[600], err[4096];

	(void)state;
	path_of(path, sizeof path, "model_index.json");
	mw_text(path, "{\"_class_name\":\"StableDiffusionPipeline\","
		      "\"unet\":[\"diffusers\",\"UNet2DConditionModel\"],"
		      "\"vae\":[\"diffusers\",\"AutoencoderKL\"]}");
	for (int i = 0; i < 2; i++) {
		path_of(sub, sizeof sub, i ? "vae" : "unet");
		assert_int_equal(mkdir(sub, 0755), 0);
		snprintf(path, sizeof path, "%s/a.safetensors", sub);
		assert_int_equal(symlink("..", path), 0);
	}
	snprintf(path, sizeof path,
		 "%s/unet/a.safetensors: leads back to %s, a folder that holds it: a cycle\n", dir,
		 dir);
	for (int json = 0; json < 2; json++) {
		const char *args[] = {"inspect", json ? "--json" : dir, json ? dir : NULL, NULL};

		assert_int_equal(run_with_alarm(args, err, sizeof err), 1);
		assert_contains(err, path);
	}
	const char *load[] = {"load", dir, NULL};
	assert_int_equal(run_with_alarm(load, err, sizeof err), 1);
	assert_contains(err, path);
}

/* What a file names reaches the terminal only as text: no byte of an
 * escape sequence (ESC ]0;title BEL retitles the terminal, ESC [2J clears
 * it), of DEL or of C1 (U+009B is a one-byte CSI) is printed raw. */
static void assert_no_control_bytes(const char *text)
{
	for (const unsigned char *p = (const unsigned char *)text; *p; p++)
		if ((*p < 0x20 && *p != '\n') || *p == 0x7f || (p[0] == 0xc2 && p[1] >= 0x80 &&
								  p[1] <= 0x9f))
			fail_msg("control byte 0x%02x at byte %zu of:\n%s", *p,
				 (size_t)(p - (const unsigned char *)text), text);
}

static void shows_names_from_the_file_escaped(void **state)
{
	static const char header[] =
		"{\"__metadata__\":{\"ti\\u001b]0;pwned\\u0007tle\":"
		"\"v\\u001b[2J\\u009b2J\\u007f\"},"
		"\"w\\u001b]0;title\\u0007\\u001b[2J\\u0085\":{\"dtype\":\"F32\",\"shape\":[1],"
		"\"data_offsets\":[0,4]}}";
	char path[512];

	(void)state;
	path_of(path, sizeof path, "escapes\x1b[2J.safetensors");
	mw_raw(path, sizeof header - 1, header, sizeof header - 1, "\0\0\0\0", 4);
	RUN("inspect", path);
	assert_int_equal(r.status, 0);
	assert_no_control_bytes(r.out);
	assert_contains(r.out, "escapes\\x1b[2J.safetensors: safetensors");
	assert_contains(r.out, "  ti\\x1b]0;pwned\\x07tle = \"v\\u001b[2J\\xc2\\x9b2J\\x7f\"\n");
	assert_contains(r.out, "  w\\x1b]0;title\\x07\\x1b[2J\\xc2\\x85  F32 ");
	/* Cut to the line, a value is still cut between whole escapes. */
	RUN("inspect", "--full", path);
	assert_int_equal(r.status, 0);
	assert_no_control_bytes(r.out);
	/* JSON stays json-c's, which escapes C0 its own way. */
	RUN("inspect", "--json", path);
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "\"name\":\"w\\u001b]0;title\\u0007\\u001b[2J\xc2\x85\"");
}

/* A long metadata value with escapes, cut to the line: never in the middle
 * of one. */
static void cuts_escaped_values_between_escapes(void **state)
{
	char header[512], path[512], value[200] = "";

	(void)state;
	for (int i = 0; i < 30; i++)
		strcat(value, "\\u007f");
	snprintf(header, sizeof header,
		 "{\"__metadata__\":{\"k\":\"%s\"},\"w\":{\"dtype\":\"U8\",\"shape\":[1],"
		 "\"data_offsets\":[0,1]}}",
		 value);
	path_of(path, sizeof path, "long-escapes.safetensors");
	mw_raw(path, strlen(header), header, strlen(header), "\0", 1);
	RUN("inspect", path);
	assert_int_equal(r.status, 0);
	assert_no_control_bytes(r.out);
	/* DEL stays raw in json-c's text: \x7f, four columns each, cut whole
	 * ("  k = \"" and 17 of them fill the 71 columns before "..."). */
	assert_contains(r.out, "  k = \"\\x7f\\x7f");
	assert_contains(r.out, "\\x7f\\x7f...\n");
}

/* The tool's error message names the tensor escaped, and a name of 5000
 * bytes leaves the reason whole. */
static void errors_show_names_escaped_and_keep_the_reason(void **state)
{
	char path[512], *header = malloc(6000);
	size_t len;

	(void)state;
	assert_non_null(header);
	strcpy(header, "{\"w\\u001b]0;title\\u0007\\u001b[2J\\n");
	len = strlen(header);
	memset(header + len, 'A', 5000);
	strcpy(header + len + 5000,
	       "\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}");
	path_of(path, sizeof path, "long-name.safetensors");
	mw_raw(path, strlen(header), header, strlen(header), "\0\0\0\0", 4);
	RUN("inspect", path);
	assert_int_equal(r.status, 1);
	assert_no_control_bytes(r.err);
	assert_contains(r.err, "long-name.safetensors: tensor 'w\\x1b]0;title\\x07\\x1b[2J\\x0aAAA");
	assert_contains(r.err, "bytes left out)");
	assert_contains(r.err, "AAAA': shape [2] has 8 bytes of F32 but data_offsets [0, 4] hold 4\n");
	assert_int_equal(strchr(r.err, '\n') - r.err + 1, (long)strlen(r.err)); /* one line */
	free(header);
}

static void usage_errors_exit_2(void **state)
{
	(void)state;
	RUN("inspect");
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "inspect: no file given");
	RUN("inspect", "--frobnicate", "x");
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "Try 'devcache inspect --help'");
	RUN("inspect", "--help");
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "Usage: devcache inspect [--json] [--full] MODEL...");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TMPDIR_TEST(lists_a_safetensors_file),
		TMPDIR_TEST(lists_a_gguf_file_as_json),
		TMPDIR_TEST(cuts_long_values_unless_full),
		TMPDIR_TEST(a_bad_file_is_named_and_exits_1),
		TMPDIR_TEST(several_models_as_one_json_array),
		TMPDIR_TEST(lists_a_set_with_its_shards),
		TMPDIR_TEST(lists_a_pipeline_s_components),
		TMPDIR_TEST(a_pipeline_that_links_back_into_itself_exits_1),
		TMPDIR_TEST(shows_names_from_the_file_escaped),
		TMPDIR_TEST(cuts_escaped_values_between_escapes),
		TMPDIR_TEST(errors_show_names_escaped_and_keep_the_reason),
		cmocka_unit_test(usage_errors_exit_2),
	};

	return RUN_TAP(tests);
}
