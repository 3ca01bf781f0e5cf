/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-progress.c - devcache load's progress bar on a terminal: drawn, within 80 columns, with rate and time left, and erased. */
#include "tap.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model-writer.h"
#include "spawn.h"

static struct result r;
static char dir[256], options[4300];
/* The fake CUDA driver, each copy taking 40 ms, and 1 MiB staging buffers:
 * a load of a few MiB takes long enough for the bar to be drawn (after
 * 100 ms) a few times. */
static const char *const slow[] = {"LANGUAGE=C", "LC_ALL=C", "FAKE_CUDA_COPY_MS=40", options,
				   NULL};

static int setup(void **state)
{
	(void)state;
	snprintf(options, sizeof options,
		 "DEVCACHE_OPTIONS=backend_path:%s,backends:cuda,cuda_library:%s/libfake-cuda.so,"
		 "staging_buffer_size:1M",
		 test_env("TEST_BACKENDS"), test_env("TEST_FAKES"));
	return test_tmpdir_make(dir, sizeof dir, "progress");
}

/* The tests run the cuda backend on its fake driver. */
static void need_fake_cuda(void)
{
	char lib[4200];

	snprintf(lib, sizeof lib, "%s/libfake-cuda.so", test_env("TEST_FAKES"));
	if (access(lib, R_OK) != 0)
		skip_because("the fake CUDA driver is not built");
}

static int teardown(void **state)
{
	(void)state;
	return test_tmpdir_remove(dir);
}

/* The columns a bar takes on the terminal: its characters (UTF-8). */
static size_t columns(const char *s, size_t n)
{
	size_t w = 0;

	for (size_t i = 0; i < n; i++)
		w += ((unsigned char)s[i] & 0xc0) != 0x80;
	return w;
}

/* Each bar the terminal received: "\r", the bar, "\033[K", within 79
 * columns (the last one is left for the cursor); returns how many. */
static int check_bars(const char *tty, const char *label)
{
	int bars = 0;

	for (const char *p = strchr(tty, '\r'); p; p = strchr(p, '\r')) {
		const char *end = strstr(p, "\033[K");

		assert_non_null(end);
		p++;
		if (end == p) /* "\r\033[K": the bar erased */
			continue;
		bars++;
		char bar[512];
		snprintf(bar, sizeof bar, "%.*s", (int)(end - p), p);
		if (columns(bar, strlen(bar)) > 79)
			fail_msg("a bar of %zu columns: \"%s\"", columns(bar, strlen(bar)), bar);
		/* "label [####......]  42% 1.2 MiB / 3.0 MiB, 350.0 MiB/s, 0:05 left" */
		assert_non_null(strstr(bar, label));
		assert_non_null(strstr(bar, " ["));
		assert_non_null(strstr(bar, "% "));
		assert_non_null(strstr(bar, " / "));
		assert_non_null(strstr(bar, "/s, "));
		assert_non_null(strstr(bar, " left"));
	}
	return bars;
}

/* Write path with tensors t[0..n) and load it onto the fake cuda:0, its
 * standard error on a terminal or not; the bars the terminal received. */
static int load(const char *path, const struct mw_tensor *t, size_t n, bool tty)
{
	need_fake_cuda();
	mw_safetensors(path, t, n, 1, NULL);
	if (tty)
		RUN_TOOL_ON_TTY(slow, "load", "--device", "cuda:0", path);
	else
		RUN_TOOL(slow, "load", "--device", "cuda:0", path);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, " on cuda:0:"));
	assert_non_null(strstr(r.out, "miss in "));
	int bars = check_bars(r.err, strrchr(path, '/') + 1);
	if (tty && bars < 1)
		fail_msg("no progress bar on the terminal; it received:\n%s", r.err);
	return bars;
}

static void the_bar_shows_rate_and_time_left(void **state)
{
	static const struct mw_tensor t[] = {{"a", 3u << 20, 0}, {"b", 5u << 20, 0}};
	char path[512];

	(void)state;
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	load(path, t, 2, true);
	/* Erased before the result line, which goes to standard output. */
	assert_non_null(strstr(r.err, "\r\033[K"));
}

/* A path longer than the line is cut from the left: the bar still fits. */
static void a_long_label_is_cut_from_the_left(void **state)
{
	static const struct mw_tensor t[] = {{"a", 6u << 20, 0}};
	char sub[512], path[700];

	(void)state;
	snprintf(sub, sizeof sub, "%s/%s", dir,
		 "a-folder-whose-name-alone-is-longer-than-the-whole-progress-bar-line-"
		 "of-an-eighty-column-terminal");
	assert_int_equal(mkdir(sub, 0700), 0);
	snprintf(path, sizeof path, "%s/long.safetensors", sub);
	load(path, t, 1, true);
}

/* Not a terminal: no bar at all. */
static void no_bar_off_a_terminal(void **state)
{
	static const struct mw_tensor t[] = {{"a", 3u << 20, 0}};
	char path[512];

	(void)state;
	snprintf(path, sizeof path, "%s/quiet.safetensors", dir);
	assert_int_equal(load(path, t, 1, false), 0);
	assert_string_equal(r.err, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_bar_shows_rate_and_time_left),
		cmocka_unit_test(a_long_label_is_cut_from_the_left),
		cmocka_unit_test(no_bar_off_a_terminal),
	};

	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, setup, teardown);
}
