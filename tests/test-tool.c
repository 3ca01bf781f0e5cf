/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-tool.c - the devcache command: its output and its exit statuses (0 ok, 1 runtime, 2 usage/config). */
#include "tap.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include <devcache.h>

#include "spawn.h"

static struct result r;

#define RUN(env, ...) RUN_TOOL(env, __VA_ARGS__)

static const char *const plain[] = {"LANGUAGE=C", "LC_ALL=C", NULL};

static void help_and_version(void **state)
{
	char version[64];

	(void)state;
	RUN(plain, "--help");
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "Usage: devcache [OPTION]... COMMAND");
	assert_contains(r.out, "info");
	assert_contains(r.out, "config --check FILE");
	assert_contains(r.out, "Exit status: 0 success, 1 runtime failure, 2 usage");
	RUN(plain, "help");
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "Usage: devcache");
	RUN(plain, "--version");
	assert_int_equal(r.status, 0);
	snprintf(version, sizeof version, "devcache (libdevcache) %s\n", devcache_version_string());
	assert_string_equal(r.out, version);
}

static void usage_errors_exit_2(void **state)
{
	(void)state;
	/* As GNU tools do: a short usage, where to read more, status 2. */
	RUN(plain, NULL);
	assert_int_equal(r.status, 2);
	assert_string_equal(r.out, "");
	assert_string_equal(r.err, "Usage: devcache [OPTION]... COMMAND [ARG]...\n"
				   "Try 'devcache --help' for more information.\n");
	RUN(plain, "frobnicate");
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "devcache: unknown command 'frobnicate'");
	RUN(plain, "--no-such-option");
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "Try 'devcache --help'");
	/* A command's errors name it, and point at its own help. */
	RUN(plain, "info", "extra");
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "devcache info: unexpected argument 'extra'\n"
			       "Try 'devcache info --help' for more information.\n");
	RUN(plain, "config", "extra");
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "devcache config: unexpected argument 'extra'");
	RUN(plain, "config", "--bogus");
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "Try 'devcache config --help'");
	RUN(plain, "load");
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "devcache load: no file given\n");
	RUN(plain, "help", "frobnicate");
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "unknown command 'frobnicate'");
}

static void info_lists_host(void **state)
{
	(void)state;
	RUN(plain, "info");
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "libdevcache ");
	assert_contains(r.out, "host       loaded, 1 device");
	assert_contains(r.out, "Devices:\n  host       Host memory");
	assert_contains(r.out, "capabilities: vmm host-memory");
	assert_string_equal(r.err, "");
}

static void info_explains_each_backend(void **state)
{
	char path[4096];
	const char *env[] = {path, "LANGUAGE=C", "LC_ALL=C", NULL};

	(void)state;
	snprintf(path, sizeof path, "DEVCACHE_BACKEND_PATH=%s", test_env("TEST_MODULES"));
	RUN(env, "info");
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "good       loaded, 2 devices\n");
	assert_contains(r.out, "badabi     unavailable: built for backend ABI 999");
	assert_contains(r.out, "nodevice   loaded, 0 devices: simulated runtime");
	assert_contains(r.out, "good:1     Fake device 1");
	assert_contains(r.out, "PCI bus: 0000:02:00.0");
	RUN(env, "-o", "backends:^good", "info");
	assert_contains(r.out, "good       excluded: excluded by the backends tunable");
	RUN(env, "-v", "-v", "info");
	assert_int_equal(r.status, 0);
	assert_contains(r.err, "libdevcache: debug: backend missing");
	assert_contains(r.err, "missing mandatory entry mem_alloc");
}

/* text with each line break and the indent after it made one space: the
 * descriptions as written, before they were wrapped to the terminal. */
static void unwrap(char *text)
{
	char *out = text;

	for (char *p = text; *p; p++) {
		if (*p == '\n' && p[1] == ' ') {
			while (p[1] == ' ')
				p++;
			*out++ = ' ';
		} else {
			*out++ = *p;
		}
	}
	*out = '\0';
}

/* A folder of DEVCACHE_BACKEND_PATH that is not there is said to be
 * missing, by the library and by info, not taken for one without modules. */
static void info_says_a_missing_backend_folder_is_missing(void **state)
{
	const char *env[] = {"DEVCACHE_BACKEND_PATH=/nonexistent/devcache-backends", "LANGUAGE=C",
			     "LC_ALL=C", NULL};

	(void)state;
	RUN(env, "info");
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "  (/nonexistent/devcache-backends: no such directory)\n");
	assert_not_contains(r.out, "no backend module found");
	assert_contains(r.err, "libdevcache: warning: backend_path (DEVCACHE_BACKEND_PATH): "
			       "/nonexistent/devcache-backends: no such directory");
	/* The default folder missing (no module installed) is no warning. */
	RUN(plain, "info");
	assert_not_contains(r.err, "no such directory");
}

static void config_prints_every_tunable(void **state)
{
	(void)state;
	RUN(plain, "config");
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "NAME = VALUE (ORIGIN)\n    DESCRIPTION\n");
	unwrap(r.out);
	size_t pending = 0;
	for (size_t i = 0; i < devcache_tunable_count(); i++) {
		devcache_tunable_desc_t d;
		char line[512];

		assert_int_equal(devcache_tunable_describe(i, &d), 0);
		snprintf(line, sizeof line, "\n%s = ", d.name);
		assert_contains(r.out, line);
		assert_contains(r.out, d.summary);
		pending += !d.effective;
	}
	assert_contains(r.out, "default");
	/* A tunable declared before its feature is marked; none is, now. */
	if (pending)
		assert_contains(r.out, "(no effect yet)");
	else
		assert_null(strstr(r.out, "(no effect yet)"));
}

static void config_shows_values_and_origins(void **state)
{
	const char *env[] = {"DEVCACHE_OPTIONS=max_split_size_mb:512,log_level:error", "LANGUAGE=C",
			     NULL};

	(void)state;
	RUN(env, "-o", "log_level:info", "config");
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "512M");
	assert_contains(r.out, "DEVCACHE_OPTIONS");
	/* -o is the command line's, whichever side of the command. */
	assert_contains(r.out, "log_level = info (command line)\n");
	RUN(env, "config", "--options", "log_level:warning");
	assert_contains(r.out, "log_level = warning (command line)\n");
}

static void config_errors_exit_2_naming_tunable_and_value(void **state)
{
	const char *env[] = {"DEVCACHE_OPTIONS=max_split_size_mb:abc", "LANGUAGE=C", NULL};

	(void)state;
	RUN(env, "config");
	assert_int_equal(r.status, 2);
	assert_string_equal(r.out, "");
	assert_contains(r.err, "devcache config: DEVCACHE_OPTIONS: max_split_size_mb: invalid size 'abc'");
	/* A tunable of the command line is blamed on it, not on the function
	 * the tool calls. */
	RUN(plain, "-o", "no_such_tunable:1", "info");
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "devcache info: command line (-o): unknown tunable 'no_such_tunable'");
	assert_not_contains(r.err, "devcache_open");
	RUN(plain, "-o", "max_split_size:512", "config");
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "did you mean 'max_split_size_mb'?");
	RUN(plain, "inspect", "-o", "max_split_size:512", "no-such.safetensors");
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "devcache inspect: command line (-o): unknown tunable "
			       "'max_split_size' (did you mean 'max_split_size_mb'?)");
}

/* The sample devcache.conf lists every tunable, and uncommented it is valid. */
static void sample_configuration_is_complete_and_valid(void **state)
{
	char sample[4096], copy[] = "/tmp/devcache-sample-XXXXXX", line[4096];
	int fd = mkstemp(copy);
	FILE *in, *out = fd >= 0 ? fdopen(fd, "w") : NULL;
	size_t core = 0;

	(void)state;
	snprintf(sample, sizeof sample, "%s/../devcache.conf.example", test_env("MAN_BUILDDIR"));
	in = fopen(sample, "r");
	if (!in)
		fail_msg("%s: %s", sample, strerror(errno));
	assert_non_null(out);
	for (bool module = false; fgets(line, sizeof line, in);) {
		/* A module's tunable is known only where the module is. */
		if (strstr(line, "backend module: known where it is installed"))
			module = true;
		else if (line[0] == '#' && line[1] >= 'a' && line[1] <= 'z' && !module)
			fputs(line + 1, out), core++;
		else if (line[0] == '\n')
			module = false;
	}
	fclose(in);
	fclose(out);
	assert_int_equal(core, devcache_tunable_count());
	RUN(plain, "config", "--check", copy);
	assert_string_equal(r.err, "");
	assert_int_equal(r.status, 0);
	unlink(copy);
	/* And the modules' own, each with its module named. */
	char *text = test_slurp_must(sample);
	assert_contains(text, "# Declared by the cuda backend module");
	assert_contains(text, "\n#cuda_library = libcuda.so.1\n");
	assert_contains(text, "\n#ze_library = ");
	assert_contains(text, "\n#hip_library = ");
	free(text);
}

static void config_check_validates_a_file(void **state)
{
	char dir[] = "/tmp/devcache-test-XXXXXX", good[256], bad[256];
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(good, sizeof good, "%s/good.conf", dir);
	snprintf(bad, sizeof bad, "%s/bad.conf", dir);
	f = fopen(good, "w");
	fputs("# a comment\nmax_split_size_mb = 512\nbackends: cuda, hip  # trailing\n", f);
	fclose(f);
	f = fopen(bad, "w");
	fputs("caching = true\nmemory_fraction = 2\n\nlog_level = loud\n", f);
	fclose(f);
	RUN(plain, "config", "--check", good);
	assert_int_equal(r.status, 0);
	assert_contains(r.out, "good.conf: valid");
	RUN(plain, "config", "--check", bad);
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "bad.conf:2: memory_fraction: '2' is out of range");
	assert_contains(r.err, "bad.conf:4: log_level: invalid enum 'loud'");
	assert_contains(r.err, "one of: none, error, warning, info, debug");
	unlink(good);
	unlink(bad);
	RUN(plain, "config", "--check", bad);
	assert_int_equal(r.status, 2);
	assert_contains(r.err, "cannot open configuration file");
	RUN(plain, "config", "--check", dir);
	assert_int_equal(r.status, 1);
	rmdir(dir);
}

static void unknown_environment_variables_are_warned_about(void **state)
{
	const char *env[] = {"DEVCACHE_OPTION=caching:0", "LANGUAGE=C", NULL};

	(void)state;
	RUN(env, "info");
	assert_int_equal(r.status, 0);
	assert_contains(r.err, "libdevcache: warning: unknown environment variable DEVCACHE_OPTION "
			       "is ignored (did you mean DEVCACHE_OPTIONS?)");
}

/* The tool does not read PyTorch's variable, and says so when it is set:
 * devcache config would otherwise show its settings' defaults as if they
 * applied. */
static void pytorch_variable_is_said_not_read(void **state)
{
	const char *env[] = {"PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512", "LANGUAGE=C", NULL};
	const char *empty[] = {"PYTORCH_CUDA_ALLOC_CONF=", "LANGUAGE=C", NULL};

	(void)state;
	RUN(env, "config");
	assert_int_equal(r.status, 0);
	assert_contains(r.err, "devcache config: PYTORCH_CUDA_ALLOC_CONF is set, and this tool does "
			       "not read it");
	assert_contains(r.out, "max_split_size_mb = unlimited (default)");
	RUN(empty, "info");
	assert_int_equal(r.status, 0);
	assert_not_contains(r.err, "PYTORCH_CUDA_ALLOC_CONF");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(help_and_version),
		cmocka_unit_test(usage_errors_exit_2),
		cmocka_unit_test(info_lists_host),
		cmocka_unit_test(info_explains_each_backend),
		cmocka_unit_test(info_says_a_missing_backend_folder_is_missing),
		cmocka_unit_test(config_prints_every_tunable),
		cmocka_unit_test(config_shows_values_and_origins),
		cmocka_unit_test(config_errors_exit_2_naming_tunable_and_value),
		cmocka_unit_test(config_check_validates_a_file),
		cmocka_unit_test(sample_configuration_is_complete_and_valid),
		cmocka_unit_test(unknown_environment_variables_are_warned_about),
		cmocka_unit_test(pytorch_variable_is_said_not_read),
	};
	return RUN_TAP(tests);
}
