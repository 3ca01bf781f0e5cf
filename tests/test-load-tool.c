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

#define TENSOR "model.layers.0.mlp.up_proj.weight"
#define TENSOR_SIZE 256 /* F16 [8, 16] */

static struct result r;
static char dir[256], model[512];
/* The test backend, through the environment or the global -o. */
static char good_options[4200], env_options[4300];

#define RUN(env, ...)                                                                      \
	do {                                                                               \
		const char *args_[] = {__VA_ARGS__, NULL};                                 \
		spawn_tool(&r, env, args_);                                                \
	} while (0)

static const char *const plain[] = {"LANGUAGE=C", "LC_ALL=C", NULL};
static const char *const good[] = {"LANGUAGE=C", "LC_ALL=C", env_options, NULL};

static void write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

/* A tensor's bytes: never 0, so that what the tool prints on standard output
 * can be read back as a string. */
static unsigned char tensor_byte(size_t i)
{
	return (unsigned char)(1 + (i * 7) % 255);
}

/* Two tensors; TENSOR comes second, so its bytes are not at the data's start. */
static void write_model(const char *path)
{
	const char *header = "{\"__metadata__\":{\"format\":\"pt\"},"
			     "\"model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[4],"
			     "\"data_offsets\":[0,16]},"
			     "\"" TENSOR "\":{\"dtype\":\"F16\",\"shape\":[8,16],"
			     "\"data_offsets\":[16,272]}}";
	size_t hl = strlen(header), len = 8 + hl + 16 + TENSOR_SIZE;
	unsigned char *buf = malloc(len);

	assert_non_null(buf);
	for (int i = 0; i < 8; i++)
		buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
	memcpy(buf + 8, header, hl);
	memset(buf + 8 + hl, 0x3f, 16);
	for (size_t i = 0; i < TENSOR_SIZE; i++)
		buf[8 + hl + 16 + i] = tensor_byte(i);
	write_file(path, buf, len);
	free(buf);
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
	assert_contains(r.out, "Usage: devcache load [--device D] [--repeat N] [--writable] FILE...");
	RUN(plain, "dump", "--help");
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "devcache -o KEY:VALUE dump FILE TENSOR -o OUT");
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
	snprintf(line, sizeof line, "%s on host: ", model);
	assert_contains(r.out, line);
	assert_contains(r.out, " GB/s, miss\n");
	assert_contains(r.out, "Peak RSS: ");
	assert_contains(r.out, "Model cache\n");
	/* The allocator has no part in a host load. */
	assert_null(strstr(r.out, "memory summary"));

	RUN(plain, "load", "--repeat", "3", model);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.err, "");
	assert_int_equal(count(r.out, line), 3);
	assert_int_equal(count(r.out, ", miss\n"), 1);
	assert_int_equal(count(r.out, ", hit\n"), 2);
	assert_contains(r.out, "2 hit(s)");
}

static void load_on_a_device(void **state)
{
	char line[600];

	(void)state;
	RUN(good, "load", "--device", "good:0", model, "-n", "2");
	assert_int_equal(r.status, 0);
	assert_string_equal(r.err, "");
	snprintf(line, sizeof line, "%s on good:0: ", model);
	assert_int_equal(count(r.out, line), 2);
	assert_int_equal(count(r.out, ", miss\n"), 1);
	assert_int_equal(count(r.out, ", hit\n"), 1);
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
	assert_contains(r.out, ", miss\n");
	assert_contains(r.out, " (writable)");
}

static void load_failures_exit_1(void **state)
{
	char bad[512], missing[512];

	(void)state;
	path_of(bad, sizeof bad, "bad.safetensors");
	write_file(bad, "not a model at all", 18);
	RUN(plain, "load", bad);
	assert_int_equal(r.status, 1);
	assert_contains(r.err, "bad.safetensors: neither a safetensors nor a GGUF file");
	path_of(missing, sizeof missing, "missing.safetensors");
	RUN(plain, "load", missing);
	assert_int_equal(r.status, 1);
	assert_contains(r.err, "missing.safetensors: cannot open");
	/* The good file is still loaded; the status says one failed. */
	RUN(plain, "load", missing, model);
	assert_int_equal(r.status, 1);
	assert_contains(r.out, ", miss\n");
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

static void dump_to_a_file(void **state)
{
	char out[512];
	unsigned char *bytes;
	struct stat st;

	(void)state;
	path_of(out, sizeof out, "host.bin");
	RUN(plain, "dump", model, TENSOR, "-o", out);
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
	RUN(plain, "-o", good_options, "dump", "--device", "good:0", model, TENSOR, "-o", out);
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
	RUN(good, "dump", model, TENSOR, "-d", "good:0", "-o", "-");
	assert_int_equal(r.status, 0);
	assert_int_equal(strlen(r.out), TENSOR_SIZE);
	assert_tensor_bytes((const unsigned char *)r.out);
}

static void dump_errors(void **state)
{
	char out[512];

	(void)state;
	path_of(out, sizeof out, "none.bin");
	RUN(plain, "dump", model, "model.no_such.weight", "-o", out);
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
