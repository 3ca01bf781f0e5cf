/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* tap.h - what every test program includes: cmocka with TAP output, and small helpers. */
#ifndef DEVCACHE_TEST_TAP_H
#define DEVCACHE_TEST_TAP_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* 1 in a ThreadSanitizer build, whose shadow memory adds several bytes of
 * resident memory for each byte the program touches: a test that bounds a
 * process's peak memory cannot apply the bound there. */
#if defined(__SANITIZE_THREAD__)
#define TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TEST_TSAN 1
#endif
#endif
#ifndef TEST_TSAN
#define TEST_TSAN 0
#endif

/* 1 in an AddressSanitizer or ThreadSanitizer build, which reserves
 * terabytes of address space at start: a test that bounds RLIMIT_AS
 * cannot apply the bound. */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_SANITIZED 1
#endif
#endif
#ifndef TEST_SANITIZED
#define TEST_SANITIZED TEST_TSAN
#endif

/* Run the group with TAP output, which automake's tap-driver reads. */
#define RUN_TAP(tests) (cmocka_set_message_output(CM_OUTPUT_TAP), cmocka_run_group_tests(tests, NULL, NULL))

/* assert that haystack contains needle, showing both when it does not. */
#define assert_contains(haystack, needle)                                                       \
	do {                                                                                   \
		const char *h_ = (haystack), *n_ = (needle);                                       \
		if (!h_ || !strstr(h_, n_))                                                        \
			fail_msg("expected \"%s\" in \"%s\"", n_, h_ ? h_ : "(null)");           \
	} while (0)

#define assert_not_contains(haystack, needle)                                                   \
	do {                                                                                   \
		const char *h_ = (haystack), *n_ = (needle);                                       \
		if (h_ && strstr(h_, n_))                                                          \
			fail_msg("did not expect \"%s\" in \"%s\"", n_, h_);                       \
	} while (0)

/* Skip the current test, saying why (tests/run-tap.sh puts the reason on the
 * TAP line: "ok N # SKIP reason"). */
#define skip_because(...)                                                                      \
	do {                                                                                   \
		print_message("# skip-reason: " __VA_ARGS__);                                      \
		print_message("\n");                                                               \
		skip();                                                                            \
	} while (0)

/* An environment variable the test needs, or a failed test naming it. */
static inline const char *test_env(const char *name)
{
	const char *v = getenv(name);

	if (!v || !*v)
		fail_msg("%s is not set: run this test through make check", name);
	return v;
}

/* The whole of a file, NUL-terminated (it may hold NULs of its own), or NULL
 * if it cannot be opened; the caller frees it. */
static inline char *test_slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t len = 0, cap = 0, n;

	if (!f)
		return NULL;
	do {
		if (cap - len < 4096) {
			cap = cap ? 2 * cap : 65536;
			buf = realloc(buf, cap + 1);
			assert_non_null(buf);
		}
		n = fread(buf + len, 1, cap - len, f);
		len += n;
	} while (n > 0);
	fclose(f);
	buf[len] = '\0';
	return buf;
}

/* The same, failing the test when the file cannot be read. */
static inline char *test_slurp_must(const char *path)
{
	char *text = test_slurp(path);

	if (!text)
		fail_msg("cannot read %s", path);
	return text;
}

/* A fresh directory /tmp/devcache-TAG-XXXXXX in dir, and its removal. */
static inline int test_tmpdir_make(char *dir, size_t size, const char *tag)
{
	snprintf(dir, size, "/tmp/devcache-%s-XXXXXX", tag);
	return mkdtemp(dir) ? 0 : -1;
}

/* With TEST_KEEP_TMPDIR set to a folder, the directory is moved there
 * instead: fuzz/harvest-seeds takes the files the tests wrote as seeds. */
static inline int test_tmpdir_remove(const char *dir)
{
	const char *keep = getenv("TEST_KEEP_TMPDIR");
	char cmd[8400];

	if (keep && *keep)
		snprintf(cmd, sizeof cmd, "mv '%s' '%s/'", dir, keep);
	else
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* The fixture of the tests that write files: at file scope,
 * TEST_TMPDIR_FIXTURE("tag") declares char dir[64] and the cmocka setup and
 * teardown tmpdir_setup and tmpdir_teardown, which make a fresh
 * /tmp/devcache-tag-XXXXXX in dir and remove it (per test or per group).
 * A test program of several files shares one: TEST_TMPDIR_FIXTURE_EXTERN
 * in their header declares it, and TEST_TMPDIR_FIXTURE_SHARED("tag") in
 * one of them defines it. */
#define TEST_TMPDIR_FIXTURE(tag) TMPDIR_FIXTURE_(static, tag)
#define TEST_TMPDIR_FIXTURE_SHARED(tag) TMPDIR_FIXTURE_(, tag)
#define TEST_TMPDIR_FIXTURE_EXTERN                                                              \
	extern char dir[64];                                                                   \
	int tmpdir_setup(void **state);                                                        \
	int tmpdir_teardown(void **state)

#define TMPDIR_FIXTURE_(linkage, tag)                                                           \
	linkage char dir[64];                                                                  \
	linkage int tmpdir_setup(void **state)                                                 \
	{                                                                                      \
		(void)state;                                                                   \
		return test_tmpdir_make(dir, sizeof dir, tag);                                 \
	}                                                                                      \
	linkage int tmpdir_teardown(void **state)                                              \
	{                                                                                      \
		(void)state;                                                                   \
		return test_tmpdir_remove(dir);                                                \
	}                                                                                      \
	linkage char dir[64] /* the caller's ';' ends the fixture */

/* A test that runs in a directory of its own. */
#define TMPDIR_TEST(f) cmocka_unit_test_setup_teardown(f, tmpdir_setup, tmpdir_teardown)

#endif
