/* tap.h - what every test program includes: cmocka with TAP output, and small helpers. */
#ifndef DEVCACHE_TEST_TAP_H
#define DEVCACHE_TEST_TAP_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Run the group with TAP output, which automake's tap-driver reads. */
#define RUN_TAP(tests) (cmocka_set_message_output(CM_OUTPUT_TAP), cmocka_run_group_tests(tests, NULL, NULL))

/* assert that haystack contains needle, showing both when it does not. */
#define assert_contains(haystack, needle)                                                       \
	do {                                                                                   \
		const char *h_ = (haystack), *n_ = (needle);                                       \
		if (!h_ || !strstr(h_, n_))                                                        \
			fail_msg("expected \"%s\" in \"%s\"", n_, h_ ? h_ : "(null)");           \
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

#endif
