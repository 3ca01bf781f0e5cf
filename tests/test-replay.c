/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-replay.c - `devcache replay`: results, JSON, the summary table, bad traces, tunables; devcache_summary() through the library; the pages that document them. */
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <devcache.h>

#include "spawn.h"

static struct result r;
TEST_TMPDIR_FIXTURE("replay");

static const char *const plain[] = {"LANGUAGE=C", "LC_ALL=C", NULL};

#define RUN(...) RUN_TOOL(plain, __VA_ARGS__)

static const char *trace_file(const char *name, const char *text)
{
	return spawn_file(dir, name, text);
}

/* The number after "label:" on a line of the text report. */
static long long field(const char *out, const char *label)
{
	char key[128];
	const char *p;

	snprintf(key, sizeof key, "\n  %s:", label);
	if (!(p = strstr(out, key)))
		fail_msg("no '%s' in:\n%s", label, out);
	p += strlen(key);
	while (*p == ' ')
		p++;
	return strtoll(p, NULL, 10);
}

/* ---- a small JSON checker ---------------------------------------------------- */

struct json {
	const char *p;
	bool ok;
};

static void ws(struct json *j)
{
	while (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')
		j->p++;
}

static void value(struct json *j, int depth);

static void string(struct json *j)
{
	if (*j->p != '"') {
		j->ok = false;
		return;
	}
	for (j->p++; *j->p != '"'; j->p++) {
		unsigned char c = (unsigned char)*j->p;

		if (c < 0x20) {
			j->ok = false;
			return;
		}
		if (c == '\\') {
			j->p++;
			if (*j->p == 'u') {
				for (int i = 1; i <= 4; i++)
					if (!strchr("0123456789abcdefABCDEF", j->p[i]) || !j->p[i]) {
						j->ok = false;
						return;
					}
				j->p += 4;
			} else if (!*j->p || !strchr("\"\\/bfnrt", *j->p)) {
				j->ok = false;
				return;
			}
		}
	}
	j->p++;
}

static void number(struct json *j)
{
	const char *start = j->p;

	if (*j->p == '-')
		j->p++;
	if (*j->p == '0')
		j->p++;
	else if (*j->p >= '1' && *j->p <= '9')
		while (*j->p >= '0' && *j->p <= '9')
			j->p++;
	else
		j->ok = false;
	if (*j->p == '.') {
		j->p++;
		if (!(*j->p >= '0' && *j->p <= '9'))
			j->ok = false;
		while (*j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	if (j->p == start)
		j->ok = false;
}

static void value(struct json *j, int depth)
{
	ws(j);
	if (depth > 32) {
		j->ok = false;
	} else if (*j->p == '{' || *j->p == '[') {
		char close = *j->p == '{' ? '}' : ']';
		bool object = close == '}';

		j->p++;
		ws(j);
		if (*j->p == close) {
			j->p++;
			return;
		}
		while (j->ok) {
			if (object) {
				ws(j);
				string(j);
				ws(j);
				if (*j->p++ != ':')
					j->ok = false;
			}
			value(j, depth + 1);
			ws(j);
			if (*j->p == ',') {
				j->p++;
			} else if (*j->p == close) {
				j->p++;
				return;
			} else {
				j->ok = false;
			}
		}
	} else if (*j->p == '"') {
		string(j);
	} else if (strncmp(j->p, "true", 4) == 0 || strncmp(j->p, "null", 4) == 0) {
		j->p += 4;
	} else if (strncmp(j->p, "false", 5) == 0) {
		j->p += 5;
	} else {
		number(j);
	}
}

static void assert_json(const char *text)
{
	struct json j = {text, true};

	value(&j, 0);
	ws(&j);
	if (!j.ok || *j.p)
		fail_msg("not one JSON value (at offset %td): %s", j.p - text, text);
}

/* The value of a top-level key, as text up to the next ',' or '}'. */
static long long json_number(const char *text, const char *key)
{
	char k[64];
	const char *p;

	snprintf(k, sizeof k, "\"%s\":", key);
	if (!(p = strstr(text, k)))
		fail_msg("no key %s in %s", key, text);
	return strtoll(p + strlen(k), NULL, 10);
}

/* ---- the tests ------------------------------------------------------------------ */

/* Three blocks on two streams; one is live at the end and freed there. */
static const char small_trace[] = "# a small trace\n"
				  "+ 1 1000\n"
				  "+ 2 3000000\n"
				  "+ 3 5000 1\n"
				  "- 1\n"
				  "- 3\n";

static void replays_and_reports(void **state)
{
	const char *path = trace_file("small.trace", small_trace);

	(void)state;
	RUN("replay", path);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.err, "");
	assert_contains(r.out, "Replay on host:\n");
	assert_contains(r.out, "\n  events:             5 (6 operations)\n");
	long long peak_alloc = field(r.out, "peak allocated");
	long long peak_res = field(r.out, "peak reserved");
	/* 1000 and 5000 round to 1024 and 5120; 3000000 is a large block */
	assert_true(peak_alloc >= 1024 + 3000000 + 5120);
	assert_true(peak_alloc < 1024 + 3000000 + 5120 + 2 * 1024 * 1024);
	assert_true(peak_res >= peak_alloc);
	assert_true(field(r.out, "device allocations") >= 2);
	assert_int_equal(field(r.out, "OOMs"), 0);
	assert_int_equal(field(r.out, "retries"), 0);
	assert_not_contains(r.out, "stitched"); /* only when stitching served */
	assert_true(field(r.out, "time per operation") >= 0);
	assert_contains(r.out, "  reserved/allocated: ");

	/* Options may come after the files; --device names the device. */
	RUN("replay", path, "--device", "host");
	assert_int_equal(r.status, 0);
	RUN("replay", "--help");
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "Usage: devcache replay [--device D] [-m SIZE] [--json] [--summary]");
	RUN("--help");
	assert_contains(r.out, "  replay TRACE...");
}

static void json_output(void **state)
{
	const char *path = trace_file("small.trace", small_trace);
	/* A name JSON must escape. */
	const char *odd = trace_file("odd \"name\"\\\t\xff.trace", small_trace);

	(void)state;
	RUN("replay", "--json", path, odd);
	assert_int_equal(r.status, 0);
	assert_json(r.out);
	assert_int_equal(r.out[strlen(r.out) - 1], '\n');
	assert_int_equal(strchr(r.out, '\n') - r.out, (long)strlen(r.out) - 1);
	assert_int_equal(json_number(r.out, "events"), 10);
	assert_int_equal(json_number(r.out, "operations"), 12);
	assert_int_equal(json_number(r.out, "ooms"), 0);
	assert_int_equal(json_number(r.out, "retries"), 0);
	assert_int_equal(json_number(r.out, "stitched"), 0);
	assert_true(json_number(r.out, "peak_reserved_bytes") >=
		    json_number(r.out, "peak_allocated_bytes"));
	assert_true(json_number(r.out, "device_allocations") >= 2);
	assert_contains(r.out, "\"device\":\"host\"");
	/* json-c's escapes; the byte that is not UTF-8 is U+FFFD. */
	assert_contains(r.out, "odd \\\"name\\\"\\\\\\t\xef\xbf\xbd.trace\"]");
	assert_contains(r.out, "\"ns_per_op\":");
	assert_contains(r.out, "\"reserved_per_allocated\":");
	assert_contains(r.out, "\"device_frees\":");
	assert_null(strstr(r.out, "summary"));

	/* JSON numbers whatever the locale's decimal separator. */
	const char *de[] = {"LANGUAGE=C", "LC_ALL=de_DE.UTF-8", NULL};
	spawn_tool(&r, de, (const char *const[]){"replay", "--json", path, NULL});
	assert_int_equal(r.status, 0);
	assert_json(r.out);

	RUN("replay", "--json", "--summary", path);
	assert_int_equal(r.status, 0);
	assert_json(r.out);
	assert_contains(r.out, ",\"summary\":\"|=====");
	assert_contains(r.out, "libdevcache memory summary, device ID host");
	assert_contains(r.out, "|\\n| Allocated memory      |");
}

static void summary_table(void **state)
{
	const char *path = trace_file("small.trace", small_trace);
	const char *table;
	size_t lines = 0;

	(void)state;
	RUN("replay", "--summary", path);
	assert_int_equal(r.status, 0);
	assert_non_null(table = strstr(r.out, "\n\n|====="));
	for (const char *l = table + 2; *l; lines++) {
		const char *nl = strchr(l, '\n');

		assert_non_null(nl);
		if (nl - l != 77 || l[0] != '|' || nl[-1] != '|')
			fail_msg("not a 77-column line of the box: '%.*s'", (int)(nl - l), l);
		l = nl + 1;
	}
	assert_int_equal(lines, 48);
	assert_contains(table, "libdevcache memory summary, device ID host");
	assert_contains(table, "| Allocated memory      |      0 B   |");
	assert_contains(table, "|       from large pool |");
	assert_contains(table, "| Non-releasable allocs |");
	assert_contains(table, "| Oversize GPU segments |");
	assert_contains(table, "CUDA OOMs: 0");
}

static void bad_traces_exit_2(void **state)
{
	const char *bad = trace_file("bad.trace", "+ 1 100\n# fine so far\n- 2\n");
	const char *good = trace_file("good.trace", small_trace);
	char expect[512];

	(void)state;
	RUN("replay", good, bad);
	assert_int_equal(r.status, 2);
	assert_string_equal(r.out, "");
	snprintf(expect, sizeof expect, "devcache replay: %s:3: free of ID 2, which was never allocated\n",
		 bad);
	assert_string_equal(r.err, expect);

	snprintf(expect, sizeof expect, "%s/missing.trace", dir);
	RUN("replay", expect);
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "missing.trace: No such file or directory");

	RUN("replay");
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "devcache replay: no trace file given");
	RUN("replay", "--bogus", good);
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "Try 'devcache replay --help'");
	RUN("replay", "-o", "caching:maybe", good);
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "caching");
	RUN("replay", "--device", "nosuch:0", good);
	assert_int_equal(r.status, 1);
	assert_contains(r.err, "no device 'nosuch:0'");
	RUN("replay", "--device", "host:x", good);
	assert_int_equal(r.status, 2);

	/* A directory cannot be read: a failure at run time. */
	RUN("replay", dir);
	assert_int_equal(r.status, 1);
	snprintf(expect, sizeof expect, "devcache replay: %s: not a regular file\n", dir);
	assert_string_equal(r.err, expect);
}

static void gzip_and_several_files(void **state)
{
	char path[256];
	gzFile gz;

	(void)state;
	snprintf(path, sizeof path, "%s/small.trace.gz", dir);
	assert_non_null(gz = gzopen(path, "wb"));
	assert_int_equal(gzputs(gz, small_trace), (int)strlen(small_trace));
	assert_int_equal(gzclose(gz), Z_OK);
	RUN("replay", "--json", path, trace_file("small.trace", small_trace), path);
	assert_int_equal(r.status, 0);
	assert_int_equal(json_number(r.out, "events"), 15);
	assert_int_equal(json_number(r.out, "operations"), 18);
}

/* The same block, allocated and freed ten times. */
static const char repeat_trace[] = "+ 1 1000\n- 1\n+ 2 1000\n- 2\n+ 3 1000\n- 3\n+ 4 1000\n- 4\n"
				   "+ 5 1000\n- 5\n+ 6 1000\n- 6\n+ 7 1000\n- 7\n+ 8 1000\n- 8\n"
				   "+ 9 1000\n- 9\n+ 10 1000\n- 10\n";

static void tunables_change_the_result(void **state)
{
	const char *path = trace_file("repeat.trace", repeat_trace);

	(void)state;
	RUN("replay", "--json", path);
	assert_int_equal(r.status, 0);
	assert_int_equal(json_number(r.out, "device_allocations"), 1);
	assert_int_equal(json_number(r.out, "device_frees"), 0);

	RUN("replay", "--json", "-o", "caching:false", path);
	assert_int_equal(r.status, 0);
	assert_int_equal(json_number(r.out, "device_allocations"), 10);
	assert_int_equal(json_number(r.out, "device_frees"), 10);

	/* The global -o, and the command's over it. */
	RUN("-o", "caching:false", "replay", "--json", path);
	assert_int_equal(r.status, 0);
	assert_int_equal(json_number(r.out, "device_allocations"), 10);
	RUN("-o", "caching:false", "replay", "--json", "-o", "caching:true", path);
	assert_int_equal(r.status, 0);
	assert_int_equal(json_number(r.out, "device_allocations"), 1);
	RUN("-o", "caching:true", "replay", "--json", "-o", "log_level:error", "-o",
	    "caching:false", path);
	assert_int_equal(r.status, 0);
	assert_int_equal(json_number(r.out, "device_allocations"), 10);
}

/* A block no device has: an OOM, counted; its free is skipped; the replay
 * goes on, and ends with exit status 3, which its last line says. */
static void out_of_memory_is_counted(void **state)
{
	const char *path = trace_file("huge.trace", "+ 1 18446744073709551615 3\n"
						    "+ 2 100\n"
						    "+ 3 9223372036854775808\n"
						    "+ 4 1099511627776000\n"
						    "- 1\n- 2\n- 3\n");

	(void)state;
	RUN("replay", "--json", path);
	assert_int_equal(r.status, 3);
	assert_string_equal(r.err, "");
	assert_int_equal(json_number(r.out, "ooms"), 3);
	assert_int_equal(json_number(r.out, "events"), 7);
	/* four allocations tried, one free done (2), 4 never freed by the
	 * trace but failed, so nothing to free at the end */
	assert_int_equal(json_number(r.out, "operations"), 5);
	assert_int_equal(json_number(r.out, "peak_allocated_bytes"), 512);
	RUN("replay", path);
	assert_int_equal(r.status, 3);
	const char *last = "\n3 allocations failed for want of memory (exit status 3).\n";
	assert_true(strlen(r.out) > strlen(last));
	assert_string_equal(r.out + strlen(r.out) - strlen(last), last);
}

/* The summary's fragmentation: one free block of 700 MiB, all that is
 * reserved once the trace ends, is none. */
static void one_free_block_is_no_fragmentation(void **state)
{
	const char *path = trace_file("one-block.trace", "+ 1 734003200\n- 1\n");

	(void)state;
	RUN("replay", "--summary", path);
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "Fragmentation");
	assert_contains(r.out, " 0.0%");
	assert_not_contains(r.out, "100.0%");
}

/* The host device has the memory the trace's header says its device had,
 * or --memory: a GPU's out-of-memory, not the host's, which has plenty. */
static void emulates_the_traced_device(void **state)
{
	/* 60 + 30 MiB live, then 80 MiB: fits in 1 GiB, not in 100 MiB. */
	static const char body[] = "+ 1 62914560\n+ 2 31457280\n- 1\n"
				   "# oom: PyTorch could not allocate 83886080 bytes; device_free=0\n"
				   "+ 3 83886080\n- 3\n- 2\n";
	char text[512];

	(void)state;
	snprintf(text, sizeof text, "# device_memory: 104857600\n%s", body);
	const char *traced = trace_file("traced.trace", text);
	const char *untraced = trace_file("plain.trace", body);

	RUN("replay", traced);
	assert_int_equal(r.status, 3);
	assert_contains(r.out, "Replay on host, emulating a device of 100.0 MiB (the trace's "
			       "device_memory):\n");
	assert_int_equal(field(r.out, "OOMs"), 1);
	assert_int_equal(field(r.out, "retries"), 1);
	/* --memory wins over the header; without either, the host's memory. */
	RUN("replay", "--memory", "1G", traced);
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "emulating a device of 1.0 GiB (--memory)");
	assert_int_equal(field(r.out, "OOMs"), 0);
	RUN("replay", untraced);
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "Replay on host:\n");
	RUN("replay", "-m", "100MiB", "--json", untraced);
	assert_int_equal(r.status, 3);
	assert_int_equal(json_number(r.out, "device_memory"), 104857600);
	assert_int_equal(json_number(r.out, "ooms"), 1);
	/* -o host_memory is the user's own choice: the header does not override it. */
	RUN("replay", "-o", "host_memory:1G", traced);
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "Replay on host:\n");
	/* Errors. */
	RUN("replay", "--memory", "lots", untraced);
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "--memory: 'lots' is not a size");
	RUN("replay", "--memory", "0", untraced);
	assert_int_equal(r.status, 2);
	RUN("replay", "--memory", "1G", "-o", "host_memory:2G", untraced);
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "--memory and -o host_memory both set");
	RUN("replay", "--memory", "1G", "--device", "cuda:0", untraced);
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "--memory emulates a device on the host");
}

/* A trace recorded by the library while replaying replays to the same
 * result; an empty trace gives no time and no ratio. */
static void record_and_replay(void **state)
{
	const char *path = trace_file("small.trace", small_trace);
	char option[300], pattern[300];
	static char first[sizeof r.out];
	glob_t g;

	(void)state;
	snprintf(option, sizeof option, "trace:%s/rec-%%p-%%d.trace", dir);
	RUN("replay", "--json", "-o", option, path);
	assert_int_equal(r.status, 0);
	memcpy(first, r.out, sizeof first);
	snprintf(pattern, sizeof pattern, "%s/rec-*-host.trace", dir);
	assert_int_equal(glob(pattern, 0, NULL, &g), 0);
	assert_int_equal(g.gl_pathc, 1);
	RUN("replay", "--json", g.gl_pathv[0]);
	assert_int_equal(r.status, 0);
	/* the implicit free of block 2 is an event of the recording */
	assert_int_equal(json_number(r.out, "events"), 6);
	assert_int_equal(json_number(r.out, "operations"), json_number(first, "operations"));
	assert_int_equal(json_number(r.out, "peak_allocated_bytes"),
			 json_number(first, "peak_allocated_bytes"));
	assert_int_equal(json_number(r.out, "peak_reserved_bytes"),
			 json_number(first, "peak_reserved_bytes"));
	assert_int_equal(json_number(r.out, "device_allocations"),
			 json_number(first, "device_allocations"));
	globfree(&g);

	path = trace_file("empty.trace", "# nothing\n");
	RUN("replay", "--json", path);
	assert_int_equal(r.status, 0);
	assert_json(r.out);
	assert_contains(r.out, "\"events\":0,\"operations\":0,");
	assert_contains(r.out, "\"ns_per_op\":null,");
	assert_contains(r.out, "\"reserved_per_allocated\":null,");
	RUN("replay", path);
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "  time per operation: -\n");
	assert_contains(r.out, "  reserved/allocated: -\n");
}

/* devcache_summary() straight from the library, on blocks it can count. */
static void summary_from_the_library(void **state)
{
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV};
	devcache_ctx_t *ctx;
	devcache_device_t *dev;
	void *small, *large;
	char *text = NULL;
	size_t size;
	FILE *f;

	(void)state;
	assert_int_equal(devcache_open_ex(&ctx, &args), 0);
	assert_int_equal(devcache_device_get(ctx, "host", &dev), 0);
	assert_int_equal(devcache_alloc(dev, 1000, NULL, &small), 0);
	assert_int_equal(devcache_alloc(dev, 3 << 20, NULL, &large), 0);
	assert_non_null(f = open_memstream(&text, &size));
	assert_int_equal(devcache_summary(dev, f), 0);
	assert_int_equal(fclose(f), 0);
	/* 1024 + 3 MiB allocated: 3073 KiB; the pools in the same unit */
	assert_contains(text, "\n| Allocated memory      |   3073 KiB |   3073 KiB |   3073 KiB |"
			      "      0 B   |\n"
			      "|       from large pool |   3072 KiB |   3072 KiB |   3072 KiB |"
			      "      0 B   |\n"
			      "|       from small pool |      1 KiB |      1 KiB |      1 KiB |"
			      "      0 B   |\n");
	assert_contains(text, "\n| Requested memory      |   3072 KiB |");
	assert_contains(text, "\n| Allocations           |       2    |       2    |       2    |"
			      "       0    |\n"
			      "|       from large pool |       1    |       1    |       1    |"
			      "       0    |\n"
			      "|       from small pool |       1    |       1    |       1    |"
			      "       0    |\n");
	assert_contains(text, "\n| GPU reserved segments |       2    |");
	assert_contains(text, "|                libdevcache memory summary, device ID host                 |\n");
	free(text);
	assert_int_equal(devcache_free(dev, small), 0);
	assert_int_equal(devcache_free(dev, large), 0);
	assert_int_equal(devcache_summary(NULL, stdout), DEVCACHE_EINVAL);
	devcache_close(ctx);
}

/* A gzip file of a few kilobytes that holds three million lines replays in
 * 48 MiB of address space; holding every event took 16 bytes a line. */
static void trace_bomb(void **state)
{
	static const char pair[] = "+ 1 1\n- 1\n";
	const unsigned pairs = 1500000;
	char path[256], *chunk = malloc(100000 * (sizeof pair - 1));
	gzFile gz;
	int status;
	pid_t pid;

	(void)state;
	assert_non_null(chunk);
	for (size_t i = 0; i < 100000; i++)
		memcpy(chunk + i * (sizeof pair - 1), pair, sizeof pair - 1);
	snprintf(path, sizeof path, "%s/bomb.trace.gz", dir);
	assert_non_null(gz = gzopen(path, "wb9"));
	for (unsigned i = 0; i < pairs; i += 100000)
		assert_int_equal(gzwrite(gz, chunk, 100000 * (sizeof pair - 1)),
				 100000 * (int)(sizeof pair - 1));
	assert_int_equal(gzclose(gz), Z_OK);
	free(chunk);

	assert_true((pid = fork()) >= 0);
	if (pid == 0) {
		struct rlimit lim = {48u << 20, RLIM_INFINITY};

		/* A sanitizer reserves terabytes at start: no bound applies. */
		if (!TEST_SANITIZED && setrlimit(RLIMIT_AS, &lim) != 0)
			_exit(3);
		RUN("replay", "--json", path);
		if (r.status != 0)
			fprintf(stderr, "# %s", r.err);
		_exit(r.status == 0 && json_number(r.out, "events") == 2 * pairs &&
		      json_number(r.out, "operations") == 2 * pairs ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* A fault after the first batch stops the replay with the file's line, and
 * no result; a gzip file cut short is named as it was given, not as zlib's
 * "<fd:3>". */
static void faults_while_replaying(void **state)
{
	char path[256], expect[512];
	FILE *f;
	gzFile gz;

	(void)state;
	snprintf(path, sizeof path, "%s/late.trace", dir);
	assert_non_null(f = fopen(path, "w"));
	for (unsigned i = 0; i < 20000; i++)
		fprintf(f, "+ %u 1000\n- %u\n", i, i);
	fputs("- 5\n", f);
	assert_int_equal(fclose(f), 0);
	RUN("replay", path);
	assert_int_equal(r.status, 2);
	assert_string_equal(r.out, "");
	snprintf(expect, sizeof expect, "devcache replay: %s:40001: free of ID 5, which was "
		 "never allocated or was freed already\n", path);
	assert_string_equal(r.err, expect);

	snprintf(path, sizeof path, "%s/cut.trace.gz", dir);
	assert_non_null(gz = gzopen(path, "wb"));
	for (unsigned i = 0; i < 2000; i++)
		gzprintf(gz, "+ %u %u\n- %u\n", i, i * 7919 % 100003 + 1, i);
	assert_int_equal(gzclose(gz), Z_OK);
	assert_int_equal(truncate(path, 3000), 0);
	RUN("replay", path);
	assert_int_equal(r.status, 2);
	assert_string_equal(r.out, "");
	snprintf(expect, sizeof expect, "devcache replay: %s: invalid compressed data after line ",
		 path);
	assert_int_equal(strncmp(r.err, expect, strlen(expect)), 0);
	assert_contains(r.err, ": unexpected end of file\n");
	assert_not_contains(r.err, "<fd:");
}

/* ---- the pages --------------------------------------------------------------------- */

static void pages(void **state)
{
	const char *mandir = test_env("MAN_BUILDDIR");
	const char *groff = getenv("GROFF");
	char path[4096];
	char *text;

	(void)state;
	snprintf(path, sizeof path, "%s/devcache-trace.5", mandir);
	if (!(text = test_slurp(path)))
		fail_msg("%s: %s", path, strerror(errno));
	assert_contains(text, ".TH DEVCACHE-TRACE 5 ");
	assert_contains(text, "\n.SH NAME\ndevcache-trace \\- ");
	assert_contains(text, "\n.SH EXAMPLES\n");
	assert_contains(text, "\n.SH \"SEE ALSO\"\n");
	assert_contains(text, "65535");
	assert_null(strstr(text, "@VERSION@"));
	free(text);
	snprintf(path, sizeof path, "%s/devcache.1", mandir);
	assert_non_null(text = test_slurp(path));
	assert_contains(text, "\n.B devcache replay\n");
	assert_contains(text, "\\-\\-summary");
	assert_contains(text, "devcache\\-trace (5)");
	free(text);

	if (!groff || !*groff)
		skip_because("groff not found: the page cannot be checked");
	char cmd[8192];
	snprintf(cmd, sizeof cmd, "'%s' -man -Tutf8 -ww -z '%s/devcache-trace.5' 2>&1", groff,
		 mandir);
	FILE *p = popen(cmd, "r");
	char out[4096] = "";
	assert_non_null(p);
	size_t n = fread(out, 1, sizeof out - 1, p);
	out[n] = '\0';
	assert_int_equal(pclose(p), 0);
	assert_string_equal(out, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(replays_and_reports),
		cmocka_unit_test(json_output),
		cmocka_unit_test(summary_table),
		cmocka_unit_test(bad_traces_exit_2),
		cmocka_unit_test(gzip_and_several_files),
		cmocka_unit_test(tunables_change_the_result),
		cmocka_unit_test(out_of_memory_is_counted),
		cmocka_unit_test(emulates_the_traced_device),
		cmocka_unit_test(one_free_block_is_no_fragmentation),
		cmocka_unit_test(record_and_replay),
		cmocka_unit_test(summary_from_the_library),
		cmocka_unit_test(trace_bomb),
		cmocka_unit_test(faults_while_replaying),
		cmocka_unit_test(pages),
	};

	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, tmpdir_setup, tmpdir_teardown);
}
