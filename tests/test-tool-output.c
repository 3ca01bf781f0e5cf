/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-tool-output.c - what devcache prints fits an 80-column terminal, every command has its help, and every --json is JSON. */
#include "tap.h"

#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include <devcache.h>

#include "model-writer.h"
#include "spawn.h"

static struct result r;
static char dir[64], model[256], gguf[256], trace[256], modules[4096];

#define RUN(env, ...) RUN_TOOL(env, __VA_ARGS__)

static const char *const plain[] = {"LANGUAGE=C", "LC_ALL=C", NULL};
/* The fake modules, behind a folder that is not there and has a long name. */
static const char *const with_modules[] = {modules, "LANGUAGE=C", "LC_ALL=C", NULL};

/* Every line of text within 80 columns (characters: the tool writes UTF-8). */
static void assert_fits(const char *what, const char *text)
{
	const char *line = text;

	while (*line) {
		size_t len = strcspn(line, "\n"), cols = 0;

		for (size_t i = 0; i < len; i++)
			cols += ((unsigned char)line[i] & 0xc0) != 0x80;
		if (cols > 80)
			fail_msg("%s: a line of %zu columns:\n%.*s", what, cols, (int)len, line);
		line += len + (line[len] == '\n');
	}
}

/* text parsed by json-c, whole; the caller puts it. */
static struct json_object *parse(const char *what, const char *text)
{
	struct json_tokener *tok = json_tokener_new();
	enum json_tokener_error err;
	struct json_object *o;

	assert_non_null(tok);
	o = json_tokener_parse_ex(tok, text, (int)strlen(text));
	err = json_tokener_get_error(tok);
	if (!o || err != json_tokener_success)
		fail_msg("%s: not JSON (%s):\n%s", what, json_tokener_error_desc(err), text);
	/* Nothing but the newline after the document. */
	if (strspn(text + json_tokener_get_parse_end(tok), " \n") !=
	    strlen(text + json_tokener_get_parse_end(tok)))
		fail_msg("%s: text after the JSON document:\n%s", what, text);
	json_tokener_free(tok);
	/* And the same through the one-call parser the brief names. */
	json_object_put(json_tokener_parse_verbose(text, &err));
	assert_int_equal(err, json_tokener_success);
	return o;
}

static struct json_object *member(struct json_object *o, const char *key)
{
	struct json_object *v = NULL;

	if (!json_object_object_get_ex(o, key, &v))
		fail_msg("no member '%s' in %s", key, json_object_to_json_string(o));
	return v;
}

static int setup(void **state)
{
	/* A name longer than a line, a long metadata value, a wide shape. */
	static const struct mw_tensor tensors[] = {
		{"model.layers.0.self_attn.q_proj.weight", 64, 0},
		{"model.layers.0.block_sparse_moe.experts.7.a_very_long_projection_name.weight", 32,
		 0},
	};
	char long_dir[300], meta[512];

	(void)state;
	if (test_tmpdir_make(dir, sizeof dir, "tool-output"))
		return -1;
	snprintf(model, sizeof model, "%s/model.safetensors", dir);
	snprintf(gguf, sizeof gguf, "%s/model.gguf", dir);
	snprintf(trace, sizeof trace, "%s/small.trace", dir);
	snprintf(meta, sizeof meta, "{\"format\":\"pt\",\"note\":\"%0200d\"}", 7);
	mw_safetensors(model, tensors, 2, 1, meta);
	mw_gguf(gguf, NULL, 0, tensors, 2, 1);
	mw_text(trace, "+ 1 1000\n+ 2 3000000\n- 1\n- 2\n");
	memset(long_dir, 'd', sizeof long_dir - 1);
	long_dir[sizeof long_dir - 1] = '\0';
	snprintf(modules, sizeof modules, "DEVCACHE_BACKEND_PATH=%s:/nonexistent/%s",
		 test_env("TEST_MODULES"), long_dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return test_tmpdir_remove(dir);
}

/* The commands, from the tool's own list (what the completion reads). */
static char *commands(void)
{
	RUN(plain, "--list", "commands");
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "info\n");
	assert_contains(r.out, "help\n");
	return strdup(r.out);
}

static void every_command_has_its_help(void **state)
{
	char *names = commands(), *save = NULL, usage[64], *help;

	(void)state;
	RUN(plain, "--help");
	assert_int_equal(r.status, 0);
	assert_fits("devcache --help", r.out);
	for (char *name = strtok_r(names, "\n", &save); name; name = strtok_r(NULL, "\n", &save)) {
		RUN(plain, name, "--help");
		if (r.status != 0)
			fail_msg("devcache %s --help: status %d: %s", name, r.status, r.err);
		snprintf(usage, sizeof usage, "Usage: devcache %s", name);
		if (strncmp(r.out, usage, strlen(usage)) != 0)
			fail_msg("devcache %s --help begins \"%.40s\"", name, r.out);
		assert_fits(name, r.out);
		help = strdup(r.out);
		RUN(plain, "help", name);
		assert_int_equal(r.status, 0);
		assert_string_equal(r.out, help);
		free(help);
		/* -h is --help. */
		RUN(plain, name, "-h");
		assert_int_equal(r.status, 0);
		assert_contains(r.out, usage);
	}
	free(names);
}

static void config_and_info_fit_80_columns(void **state)
{
	(void)state;
	RUN(with_modules, "config");
	assert_int_equal(r.status, 0);
	assert_fits("config", r.out);
	RUN(with_modules, "info");
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "good       loaded, 2 devices");
	assert_contains(r.out, ": no such directory)");
	assert_fits("info", r.out);
	RUN(with_modules, "-v", "info");
	assert_fits("info -v", r.out);
}

static void inspect_and_load_fit_80_columns(void **state)
{
	(void)state;
	RUN(plain, "inspect", model);
	assert_int_equal(r.status, 0);
	assert_fits("inspect", r.out);
	/* Numbers right-aligned under right-aligned headers. */
	assert_contains(r.out, "  offset  bytes\n");
	assert_contains(r.out, "Tensors (shapes outermost dimension first):\n");
	assert_contains(r.out, "2 metadata entries, 2 tensors,");
	RUN(plain, "inspect", gguf);
	assert_int_equal(r.status, 0);
	assert_fits("inspect (GGUF)", r.out);
	assert_contains(r.out, "Tensors (shapes innermost dimension first, as in GGUF):\n");
	assert_contains(r.out, "0 metadata entries, 2 tensors,");
	RUN(with_modules, "load", "--device", "good:0", model, gguf);
	assert_int_equal(r.status, 0);
	/* The tool's lines; the cache and memory summaries after them are the
	 * library's (devcache_cache_summary, devcache_summary). */
	char *summary = strstr(r.out, "\nModel cache\n");
	assert_non_null(summary);
	*summary = '\0';
	assert_contains(r.out, "model.gguf on good:0:");
	assert_fits("load", r.out);
}

static void every_json_is_json(void **state)
{
	struct json_object *o;

	(void)state;
	RUN(with_modules, "config", "--json");
	assert_int_equal(r.status, 0);
	o = parse("config --json", r.out);
	assert_true(json_object_array_length(o) >= devcache_tunable_count());
	assert_string_equal(json_object_get_string(member(json_object_array_get_idx(o, 0), "name")),
			    "caching");
	json_object_put(o);
	RUN(with_modules, "info", "--json");
	assert_int_equal(r.status, 0);
	o = parse("info --json", r.out);
	assert_true(json_object_array_length(member(o, "devices")) >= 3);
	assert_non_null(member(o, "backends"));
	json_object_put(o);
	RUN(plain, "inspect", "--json", model, gguf);
	assert_int_equal(r.status, 0);
	o = parse("inspect --json", r.out);
	assert_string_equal(
		json_object_get_string(member(json_object_array_get_idx(o, 1), "shape_order")),
		"innermost_first");
	json_object_put(o);
	RUN(with_modules, "load", "--json", "-d", "good:0", model);
	assert_int_equal(r.status, 0);
	json_object_put(parse("load --json", r.out));
	RUN(plain, "replay", "--json", "--summary", trace);
	assert_int_equal(r.status, 0);
	o = parse("replay --json", r.out);
	assert_int_equal(json_object_get_int(member(o, "operations")), 4);
	json_object_put(o);
}

/* dump's output file is -O: -o after any command is tunables. */
static void o_means_tunables_after_every_command(void **state)
{
	char out[300];

	(void)state;
	snprintf(out, sizeof out, "%s/tensor.bin", dir);
	RUN(plain, "dump", model, "model.layers.0.self_attn.q_proj.weight", "-O", out,
	    "-o", "caching:false");
	assert_int_equal(r.status, 0);
	assert_int_equal(access(out, F_OK), 0);
	static const char *const cmds[][3] = {
		{"info", NULL}, {"config", NULL}, {"load", model}, {"dump", model, "x"},
		{"demo", NULL}, {"inspect", model}, {"replay", trace},
	};
	for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
		const char *args[] = {cmds[i][0], "-o", "no_such_tunable:1", cmds[i][1], cmds[i][2],
				      NULL};

		spawn_tool(&r, plain, args);
		if (r.status != 2 || !strstr(r.err, "command line (-o): unknown tunable"))
			fail_msg("devcache %s -o no_such_tunable:1: status %d, %s", cmds[i][0],
				 r.status, r.err);
	}
}

/* No byte of a terminal control (C0 but the newline, DEL, C1) in text. */
static void assert_no_control_bytes(const char *what, const char *text)
{
	for (const unsigned char *p = (const unsigned char *)text; *p; p++)
		if ((*p < 0x20 && *p != '\n') || *p == 0x7f || (p[0] == 0xc2 && p[1] >= 0x80 &&
								  p[1] <= 0x9f))
			fail_msg("%s: control byte 0x%02x at byte %zu of:\n%s", what, *p,
				 (size_t)(p - (const unsigned char *)text), text);
}

/* A folder name from DEVCACHE_BACKEND_PATH and a model's path reach the
 * terminal escaped: info's and load's text, and the library's warnings. */
static void info_and_load_show_names_escaped(void **state)
{
	char path_env[4200], esc_model[512];
	const char *env[] = {path_env, "LANGUAGE=C", "LC_ALL=C", NULL};
	FILE *in, *out;
	char buf[4096];
	size_t n;

	(void)state;
	snprintf(path_env, sizeof path_env, "DEVCACHE_BACKEND_PATH=%s:/nonexistent/t\x1b]0;title\x07",
		 test_env("TEST_MODULES"));
	RUN(env, "info");
	assert_int_equal(r.status, 0);
	assert_no_control_bytes("info", r.out);
	assert_no_control_bytes("info's warnings", r.err);
	assert_contains(r.out, "(/nonexistent/t\\x1b]0;title\\x07: no such directory)\n");
	assert_contains(r.err, "/nonexistent/t\\x1b]0;title\\x07: no such directory");
	snprintf(esc_model, sizeof esc_model, "%s/esc\x1b[2J\xc2\x9b.safetensors", dir);
	in = fopen(model, "rb");
	out = fopen(esc_model, "wb");
	assert_non_null(in);
	assert_non_null(out);
	while ((n = fread(buf, 1, sizeof buf, in)) > 0)
		assert_int_equal(fwrite(buf, 1, n, out), n);
	fclose(in);
	assert_int_equal(fclose(out), 0);
	RUN(plain, "load", esc_model);
	assert_int_equal(r.status, 0);
	assert_no_control_bytes("load", r.out);
	assert_contains(r.out, "/esc\\x1b[2J\\xc2\\x9b.safetensors on host:");
	RUN(plain, "load", "--repeat", "\x1b[2J", esc_model);
	assert_int_equal(r.status, 2);
	assert_no_control_bytes("load's usage error", r.err);
	assert_contains(r.err, "invalid repeat count '\\x1b[2J'");
	/* devcache config prints each tunable's value, set from anywhere. */
	snprintf(path_env, sizeof path_env, "DEVCACHE_BACKEND_PATH=/nonexistent/c\x1b[2J\xc2\x9b");
	RUN(env, "config");
	assert_int_equal(r.status, 0);
	assert_no_control_bytes("config", r.out);
	assert_contains(r.out, "backend_path = /nonexistent/c\\x1b[2J\\xc2\\x9b");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_command_has_its_help),
		cmocka_unit_test(config_and_info_fit_80_columns),
		cmocka_unit_test(inspect_and_load_fit_80_columns),
		cmocka_unit_test(every_json_is_json),
		cmocka_unit_test(o_means_tunables_after_every_command),
		cmocka_unit_test(info_and_load_show_names_escaped),
	};
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, setup, teardown);
}
